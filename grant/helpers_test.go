package grant

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// copyFixture copies testdata/name into a fresh folder as dstName, mode 0600
// (a checkout may leave fixtures group-writable, which the loaders refuse).
func copyFixture(t *testing.T, name, dstName string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), dstName)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeJSON writes v as a 0600 JSON file.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// assertRefused checks that err matches want and, when field is set, that
// it arrives in a FieldError for that field.
func assertRefused(t *testing.T, err, want error, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %q does not match %q", err, want)
	}
	if field == "" {
		return
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %q is not a *FieldError", err)
	}
	if fe.Field != field {
		t.Fatalf("field = %q, want %q (error %q)", fe.Field, field, err)
	}
	if !strings.Contains(err.Error(), field) {
		t.Fatalf("message %q does not name the field %q", err, field)
	}
}

// fileRefusal is a fixture a loader refuses: the error it matches, the
// field it names (or "") and words its message says (or "").
type fileRefusal struct {
	fixture string
	want    error
	field   string // FieldError.Field, when the refusal names one
	message string // what the message must say besides
}

// testLoadRefusals copies each fixture to name in a fresh folder, loads it
// with load and checks the refusal, and that the message names the file.
func testLoadRefusals[T any](t *testing.T, name string, load func(string) (*T, error), tests []fileRefusal) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			path := copyFixture(t, tt.fixture, name)
			v, err := load(path)
			if v != nil {
				t.Fatalf("loaded %+v with error %v", v, err)
			}
			assertRefused(t, err, tt.want, tt.field)
			if !strings.Contains(err.Error(), path) {
				t.Errorf("message %q does not name the file", err)
			}
			if tt.message != "" && !strings.Contains(err.Error(), tt.message) {
				t.Errorf("message %q does not say %q", err, tt.message)
			}
		})
	}
}

// assertSavesOverLoose puts a file that group and others can write at out,
// saves over it with save, and checks the file is then mode 600 and loads
// back with load as want: a looser file is replaced, not written through.
func assertSavesOverLoose[T any](t *testing.T, out string, save func(string) error, load func(string) (*T, error), want *T) {
	t.Helper()
	if err := os.WriteFile(out, []byte("{}"), 0o666); err != nil {
		t.Fatal(err)
	}
	// Past the umask.
	if err := os.Chmod(out, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := save(out); err != nil {
		t.Fatal(err)
	}
	// The write bits of group and others go (a loader refuses them); the
	// read bits stay, as an operator set them for the serving account.
	testutil.WantMode(t, out, 0o644)
	back, err := load(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("reloaded %+v\nwant %+v", back, want)
	}
}

// assertNoTempFiles fails if dir holds a leftover temporary file.
func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", filepath.Join(dir, e.Name()))
		}
	}
}

// wideManifest builds a manifest of n approved single documents, each under
// its own key, and one destination under a key of its own.
func wideManifest(n int) *Manifest {
	m := &Manifest{Version: ManifestVersion, Documents: map[string]Document{}, Destinations: map[string]Destination{
		"out": {Label: "Out", TTag: "dest-key"},
	}}
	for i := range n {
		id := fmt.Sprintf("doc-%03d", i)
		m.Documents[id] = Document{
			Approved: true, Version: 1, Size: 1,
			Path:   "documents/" + id + ".bin",
			TTag:   fmt.Sprintf("key-%03d", i),
			IV:     "AAECAwQFBgcICQoLDA0ODw==",
			SHA256: strings.Repeat("ab", 32),
		}
	}
	return m
}
