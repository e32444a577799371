//go:build unix

package files

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdmcp/pdmcp/internal/filestest"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// newFixture is filestest's hostile folder and a Resolver on its root.
func newFixture(tb testing.TB) (*filestest.Fixture, *Resolver) {
	tb.Helper()
	fx := filestest.New(tb)
	r, err := NewResolver(fx.Root)
	if err != nil {
		tb.Fatal(err)
	}
	return fx, r
}

func TestOpenHostilePaths(t *testing.T) {
	fx, r := newFixture(t)
	cases := fx.Cases()
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			f, err := r.Open(c.Path)
			if got := codeOf(err); got != c.Code {
				t.Fatalf("Open(%q) = %q, want %q", c.Path, got, c.Code)
			}
			if err != nil {
				var fe *Error
				errors.As(err, &fe)
				if fe.Detail == "" || fe.Status() < 400 {
					t.Errorf("refusal without detail or status: %+v", fe)
				}
				return
			}
			defer f.Close()
			if f.Rel != c.Rel {
				t.Errorf("Rel = %q, want %q", f.Rel, c.Rel)
			}
			want, err := os.Stat(filepath.Join(fx.Root, filepath.FromSlash(c.Rel)))
			if err != nil {
				t.Fatal(err)
			}
			if !os.SameFile(want, f.Info) {
				t.Errorf("opened a different file than %s", c.Rel)
			}
		})
	}
}

// The file is swapped after the checks and before the open: for a link to a
// file outside, for a link to another file inside, for a fifo, and removed.
func TestOpenFileSwappedBetweenCheckAndOpen(t *testing.T) {
	swaps := map[string]func(t *testing.T, fx *filestest.Fixture, p string){
		"link outside": func(t *testing.T, fx *filestest.Fixture, p string) {
			replace(t, p, func() error { return os.Symlink(filepath.Join(fx.Outside, "secret.txt"), p) })
		},
		"link inside": func(t *testing.T, fx *filestest.Fixture, p string) {
			replace(t, p, func() error { return os.Symlink("sub/inner.txt", p) })
		},
		"another file": func(t *testing.T, fx *filestest.Fixture, p string) {
			// Made first and renamed over, so it cannot reuse the inode.
			tmp := p + ".new"
			if err := os.WriteFile(tmp, []byte("other"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
		},
		"fifo": func(t *testing.T, fx *filestest.Fixture, p string) {
			replace(t, p, func() error { return mkfifo(p) })
		},
		"removed": func(t *testing.T, fx *filestest.Fixture, p string) {
			replace(t, p, func() error { return nil })
		},
	}
	for name, swap := range swaps {
		t.Run(name, func(t *testing.T) {
			fx, r := newFixture(t)
			p := filepath.Join(fx.Root, "ok.txt")
			r.afterCheck = func() { swap(t, fx, p) }
			f, err := r.Open("ok.txt")
			if got := codeOf(err); got != string(refusal.FileChanged) {
				if f != nil {
					f.Close()
				}
				t.Fatalf("Open after a swap = %q, want FILE_CHANGED", got)
			}
		})
	}
}

func replace(t *testing.T, p string, make func() error) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := make(); err != nil {
		t.Fatal(err)
	}
}

// A hard link made after the check is caught by the check after the open.
func TestOpenHardLinkAddedAfterCheck(t *testing.T) {
	fx, r := newFixture(t)
	r.afterCheck = func() {
		if err := os.Link(filepath.Join(fx.Root, "sub", "inner.txt"), filepath.Join(fx.Outside, "late-twin")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Open("sub/inner.txt"); codeOf(err) != string(refusal.HardLinked) {
		t.Fatalf("got %q, want HARD_LINKED", codeOf(err))
	}
}

func TestNewResolverResolvesTheRoot(t *testing.T) {
	fx := filestest.New(t)
	r, err := NewResolver(filepath.Join(fx.Base, "alias"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Root() != fx.Root {
		t.Fatalf("Root() = %q, want %q", r.Root(), fx.Root)
	}
	if _, err := NewResolver("relative/root"); err == nil {
		t.Fatal("a relative root was accepted")
	}
	if _, err := NewResolver(filepath.Join(fx.Root, "ok.txt")); err == nil {
		t.Fatal("a file as root was accepted")
	}
}
