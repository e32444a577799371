//go:build unix

package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// FuzzOpen checks the security claim itself: whatever the path, an accepted
// one opens a regular file that was put inside the root, never anything
// outside it (the fixture holds links out, loops, a hard link to a file
// outside, a sibling whose name starts with the root's). In inputs, @ROOT@
// and @BASE@ stand for the fixture's root and the folder around it, so the
// committed corpus can name absolute paths.
func FuzzOpen(f *testing.F) {
	fx, r := newFixture(f)
	for _, c := range fx.Cases() {
		f.Add(strings.ReplaceAll(c.Path, fx.Root, "@ROOT@"))
	}
	inside := map[string]os.FileInfo{}
	for rel := range fx.Inside {
		fi, err := os.Lstat(filepath.Join(fx.Root, rel))
		if err != nil {
			f.Fatal(err)
		}
		inside[rel] = fi
	}
	known := map[string]bool{}
	for _, c := range []string{string(refusal.PathEmpty), string(refusal.PathForm), string(refusal.UNCOrDevice), string(refusal.AlternateStream), string(refusal.OutsideRoot),
		string(refusal.NotFound), string(refusal.Unresolvable), string(refusal.IsADirectory), string(refusal.NotRegular), string(refusal.HardLinked), string(refusal.FileChanged)} {
		known[c] = true
	}
	f.Fuzz(func(t *testing.T, p string) {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "@ROOT@", fx.Root), "@BASE@", fx.Base)
		file, err := r.Open(p)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || !known[string(fe.Code)] {
				t.Fatalf("Open(%q): not a path refusal: %v", p, err)
			}
			return
		}
		defer file.Close()
		want, ok := inside[file.Rel]
		if !ok {
			t.Fatalf("Open(%q) accepted %q (%s), which is not a file put inside the root", p, file.Rel, file.Abs)
		}
		if !os.SameFile(want, file.Info) {
			t.Fatalf("Open(%q) opened another file than %s", p, file.Rel)
		}
		if !Within(fx.Root, file.Abs, Unix) {
			t.Fatalf("Open(%q): Abs %q is not inside the root", p, file.Abs)
		}
		if real, err := filepath.EvalSymlinks(file.Abs); err != nil || real != file.Abs {
			t.Fatalf("Open(%q): Abs %q resolves to %q (%v)", p, file.Abs, real, err)
		}
	})
}
