//go:build unix

package files

import (
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// A name swapped while the resolver is on it (between its look and the
// next step of the walk, or between the walk and the stored-name lookup)
// is FILE_CHANGED, as docs/files.md says, never PATH_UNRESOLVABLE or
// NOT_FOUND: it was there a moment ago.
func TestResolveSwappedMidWalk(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, root string) // makes the name opened
		open  string
		at    string // the name whose first look triggers the swap
		swap  func(t *testing.T, p string)
	}{
		{"a link made a file between its look and its read", linkToInner, "ln.txt", "ln.txt",
			func(t *testing.T, p string) {
				renameOver(t, p, func(tmp string) error { return os.WriteFile(tmp, []byte("x"), 0o644) })
			}},
		{"a link removed between its look and its read", linkToInner, "ln.txt", "ln.txt",
			func(t *testing.T, p string) { must(t, os.Remove(p)) }},
		{"a file removed after the walk, before its stored name", nil, "ok.txt", "ok.txt",
			func(t *testing.T, p string) { must(t, os.Remove(p)) }},
		{"a folder made a file during the walk", nil, "sub/inner.txt", "sub",
			func(t *testing.T, p string) {
				must(t, os.Rename(p, p+".old"))
				must(t, os.WriteFile(p, []byte("x"), 0o644))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx, r := newFixture(t)
			if tt.setup != nil {
				tt.setup(t, fx.Root)
			}
			at := filepath.Join(fx.Root, filepath.FromSlash(tt.at))
			swapped := false
			r.lstat = func(name string) (fs.FileInfo, error) {
				fi, err := os.Lstat(name)
				if name == at && !swapped {
					swapped = true
					tt.swap(t, at)
				}
				return fi, err
			}
			f, err := r.Open(tt.open)
			if f != nil {
				f.Close()
			}
			if !swapped {
				t.Fatal("the swap never ran: the test no longer reaches the step it means")
			}
			if got := codeOf(err); got != string(refusal.FileChanged) {
				t.Fatalf("Open with %s = %q, want FILE_CHANGED", tt.name, got)
			}
		})
	}
}

// Swapped for real, many times, while calls resolve it: every answer is
// the file or FILE_CHANGED.
func TestResolveRacingSwaps(t *testing.T) {
	fx, r := newFixture(t)
	linkToInner(t, fx.Root)
	p := filepath.Join(fx.Root, "ln.txt")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := p + ".tmp"
			var err error
			if i%2 == 0 {
				err = os.WriteFile(tmp, []byte("plain"), 0o644)
			} else {
				err = os.Symlink("sub/inner.txt", tmp)
			}
			if err == nil {
				err = os.Rename(tmp, p)
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	counts := map[string]int{}
	for range 600 {
		f, err := r.Open("ln.txt")
		if f != nil {
			f.Close()
		}
		counts[codeOf(err)]++
	}
	close(stop)
	wg.Wait()
	for code, n := range counts {
		if code != "" && code != string(refusal.FileChanged) {
			t.Errorf("%d of 600 opens during swaps answered %q; want the file or FILE_CHANGED (all: %v)", n, code, counts)
		}
	}
}

func linkToInner(t *testing.T, root string) {
	must(t, os.Symlink("sub/inner.txt", filepath.Join(root, "ln.txt")))
}

func renameOver(t *testing.T, p string, make func(tmp string) error) {
	tmp := p + ".new"
	must(t, make(tmp))
	must(t, os.Rename(tmp, p))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
