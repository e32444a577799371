package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pdmcp/pdmcp/internal/strictjson"
)

// Size limits of the files read here. They are far above any real file and
// only keep a wrong path (a device, a huge log) from being read whole.
const (
	maxGrantBytes    = 1 << 20
	maxManifestBytes = 64 << 20
	maxSeedBytes     = 4 << 20
	// maxJSONDepth is deeper than any of these formats nests.
	maxJSONDepth = 32
)

// readSecureFile reads a regular file of at most limit bytes, refusing one
// that group or others can write. The mode is checked on the open file, so
// the file checked is the file read.
func readSecureFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	// Windows has no group/other write bits to check; its ACLs are the
	// operator's business.
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0 {
		return nil, &ModeError{Path: path, Mode: fi.Mode()}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w (more than %d bytes)", path, ErrTooLarge, limit)
	}
	return data, nil
}

// decodeStrict decodes one JSON object into v, refusing unknown fields,
// duplicate keys and anything after the object.
func decodeStrict(data []byte, v any) error {
	if err := checkKeys(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			if at, found := locateUnknownField(data, reflect.TypeOf(v), name); found {
				return fmt.Errorf("%w %s at %s", ErrUnknownField, name, strictjson.DisplayPath(at))
			}
			return fmt.Errorf("%w %s", ErrUnknownField, name)
		}
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the JSON object", ErrMalformed)
	}
	return nil
}

// locateUnknownField finds the object holding the field quoted (as
// encoding/json quotes it) that t does not declare, so the refusal can say
// where it is: encoding/json only names the field.
func locateUnknownField(data []byte, t reflect.Type, quoted string) (string, bool) {
	name, err := strconv.Unquote(quoted)
	if err != nil {
		return "", false
	}
	var v any
	if json.Unmarshal(data, &v) != nil {
		return "", false
	}
	return findUnknown(v, t, name, "")
}

func findUnknown(v any, t reflect.Type, name, path string) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok || t == reflect.TypeFor[time.Time]() {
			return "", false
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ft, known := fieldType(t, k)
			if !known {
				if k == name {
					return path, true
				}
				continue
			}
			if at, found := findUnknown(obj[k], ft, name, strictjson.JoinPath(path, k)); found {
				return at, true
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if at, found := findUnknown(obj[k], t.Elem(), name, strictjson.JoinPath(path, k)); found {
				return at, true
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return "", false
		}
		for i, e := range arr {
			if at, found := findUnknown(e, t.Elem(), name, fmt.Sprintf("%s[%d]", path, i)); found {
				return at, true
			}
		}
	}
	return "", false
}

// fieldType finds the struct field encoding/json would fill from key:
// matched by its JSON name, ignoring case, as encoding/json matches.
func fieldType(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.EqualFold(name, key) {
			return f.Type, true
		}
	}
	return nil, false
}

// checkKeys walks the JSON tokens and refuses an object that names one key
// twice. encoding/json would keep the last silently, and a reader of the file
// could believe the first. Keys are compared ignoring case because
// encoding/json matches field names that way, and because ids become file
// names on file systems that ignore case.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkJSON(dec, "", 0); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := strictjson.Position(data, syn.Offset)
			return fmt.Errorf("%w at line %d, column %d: %w", ErrMalformed, line, col, err)
		}
		if errors.Is(err, ErrDuplicateKey) || errors.Is(err, ErrMalformed) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

func walkJSON(dec *json.Decoder, path string, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: nested deeper than %d at %s", ErrMalformed, maxJSONDepth, strictjson.DisplayPath(path))
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := make(map[string]string)
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			fold := strings.ToLower(key)
			if first, dup := seen[fold]; dup {
				return fmt.Errorf("%w: %s at %s (first as %s)", ErrDuplicateKey, strconv.Quote(key), strictjson.DisplayPath(path), strconv.Quote(first))
			}
			seen[fold] = key
			if err := walkJSON(dec, strictjson.JoinPath(path, key), depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walkJSON(dec, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

// WriteFileAtomic writes data to path through a synced temporary file and a
// rename, so a reader (or a crash) sees the old file or the new one, never
// a part. A new file gets mode 0600; a file that exists keeps its mode
// (less any write bit for group or others) and its owner and group.
func WriteFileAtomic(path string, data []byte) error { return writeFileAtomic(path, data) }

// writeFileAtomic replaces path with data: a temporary file beside it,
// given the mode and owner path has (0600 and the writer's when new),
// written and synced, then renamed over path. On any failure the
// temporary file is removed and path is untouched. A symbolic link at path
// is kept: its target is what is replaced (RealPath).
//
// Why keep them: an operator edits a manifest or grant as root, or as
// themselves, for a server that runs as a service account and reads the
// file through its group; a rewrite that reset the file to 0600 owned by
// whoever ran the command would leave that server refused at its next read.
func writeFileAtomic(path string, data []byte) (err error) {
	resolved, err := RealPath(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	path = resolved
	dir := filepath.Dir(path)
	mode := os.FileMode(0o600)
	prev, err := os.Stat(path)
	switch {
	case err == nil:
		mode = prev.Mode().Perm() &^ 0o022
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()
	// Set explicitly, so a change in CreateTemp's default cannot widen a
	// new file; the owner before the mode, as chown may clear set-id bits.
	if prev != nil {
		if err = keepOwner(f, prev); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = renameOver(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename in dir durable. It is best effort: the file is
// already complete and in place, and some systems cannot sync a folder.
func syncDir(dir string) {
	if runtime.GOOS == "windows" {
		return
	}
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}

// loadChecked reads the file of kind ("grant", "manifest", "seed record")
// at path as [readSecureFile] does, decodes it strictly and checks it. It
// returns the real path read too (RealPath: a symbolic link resolved), which
// a manifest keeps as its File.
func loadChecked[T any](kind, path string, limit int64, check func(*T) error) (*T, string, error) {
	abs, err := RealPath(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", kind, path, err)
	}
	data, err := readSecureFile(abs, limit)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", kind, err)
	}
	v := new(T)
	if err := decodeStrict(data, v); err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", kind, abs, err)
	}
	if err := check(v); err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", kind, abs, err)
	}
	return v, abs, nil
}

// encodeChecked checks v and returns its on-disk form; errors name the
// file as kind and name.
func encodeChecked(kind, name string, v any, check func() error) ([]byte, error) {
	if err := check(); err != nil {
		return nil, fmt.Errorf("%s %s: not saved: %w", kind, name, err)
	}
	data, err := marshalFile(v)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return data, nil
}

// marshalFile is the on-disk form: indented, ending in a newline.
func marshalFile(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
