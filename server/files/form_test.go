package files

import (
	"errors"
	"reflect"
	"testing"

	"github.com/pdmcp/pdmcp/server/refusal"
)

// The form rules and the lexical split are pure, so both flavors are
// tested wherever the tests run.
func TestCheckForm(t *testing.T) {
	cases := []struct {
		path   string
		flavor Flavor
		want   string
	}{
		{"", Unix, string(refusal.PathEmpty)},
		{"", Windows, string(refusal.PathEmpty)},
		{"a\x00b", Windows, string(refusal.PathForm)},
		{"a\tb", Unix, string(refusal.PathForm)},
		{"a\u009fb", Unix, string(refusal.PathForm)},
		{"a\u2066b", Windows, string(refusal.PathForm)},
		{string(make([]byte, MaxPathBytes+1)), Unix, string(refusal.PathForm)},
		{`\\server\share\f`, Unix, string(refusal.UNCOrDevice)},
		{`\\server\share\f`, Windows, string(refusal.UNCOrDevice)},
		{`//server/share/f`, Windows, string(refusal.UNCOrDevice)},
		{`\\?\C:\f`, Windows, string(refusal.UNCOrDevice)},
		{`\\.\COM1`, Windows, string(refusal.UNCOrDevice)},
		{`/\server\share`, Windows, string(refusal.UNCOrDevice)},
		{`\??\C:\f`, Windows, string(refusal.UNCOrDevice)},
		// The order: a control character is judged before UNC, UNC before
		// a stream.
		{"\\\\server\\share\x01", Windows, string(refusal.PathForm)},
		{`\\server\share\f:s`, Windows, string(refusal.UNCOrDevice)},
		{"f.txt:s", Unix, string(refusal.AlternateStream)},
		{"f.txt:s", Windows, string(refusal.AlternateStream)},
		{`C:\dir\f.txt:s`, Windows, string(refusal.AlternateStream)},
		{`C:\dir\f.txt::$DATA`, Unix, string(refusal.AlternateStream)},
		{`dir:x\f.txt`, Windows, string(refusal.AlternateStream)},
		{"C:f.txt", Windows, string(refusal.PathForm)},
		{"C:", Windows, string(refusal.PathForm)},
		{"C:f:s", Windows, string(refusal.AlternateStream)},
		{`C:\dir\f.txt`, Windows, ""},
		{`c:/dir/f.txt`, Windows, ""},
		{`C:\dir\f.txt`, Unix, ""}, // judged OUTSIDE_ROOT by the resolver
		{`dir\NUL`, Windows, string(refusal.UNCOrDevice)},
		{`dir\nul.txt`, Windows, string(refusal.UNCOrDevice)},
		{`COM1.log`, Windows, string(refusal.UNCOrDevice)},
		{`lpt9`, Windows, string(refusal.UNCOrDevice)},
		{`CONOUT$`, Windows, string(refusal.UNCOrDevice)},
		{`COM¹`, Windows, string(refusal.UNCOrDevice)},
		{`dir\NUL`, Unix, ""}, // not a device outside Windows
		{`console.txt`, Windows, ""},
		{`COM10`, Windows, ""},
		{`f.pisoft.`, Windows, string(refusal.PathForm)},
		{`f.pisoft `, Windows, string(refusal.PathForm)},
		{`f.pisoft.`, Unix, ""},
		{`..\..\f`, Windows, ""},
		{`.\f`, Windows, ""},
		{"name with spaces.txt", Windows, ""},
		{"ünïcødé.txt", Unix, ""},
	}
	for _, c := range cases {
		if got := codeOf(CheckForm(c.path, c.flavor)); got != c.want {
			t.Errorf("CheckForm(%q, %v) = %q, want %q", c.path, c.flavor, got, c.want)
		}
	}
}

func TestSplit(t *testing.T) {
	cases := []struct {
		path   string
		flavor Flavor
		want   Lexical
	}{
		{"a/b/c", Unix, Lexical{Parts: []string{"a", "b", "c"}}},
		{`a\b\c`, Unix, Lexical{Parts: []string{"a", "b", "c"}}},
		{"./a//b/./", Unix, Lexical{Parts: []string{"a", "b"}}},
		{"a/../b", Unix, Lexical{Parts: []string{"b"}}},
		{"../../a", Unix, Lexical{Parts: []string{"..", "..", "a"}}},
		{"a/../../b", Unix, Lexical{Parts: []string{"..", "b"}}},
		{"/a/../../b", Unix, Lexical{Absolute: true, Parts: []string{"b"}}},
		{`\a\b`, Windows, Lexical{Absolute: true, Parts: []string{"a", "b"}}},
		{`c:\a\..\b`, Windows, Lexical{Absolute: true, Drive: "C:", Parts: []string{"b"}}},
		{`C:/a/b`, Unix, Lexical{Absolute: true, Drive: "C:", Parts: []string{"a", "b"}}},
	}
	for _, c := range cases {
		got := Split(c.path, c.flavor)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%q) = %+v, want %+v", c.path, got, c.want)
		}
	}
}

func TestWithin(t *testing.T) {
	cases := []struct {
		root, p string
		flavor  Flavor
		within  bool
		orEqual bool
	}{
		{"/r", "/r/a", Unix, true, true},
		{"/r", "/r", Unix, false, true},
		{"/r", "/r/", Unix, false, true},
		{"/r", "/r-evil/a", Unix, false, false},
		{"/r", "/", Unix, false, false},
		{"/r/s", "/r", Unix, false, false},
		{"/R", "/r/a", Unix, false, false},
		{`C:\Task`, `c:\task\a.txt`, Windows, true, true},
		{`C:\Task`, `C:/TASK/a.txt`, Windows, true, true},
		{`C:\Task`, `c:\TASK`, Windows, false, true},
		{`C:\Task`, `D:\Task\a.txt`, Windows, false, false},
		{`C:\Task`, `C:\Task2\a.txt`, Windows, false, false},
	}
	for _, c := range cases {
		if got := Within(c.root, c.p, c.flavor); got != c.within {
			t.Errorf("Within(%q, %q) = %v", c.root, c.p, got)
		}
		if got := WithinOrEqual(c.root, c.p, c.flavor); got != c.orEqual {
			t.Errorf("WithinOrEqual(%q, %q) = %v", c.root, c.p, got)
		}
	}
}

func codeOf(err error) string {
	var fe *Error
	if errors.As(err, &fe) {
		return string(fe.Code)
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}
