//go:build unix

package files

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/server/refusal"
)

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// On a folder that tells case apart (the filesystems tests run on), the
// stored name is the name: two files differing in case are two names, and
// names without letters or outside ASCII come back as they are.
func TestStoredNameCaseSensitive(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"q3.csv", "Q3.csv", "2026", "éé", "報告", "ÉÉ"} {
		writeFile(t, filepath.Join(root, n), n)
	}
	r, err := NewResolver(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"q3.csv", "Q3.csv", "2026", "éé", "報告", "ÉÉ"} {
		if got, err := r.storedName(r.Root(), n); err != nil || got != n {
			t.Errorf("storedName(%q) = %q, %v", n, got, err)
		}
		res, err := r.Resolve(n)
		if err != nil || res.Rel != n {
			t.Errorf("Resolve(%q) = %q, %v", n, res.Rel, err)
		}
	}
}

// caseInsensitive makes r look names up as a case-insensitive filesystem
// does (any case of a stored name finds it, and aliases stand for short 8.3
// names), over the real files; the listing stays the real one.
func caseInsensitive(r *Resolver, aliases map[string]string) {
	r.lstat = func(p string) (fs.FileInfo, error) {
		cur := string(filepath.Separator)
		for _, name := range components(p) {
			if _, err := os.Lstat(filepath.Join(cur, name)); err == nil {
				cur = filepath.Join(cur, name)
				continue
			}
			if a, ok := aliases[strings.ToUpper(name)]; ok {
				name = a
			}
			names, _ := readDirNames(cur)
			found := false
			for _, e := range names {
				if strings.EqualFold(e, name) {
					cur, found = filepath.Join(cur, e), true
					break
				}
			}
			if !found {
				return nil, &fs.PathError{Op: "lstat", Path: p, Err: fs.ErrNotExist}
			}
		}
		return os.Lstat(cur)
	}
}

// On a case-insensitive folder the path as typed is not the file's name:
// Rel (the journal's key, the name ALREADY_AN_ENVELOPE judges) is the one
// stored, every folder on the way included, and a short 8.3 name is
// expanded to the long one.
func TestStoredNameCaseInsensitive(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "Reports", "q3.csv"), "figures")
	writeFile(t, filepath.Join(root, "report.pisoft"), "{}")
	writeFile(t, filepath.Join(root, "notes-é.txt"), "notes")
	r, err := NewResolver(root)
	if err != nil {
		t.Fatal(err)
	}
	caseInsensitive(r, map[string]string{"REPORT~1.PIS": "report.pisoft"})
	for typed, want := range map[string]string{
		"Reports/q3.csv":    "Reports/q3.csv",
		"REPORTS/Q3.CSV":    "Reports/q3.csv",
		"reports/Q3.csv":    "Reports/q3.csv",
		"REPORT~1.PIS":      "report.pisoft",
		"report~1.pis":      "report.pisoft",
		"NOTES-É.TXT":       "notes-é.txt",
		"./Reports/../Q3.x": "",
	} {
		f, err := r.Open(typed)
		if want == "" {
			if codeOf(err) != string(refusal.NotFound) {
				t.Errorf("Open(%q) = %v, want NOT_FOUND", typed, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", typed, err)
			continue
		}
		if f.Rel != want {
			t.Errorf("Open(%q).Rel = %q, want the stored %q", typed, f.Rel, want)
		}
		f.Close()
	}
	if f, err := r.Open("REPORT~1.PIS"); err == nil {
		if !IsEnvelopeName(filepath.Base(f.Rel)) {
			t.Errorf("the short name's stored name %q is not judged an envelope", f.Rel)
		}
		f.Close()
	}
}
