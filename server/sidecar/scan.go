package sidecar

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/pdmcp/pdmcp/server/journal"
)

// ProblemKind says what is wrong with one file Scan looked at.
type ProblemKind string

// Problems Scan reports. None of them is a version.
const (
	// ProblemLeftover: a sidecar whose version file does not exist, the
	// leftover of a save that stopped before it placed its version.
	ProblemLeftover ProblemKind = "leftover"
	// ProblemMismatch: a sidecar whose version file holds other bytes than
	// the ones it describes (its ciphertextSha256 differs): the file is
	// not that save's, and the sidecar is a leftover too.
	ProblemMismatch ProblemKind = "mismatch"
	// ProblemUnreadable: a file named like a sidecar that does not read as
	// one (damaged, another format, another program's).
	ProblemUnreadable ProblemKind = "unreadable"
	// ProblemTemporary: a save's or a sidecar's temporary file
	// (.pdmcp-save-*.tmp, .pdmcp-sidecar-*.tmp) left by a stopped write.
	ProblemTemporary ProblemKind = "temporary"
)

// Problem is one file Scan did not take as a version.
type Problem struct {
	Kind ProblemKind `json:"kind"`
	// Path is the file, '/'-separated, relative to the folder scanned.
	Path string `json:"path"`
	// Detail says why, for a person. It never holds a t-Tag or an IV.
	Detail string `json:"detail"`
}

// sidecarName matches a sidecar's file name: <name>.v<N>.json.
var sidecarName = regexp.MustCompile(`\.v[1-9][0-9]*\.json$`)

// Scan reads every sidecar under dir (the task folder: the manifest's
// folder) and returns the versions whose file is there with the bytes the
// sidecar describes, and a Problem for every other sidecar and every
// temporary file a stopped save left. Versions come by destination, then
// by document and section, each oldest first. Symbolic links are not
// followed. The error is for a folder that cannot be read at all.
func Scan(dir string) ([]Version, []Problem, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("sidecar: scan %s: %w", dir, err)
	}
	defer root.Close()
	var (
		vs       []Version
		problems []Problem
	)
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == "." {
				return err
			}
			problems = append(problems, Problem{Kind: ProblemUnreadable, Path: name, Detail: err.Error()})
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		base := path.Base(name)
		if strings.HasSuffix(base, ".tmp") && (strings.HasPrefix(base, tempPrefix) || strings.HasPrefix(base, ".pdmcp-save-")) {
			problems = append(problems, Problem{Kind: ProblemTemporary, Path: name,
				Detail: "the temporary file of a save that stopped before it finished"})
			return nil
		}
		if !sidecarName.MatchString(base) {
			return nil
		}
		v, p := scanOne(root, name)
		if p != nil {
			problems = append(problems, *p)
			return nil
		}
		vs = append(vs, v)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sidecar: scan %s: %w", dir, err)
	}
	sortVersions(vs)
	return vs, problems, nil
}

// scanOne reads the sidecar name and checks its version file.
func scanOne(root *os.Root, name string) (Version, *Problem) {
	v, err := Read(root, strings.TrimSuffix(name, ".json")+".bin")
	if err != nil {
		return Version{}, &Problem{Kind: ProblemUnreadable, Path: name, Detail: err.Error()}
	}
	r := v.Record
	f, err := root.Open(r.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return Version{}, &Problem{Kind: ProblemLeftover, Path: name,
			Detail: fmt.Sprintf("version %d's file %s does not exist: a save that never placed its version", r.Version, r.Path)}
	}
	if err != nil {
		return Version{}, &Problem{Kind: ProblemUnreadable, Path: name, Detail: fmt.Sprintf("open %s: %v", r.Path, err)}
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Version{}, &Problem{Kind: ProblemUnreadable, Path: name, Detail: r.Path + " is not a regular file"}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Version{}, &Problem{Kind: ProblemUnreadable, Path: name, Detail: fmt.Sprintf("read %s: %v", r.Path, err)}
	}
	if hex.EncodeToString(h.Sum(nil)) != r.CiphertextSHA256 {
		return Version{}, &Problem{Kind: ProblemMismatch, Path: name,
			Detail: fmt.Sprintf("%s holds other bytes than the version %d this sidecar describes: not its save's file", r.Path, r.Version)}
	}
	return v, nil
}

func sortVersions(vs []Version) {
	slices.SortFunc(vs, func(a, b Version) int {
		x, y := a.Record, b.Record
		// Results (with a destination) before sections.
		return cmp.Or(cmp.Compare(kindOrder(x), kindOrder(y)), cmp.Compare(x.Destination, y.Destination),
			cmp.Compare(x.DocumentID, y.DocumentID), cmp.Compare(x.FragmentID, y.FragmentID), cmp.Compare(x.Version, y.Version))
	})
}

// Rebuild puts vs (Scan's versions) back into j's record: each version the
// record lacks is added, one the record holds already is left as it is,
// and it returns how many it added. Nothing is added when one of them
// conflicts with the record (journal.ErrVersionTaken), when they name more
// than one task, or when their task is not the journal's
// (journal.ErrOtherTask); a journal with no task takes theirs.
//
// A section's document version is derived again: the commit computed it
// after the sidecar was written. Within one protect of a document (one
// DocumentBase), each saved section made the document one version newer,
// so the k-th in the order they were saved is DocumentBase+k; two
// sections saved in the same second are ordered by path.
//
// The save rows are not rebuilt: a retry of a save whose row is gone is a
// new save.
func Rebuild(ctx context.Context, j *journal.Journal, vs []Version) (int, error) {
	task := ""
	for _, v := range vs {
		if v.Task == "" {
			continue
		}
		if task != "" && v.Task != task {
			return 0, fmt.Errorf("sidecar: rebuild: the sidecars name two tasks, %q and %q: %w", task, v.Task, journal.ErrOtherTask)
		}
		task = v.Task
	}
	if err := j.BindTask(ctx, task); err != nil {
		return 0, fmt.Errorf("sidecar: rebuild: %w", err)
	}
	rows := make([]journal.Version, 0, len(vs))
	for _, v := range withDocumentVersions(vs) {
		rows = append(rows, v.Record)
	}
	n, err := j.RestoreVersions(ctx, rows)
	if err != nil {
		return 0, fmt.Errorf("sidecar: rebuild: %w", err)
	}
	return n, nil
}

// withDocumentVersions returns vs with each section's DocumentVersion
// derived as Rebuild says.
func withDocumentVersions(vs []Version) []Version {
	out := slices.Clone(vs)
	type generation struct {
		doc  string
		base int
	}
	byGen := map[generation][]int{}
	for i, v := range out {
		if v.Record.DocumentID != "" {
			g := generation{v.Record.DocumentID, v.DocumentBase}
			byGen[g] = append(byGen[g], i)
		}
	}
	for g, idx := range byGen {
		slices.SortFunc(idx, func(a, b int) int {
			x, y := out[a].Record, out[b].Record
			return cmp.Or(x.SavedAt.Compare(y.SavedAt), cmp.Compare(x.Path, y.Path))
		})
		for k, i := range idx {
			out[i].Record.DocumentVersion = g.base + k + 1
		}
	}
	return out
}

// kindOrder puts results (0) before sections (1).
func kindOrder(v journal.Version) int {
	if v.Destination != "" {
		return 0
	}
	return 1
}
