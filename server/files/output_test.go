//go:build linux || darwin

package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// The filesystem's own name limit is what CheckNames applies: 255 bytes on
// the filesystems tests run on, one byte over is NAME_TOO_LONG naming the
// name and the limit.
func TestCheckNames(t *testing.T) {
	dir := t.TempDir()
	if n := nameMax(dir); n != 255 {
		t.Fatalf("nameMax(%s) = %d, want 255 (queried from the filesystem)", dir, n)
	}
	if err := CheckNames(dir, "f", strings.Repeat("a", 255)); err != nil {
		t.Fatalf("255 bytes: %v", err)
	}
	err := CheckNames(dir, "f", "short", strings.Repeat("é", 128))
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != refusal.NameTooLong || !strings.Contains(fe.Detail, "256 long") || !strings.Contains(fe.Detail, "limit of 255") {
		t.Fatalf("256 bytes: %v", err)
	}
	// The limit checked is the one the system enforces.
	if err := os.WriteFile(filepath.Join(dir, strings.Repeat("é", 128)), nil, 0o600); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("the filesystem took a 256-byte name: %v", err)
	}
	if n := len(TempNameShape("x")); n != len("x")+22 {
		t.Fatalf("TempNameShape adds %d", n-1)
	}
	tn, _ := TempName("x")
	if len(tn) != len(TempNameShape("x")) {
		t.Fatalf("TempName %q and its shape differ in length", tn)
	}
}

func TestOutputPlaces(t *testing.T) {
	noLink := func(*os.Root, string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
	for _, c := range []struct {
		name   string
		ops    func() outputOps
		rename bool
	}{
		{"hard link", nativeOps, false},
		// FAT, exFAT, some SMB and FUSE mounts: no hard links; the real
		// no-replace rename of this system places the file.
		{"no hard links", func() outputOps { o := nativeOps(); o.link = noLink; return o }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			if err := os.Mkdir(filepath.Join(base, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			root, err := os.OpenRoot(base)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			if err := os.WriteFile(filepath.Join(base, "sub", "taken"), []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := probeOutput(root, filepath.Join("sub", "out"), "sub/out", c.ops())
			if err != nil {
				t.Fatal(err)
			}
			if p.rename != c.rename {
				t.Fatalf("rename = %v, want %v", p.rename, c.rename)
			}
			// The probe left nothing.
			if names := testutil.DirNames(t, filepath.Join(base, "sub")); len(names) != 1 {
				t.Fatalf("after the probe: %v", names)
			}
			o, err := p.Create(filepath.Join("sub", "out"), "sub/out")
			if err != nil {
				t.Fatal(err)
			}
			defer o.Discard()
			o.File.WriteString("new content")
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
			if err := o.Place(filepath.Join("sub", "taken")); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("Place over an existing name: %v, want ErrExist", err)
			}
			if b, _ := os.ReadFile(filepath.Join(base, "sub", "taken")); string(b) != "keep me" {
				t.Fatalf("the existing file was replaced: %q", b)
			}
			if err := o.Place(filepath.Join("sub", "out")); err != nil {
				t.Fatal(err)
			}
			o.Discard()
			if b, _ := os.ReadFile(filepath.Join(base, "sub", "out")); string(b) != "new content" {
				t.Fatalf("placed %q", b)
			}
			if names := testutil.DirNames(t, filepath.Join(base, "sub")); len(names) != 2 {
				t.Fatalf("after Place and Discard: %v (a temporary left?)", names)
			}
		})
	}
	// Neither way: refused before anything is written or sent.
	base := t.TempDir()
	root, err := os.OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = probeOutput(root, "out", "out", outputOps{link: noLink, rename: noLink})
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != refusal.OutputNotWritable {
		t.Fatalf("no link and no rename: %v", err)
	}
	if names := testutil.DirNames(t, base); len(names) != 0 {
		t.Fatalf("the refused probe left %v", names)
	}
}
