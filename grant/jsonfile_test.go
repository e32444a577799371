package grant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := writeFileAtomic(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "two" {
		t.Fatalf("content %q, %v; want two", got, err)
	}
	testutil.WantMode(t, path, 0o600)
	assertNoTempFiles(t, dir)

	// The rename fails (a non-empty folder is in the way): the temporary
	// file is removed and the folder is untouched.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(blocked, []byte("three")); err == nil {
		t.Fatal("writing over a non-empty folder succeeded")
	}
	assertNoTempFiles(t, dir)
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("folder holds %d entries after a failed write, want 2", len(entries))
	}
}

func TestDecodeStrict(t *testing.T) {
	type inner struct {
		Name string `json:"name"`
	}
	type outer struct {
		Items map[string]inner `json:"items"`
		List  []inner          `json:"list"`
	}
	tests := []struct {
		name, in string
		want     error
		message  string
	}{
		{"valid", `{"items": {"a": {"name": "x"}, "b": {}}, "list": [{"name": "y"}]}`, nil, ""},
		{"unknown field inside a map", `{"items": {"a": {"name": "x", "extra": 1}}}`, ErrUnknownField, `"extra" at items.a`},
		{"unknown field inside a list", `{"list": [{"name": "y"}, {"nme": "z"}]}`, ErrUnknownField, `"nme" at list[1]`},
		{"duplicate field", `{"list": [], "list": []}`, ErrDuplicateKey, `"list" at the top level`},
		{"duplicate map key ignoring case", `{"items": {"Doc": {}, "doc": {}}}`, ErrDuplicateKey, `"doc" at items`},
		{"duplicate deep", `{"list": [{"name": "a", "Name": "b"}]}`, ErrDuplicateKey, `at list[0]`},
		{"wrong type", `{"list": {}}`, ErrMalformed, "list"},
		{"syntax", "{\n\"list\": [,]}", ErrMalformed, "line 2"},
		{"trailing", `{} {}`, ErrMalformed, "after"},
		{"empty", ``, ErrMalformed, ""},
		{"too deep", strings.Repeat("[", 40) + strings.Repeat("]", 40), ErrMalformed, "deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v outer
			err := decodeStrict([]byte(tt.in), &v)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("decodeStrict = %v, want %v", err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("message %q does not say %q", err, tt.message)
			}
		})
	}
}

func TestReadSecureFileLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, make([]byte, 101), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readSecureFile(path, 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("101 bytes with a limit of 100: %v", err)
	}
	if data, err := readSecureFile(path, 101); err != nil || len(data) != 101 {
		t.Fatalf("101 bytes with a limit of 101: %d, %v", len(data), err)
	}
}

// Two unknown fields: the place named is the place of the field named.
func TestUnknownFieldLocation(t *testing.T) {
	type inner struct {
		Name string `json:"name"`
	}
	var v struct {
		A inner `json:"a"`
		B inner `json:"b"`
	}
	err := decodeStrict([]byte(`{"b": {"zeta": 1}, "a": {"yod": 1}}`), &v)
	if !errors.Is(err, ErrUnknownField) {
		t.Fatalf("decodeStrict = %v", err)
	}
	msg := err.Error()
	if !(strings.Contains(msg, `"zeta" at b`) || strings.Contains(msg, `"yod" at a`)) {
		t.Fatalf("message %q pairs a field with another field's place", msg)
	}
}
