//go:build unix

// Package filestest builds a folder of hostile paths for the file tools'
// tests: links out, loops, chains, a hard link, a fifo, a socket, a device,
// and the path forms every platform refuses. The resolver's own tests and
// the server's end-to-end tests judge the same table.
package filestest

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Fixture is a temporary folder holding a file root and what surrounds it.
type Fixture struct {
	Base    string // holds root, outside, root-evil and alias
	Root    string // the file root (resolved)
	Outside string // a sibling folder with a secret file in it
	// Inside maps every regular file a path may be accepted for to its
	// path relative to Root.
	Inside map[string]string
	Device bool // a character device could be made inside Root
}

// Content of the ordinary file ok.txt.
const Content = "a plain file inside the task's folder\n"

// Case is one path and the code it is refused with; Code "" means accepted,
// and Rel is then the file it must name.
type Case struct {
	Name string
	Path string
	Code string
	Rel  string
}

// New builds the fixture under t.TempDir().
func New(t testing.TB) *Fixture {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{Base: base, Root: filepath.Join(base, "root"), Outside: filepath.Join(base, "outside"),
		Inside: map[string]string{}}
	mk := func(p string) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(f.Root, name)); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(f.Root, "sub", "deeper"))
	mk(f.Outside)
	mk(filepath.Join(base, "root-evil"))
	write(filepath.Join(f.Root, "ok.txt"), Content)
	write(filepath.Join(f.Root, "sub", "inner.txt"), "inner\n")
	write(filepath.Join(f.Root, "sub", "deeper", "deep.txt"), "deep\n")
	write(filepath.Join(f.Root, "name with spaces.txt"), "spaces\n")
	write(filepath.Join(f.Root, "empty.txt"), "")
	write(filepath.Join(f.Outside, "secret.txt"), "outside secret\n")
	mk(filepath.Join(f.Outside, "inner"))
	// A file of the same name in the root: a path whose ".." is taken
	// lexically after a link out would name this one instead.
	write(filepath.Join(f.Root, "secret.txt"), "a decoy inside the root\n")
	write(filepath.Join(base, "root-evil", "x.txt"), "prefix sibling\n")
	write(filepath.Join(base, "secret-next-to-root.txt"), "beside the root\n")
	for _, rel := range []string{"ok.txt", "sub/inner.txt", "sub/deeper/deep.txt", "name with spaces.txt", "empty.txt", "secret.txt"} {
		f.Inside[rel] = rel
	}

	link("ok.txt", "link-in")
	link("sub/../ok.txt", "link-in-dotdot")
	link(filepath.Join(f.Root, "ok.txt"), "link-in-abs")
	link("../outside/secret.txt", "link-out")
	link(filepath.Join(f.Outside, "secret.txt"), "link-out-abs")
	link("/nonexistent-pdmcp/x", "link-out-dangling")
	link("../outside/never-there", "link-out-dangling-rel")
	link(".", "link-root")
	link(f.Root, "link-root-abs")
	link("..", "link-parent")
	link("loop-b", "loop-a")
	link("loop-a", "loop-b")
	link("loop-self", "loop-self")
	link("chain-2", "chain-1")
	link("chain-3", "chain-2")
	link("sub/inner.txt", "chain-3")
	link("chain-out-2", "chain-out-1")
	link("../outside/secret.txt", "chain-out-2")
	link("sub", "dirlink")
	link("../outside", "dirlink-out")
	link("../outside/inner", "dirlink-out-inner")
	link("sub/deeper", "deeplink")
	// Lexically root/inner.txt (missing); the kernel reads sub/inner.txt.
	link("deeplink/../inner.txt", "link-via-deeplink")
	link("missing-target.txt", "dangling-in")
	link("/dev/null", "devlink")
	if err := os.Symlink(f.Root, filepath.Join(base, "alias")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(f.Root, "twin-a.txt"), "two names, both inside\n")
	if err := os.Link(filepath.Join(f.Root, "twin-a.txt"), filepath.Join(f.Root, "twin-b.txt")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(f.Root, "hard.txt"), "two names\n")
	if err := os.Link(filepath.Join(f.Root, "hard.txt"), filepath.Join(f.Outside, "hard-twin.txt")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(f.Root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(f.Root, "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	// A character device (1,3 is the null device) needs CAP_MKNOD.
	f.Device = syscall.Mknod(filepath.Join(f.Root, "dev"), syscall.S_IFCHR|0o644, 1<<8|3) == nil
	return f
}

// Cases is the hostile table, with a few accepted paths among them so a
// resolver that refuses everything fails too.
func (f *Fixture) Cases() []Case {
	long := strings.Repeat("a", 300)
	cs := []Case{
		// Form, judged before anything else.
		{"empty", "", "PATH_EMPTY", ""},
		{"NUL byte", "ok.txt\x00.pisoft", "PATH_FORM_REFUSED", ""},
		{"newline", "ok\n.txt", "PATH_FORM_REFUSED", ""},
		{"DEL", "ok\x7f.txt", "PATH_FORM_REFUSED", ""},
		{"C1 control", "ok\u0085.txt", "PATH_FORM_REFUSED", ""},
		{"bidi override", "txt.\u202eok", "PATH_FORM_REFUSED", ""},
		{"invalid UTF-8", "ok\xff.txt", "PATH_FORM_REFUSED", ""},
		{"control before outside", "../outside/\x01secret.txt", "PATH_FORM_REFUSED", ""},
		{"UNC share", `\\server\share\ok.txt`, "UNC_OR_DEVICE_PATH", ""},
		{"UNC forward slashes", "//server/share/ok.txt", "UNC_OR_DEVICE_PATH", ""},
		{"device namespace", `\\.\PhysicalDrive0`, "UNC_OR_DEVICE_PATH", ""},
		{"long-path prefix", `\\?\C:\Windows\win.ini`, "UNC_OR_DEVICE_PATH", ""},
		{"long-path prefix forward", "//?/C:/Windows/win.ini", "UNC_OR_DEVICE_PATH", ""},
		{"mixed separators UNC", `\/server/share`, "UNC_OR_DEVICE_PATH", ""},
		{"NT object path", `\??\C:\x`, "UNC_OR_DEVICE_PATH", ""},
		{"double slash absolute", "//" + f.Root[1:] + "/ok.txt", "UNC_OR_DEVICE_PATH", ""},
		{"alternate stream", "ok.txt:hidden", "ALTERNATE_STREAM", ""},
		{"default data stream", "ok.txt::$DATA", "ALTERNATE_STREAM", ""},
		{"stream on a folder", "sub:stream/inner.txt", "ALTERNATE_STREAM", ""},
		{"stream before outside", "../outside/secret.txt:x", "ALTERNATE_STREAM", ""},
		{"drive-relative", "C:ok.txt", "PATH_FORM_REFUSED", ""},
		// Outside, judged before existence.
		{"dot-dot", "../outside/secret.txt", "OUTSIDE_ROOT", ""},
		{"dot-dot to nothing", "../outside/does-not-exist", "OUTSIDE_ROOT", ""},
		{"dot-dot backslash", `..\outside\secret.txt`, "OUTSIDE_ROOT", ""},
		{"dot-dot through sub", "sub/../../outside/secret.txt", "OUTSIDE_ROOT", ""},
		{"dot-dot past a missing name", "missing/../../outside/secret.txt", "OUTSIDE_ROOT", ""},
		{"beside the root", "../secret-next-to-root.txt", "OUTSIDE_ROOT", ""},
		{"prefix sibling", "../root-evil/x.txt", "OUTSIDE_ROOT", ""},
		{"prefix sibling absolute", f.Root + "-evil/x.txt", "OUTSIDE_ROOT", ""},
		{"absolute elsewhere", "/etc/passwd", "OUTSIDE_ROOT", ""},
		{"absolute missing elsewhere", "/nonexistent-pdmcp/x.txt", "OUTSIDE_ROOT", ""},
		{"absolute device", "/dev/null", "OUTSIDE_ROOT", ""},
		{"drive letter on Unix", `C:\Windows\win.ini`, "OUTSIDE_ROOT", ""},
		{"the root", ".", "OUTSIDE_ROOT", ""},
		{"the root absolute", f.Root, "OUTSIDE_ROOT", ""},
		{"the root with slash", f.Root + "/", "OUTSIDE_ROOT", ""},
		{"sub and back", "sub/..", "OUTSIDE_ROOT", ""},
		{"symlink out", "link-out", "OUTSIDE_ROOT", ""},
		{"symlink out absolute", "link-out-abs", "OUTSIDE_ROOT", ""},
		{"dangling symlink out", "link-out-dangling", "OUTSIDE_ROOT", ""},
		{"dangling relative symlink out", "link-out-dangling-rel", "OUTSIDE_ROOT", ""},
		{"symlink to the root", "link-root", "OUTSIDE_ROOT", ""},
		{"symlink to the root absolute", "link-root-abs", "OUTSIDE_ROOT", ""},
		{"through a symlink to the root", "link-root/ok.txt", "", "ok.txt"},
		{"symlink to the parent", "link-parent/outside/secret.txt", "OUTSIDE_ROOT", ""},
		{"chain out", "chain-out-1", "OUTSIDE_ROOT", ""},
		{"folder symlink out", "dirlink-out/secret.txt", "OUTSIDE_ROOT", ""},
		{"hard link twin outside", "../outside/hard-twin.txt", "OUTSIDE_ROOT", ""},
		// ".." after a link is the parent of the link's target, as the
		// kernel (and the model's own shell) takes it.
		{"dot-dot after a folder link out", "dirlink-out-inner/../secret.txt", "OUTSIDE_ROOT", ""},
		{"dot-dot after a link to the root", "link-root/../outside/secret.txt", "OUTSIDE_ROOT", ""},
		{"dot-dot after an absolute link to the root", "link-root-abs/../outside/secret.txt", "OUTSIDE_ROOT", ""},
		{"symlink to a device", "devlink", "OUTSIDE_ROOT", ""},
		// Inside, but not one regular file with one name.
		{"missing", "missing.txt", "NOT_FOUND", ""},
		{"file used as a folder", "ok.txt/x", "NOT_FOUND", ""},
		{"trailing slash after a file", "ok.txt/", "NOT_FOUND", ""},
		{"trailing slash after a link to a file", "link-in/", "NOT_FOUND", ""},
		{"dot after a file", "ok.txt/.", "NOT_FOUND", ""},
		{"dot-dot after a file", "ok.txt/../ok.txt", "NOT_FOUND", ""},
		{"folder with a trailing slash", "sub/", "IS_A_DIRECTORY", ""},
		{"dangling symlink inside", "dangling-in", "NOT_FOUND", ""},
		{"symlink loop", "loop-a", "PATH_UNRESOLVABLE", ""},
		{"symlink to itself", "loop-self", "PATH_UNRESOLVABLE", ""},
		{"name too long", long, "PATH_UNRESOLVABLE", ""},
		{"directory", "sub", "IS_A_DIRECTORY", ""},
		{"directory through a link", "dirlink", "IS_A_DIRECTORY", ""},
		{"fifo", "fifo", "NOT_A_REGULAR_FILE", ""},
		{"socket", "sock", "NOT_A_REGULAR_FILE", ""},
		{"hard link", "hard.txt", "HARD_LINKED", ""},
		{"hard link inside", "twin-b.txt", "HARD_LINKED", ""},
		// Accepted.
		{"plain", "ok.txt", "", "ok.txt"},
		{"dot slash", "./ok.txt", "", "ok.txt"},
		{"nested", "sub/deeper/deep.txt", "", "sub/deeper/deep.txt"},
		{"backslash separators", `sub\deeper\deep.txt`, "", "sub/deeper/deep.txt"},
		{"dot-dot staying inside", "sub/../sub/inner.txt", "", "sub/inner.txt"},
		{"absolute inside", f.Root + "/sub/inner.txt", "", "sub/inner.txt"},
		{"absolute through an alias", filepath.Join(f.Base, "alias", "ok.txt"), "", "ok.txt"},
		{"out and back in", "../root/ok.txt", "", "ok.txt"},
		{"symlink inside", "link-in", "", "ok.txt"},
		{"symlink with dot-dot inside", "link-in-dotdot", "", "ok.txt"},
		{"absolute symlink inside", "link-in-abs", "", "ok.txt"},
		{"symlink chain", "chain-1", "", "sub/inner.txt"},
		{"folder symlink", "dirlink/inner.txt", "", "sub/inner.txt"},
		{"dot-dot after a folder link inside", "deeplink/../inner.txt", "", "sub/inner.txt"},
		{"dot-dot inside a link's target", "link-via-deeplink", "", "sub/inner.txt"},
		{"dot-dot after a link to the root and back", "link-root-abs/../root/ok.txt", "", "ok.txt"},
		{"the decoy itself", "secret.txt", "", "secret.txt"},
		{"spaces", "name with spaces.txt", "", "name with spaces.txt"},
		{"empty file", "empty.txt", "", "empty.txt"},
	}
	if f.Device {
		cs = append(cs, Case{"character device", "dev", "NOT_A_REGULAR_FILE", ""})
	}
	return cs
}
