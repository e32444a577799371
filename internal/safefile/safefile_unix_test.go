//go:build unix

package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadSecretAndConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	owner := write("owner", 0o600, "s3cret")
	readOnly := write("read-only", 0o400, "s3cret")
	groupRead := write("group-read", 0o640, "s3cret")
	worldRead := write("world-read", 0o644, "{}")
	groupWrite := write("group-write", 0o620, "{}")
	otherWrite := write("other-write", 0o606, "{}")
	big := write("big", 0o600, strings.Repeat("x", 101))
	link := filepath.Join(dir, "link")
	if err := os.Symlink(owner, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		read   func(string, int64) ([]byte, error)
		path   string
		limit  int64
		want   error // nil: read
		inText string
	}{
		{"secret owner-only", ReadSecret, owner, 0, nil, ""},
		{"secret read-only", ReadSecret, readOnly, 0, nil, ""},
		{"secret group may read", ReadSecret, groupRead, 0, ErrNotOwnerOnly, "has mode 0640"},
		{"secret world may read", ReadSecret, worldRead, 0, ErrNotOwnerOnly, "chmod 600"},
		{"secret through a symbolic link", ReadSecret, link, 0, ErrSymlink, ""},
		{"secret is a FIFO", ReadSecret, fifo, 0, ErrNotRegular, ""},
		{"secret is a folder", ReadSecret, dir, 0, ErrNotRegular, ""},
		{"secret over the limit", ReadSecret, big, 100, ErrTooLarge, ""},
		{"secret missing", ReadSecret, filepath.Join(dir, "none"), 0, os.ErrNotExist, ""},
		{"config world-readable", ReadConfig, worldRead, 0, nil, ""},
		{"config through a link", ReadConfig, link, 0, nil, ""},
		{"config group may write", ReadConfig, groupWrite, 0, ErrGroupWritable, "has mode 0620"},
		{"config others may write", ReadConfig, otherWrite, 0, ErrGroupWritable, "chmod go-w"},
		{"config is a FIFO", ReadConfig, fifo, 0, ErrNotRegular, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := tc.read(tc.path, tc.limit)
			if tc.want == nil {
				if err != nil || len(data) == 0 {
					t.Fatalf("got %q, %v; want the file read", data, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || data != nil {
				t.Fatalf("got %q, %v; want %v", data, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.inText) {
				t.Errorf("%v does not say %q", err, tc.inText)
			}
		})
	}
}
