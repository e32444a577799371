package grant

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestWritersFollowALink: manifest.json is a symbolic link to
// manifest-2026.json. Every writer (UpdateManifest, Save, WriteFileAtomic)
// writes the link's target and keeps the link, takes the target's lock,
// and a load through either name gives the target's path as the
// manifest's file. Before, the rename replaced the link with a regular
// file and the target kept the old manifest.
func TestWritersFollowALink(t *testing.T) {
	ctx := context.Background()
	writers := []struct {
		name  string
		write func(t *testing.T, link string) error
	}{
		{"UpdateManifest", func(t *testing.T, link string) error {
			_, err := UpdateManifest(ctx, link, func(m *Manifest) error {
				m.Destinations["added"] = Destination{Label: "added"}
				return nil
			})
			return err
		}},
		{"Save", func(t *testing.T, link string) error {
			m, err := LoadManifest(link)
			if err != nil {
				return err
			}
			m.Destinations["added"] = Destination{Label: "added"}
			return m.Save(link)
		}},
	}
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			target := copyFixture(t, "manifest-valid.json", "manifest-2026.json")
			link := filepath.Join(filepath.Dir(target), "manifest.json")
			if err := os.Symlink("manifest-2026.json", link); err != nil {
				t.Fatal(err)
			}
			if err := w.write(t, link); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("the link after %s: %v, %v", w.name, fi, err)
			}
			m, err := LoadManifest(target)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.Destinations["added"]; !ok {
				t.Fatalf("the target lacks the change")
			}
			if viaLink, err := LoadManifest(link); err != nil || viaLink.File() != target {
				t.Errorf("loaded through the link: file %q, %v; want %q", viaLink.File(), err, target)
			}
			if _, err := os.Stat(LockPath(target)); err != nil {
				t.Errorf("the target's lock: %v", err)
			}
			if _, err := os.Lstat(LockPath(link)); err == nil {
				t.Errorf("a lock was taken beside the link")
			}
			assertNoTempFiles(t, filepath.Dir(target))
		})
	}
	t.Run("WriteFileAtomic", func(t *testing.T) {
		dir := t.TempDir()
		target, link := filepath.Join(dir, "data.bin"), filepath.Join(dir, "link.bin")
		if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("data.bin", link); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileAtomic(link, []byte("new")); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(target); err != nil || string(b) != "new" {
			t.Errorf("target: %q, %v", b, err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the link: %v, %v", fi, err)
		}
	})
	t.Run("a link to nothing is refused", func(t *testing.T) {
		dir := t.TempDir()
		link := filepath.Join(dir, "manifest.json")
		if err := os.Symlink("gone.json", link); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileAtomic(link, []byte("x")); err == nil {
			t.Fatal("a write through a dangling link was accepted")
		}
		if _, err := os.Lstat(filepath.Join(dir, "gone.json")); err == nil {
			t.Error("the dangling link's target was created")
		}
	})
}
