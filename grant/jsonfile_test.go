package grant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := writeFileAtomic(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "two" {
		t.Fatalf("content %q, %v; want two", got, err)
	}
	testutil.WantMode(t, path, 0o600)
	assertNoTempFiles(t, dir)

	// The rename fails (a non-empty folder is in the way): the temporary
	// file is removed and the folder is untouched.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(blocked, []byte("three")); err == nil {
		t.Fatal("writing over a non-empty folder succeeded")
	}
	assertNoTempFiles(t, dir)
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("folder holds %d entries after a failed write, want 2", len(entries))
	}
}

// TestLoadStrict: the grant, the manifest and the seed record are decoded
// strictly, each refusal with the file as given, the JSON path and the
// place. encoding/json alone took "AgentUser" as agentUser and kept the
// last of a member given twice.
func TestLoadStrict(t *testing.T) {
	type file struct {
		fixture, name string
		load          func(string) error
	}
	grantFile := file{"grant-valid.json", "grant.json", func(p string) error { _, err := Load(p); return err }}
	manifestFile := file{"manifest-valid.json", "manifest.json", func(p string) error { _, err := LoadManifest(p); return err }}
	seedFile := file{"seed-record-valid.json", "seed-record.json", func(p string) error { _, err := LoadSeedRecord(p); return err }}
	tests := []struct {
		name     string
		file     file
		old, new string // the fixture's text with old replaced by new
		wantErr  error
		want     string // the message after "<path>: "
	}{
		{"grant: member in another case", grantFile, `"localUser"`, `"localuser"`, ErrUnknownField,
			`localuser at line 9, column 3: unknown field: member names are case-sensitive: did you mean "localUser"?`},
		{"grant: member given twice", grantFile, `"version": 1,`, `"version": 1, "version": 2,`, ErrDuplicateKey,
			`version at line 3, column 17: given twice (first at line 3, column 3); keep one`},
		{"grant: unknown member", grantFile, `"localUser"`, `"objects": [], "localUser"`, ErrUnknownField,
			`objects at line 9, column 3: unknown field: remove it or check its spelling`},
		{"grant: wrong type in a list", grantFile, `"evaluation-criteria"`, `2`, ErrMalformed,
			`documents[1] at line 12, column 5: a JSON number where a string is wanted`},
		{"grant: not a time", grantFile, `"2026-10-24T12:15:00Z"`, `"tomorrow"`, ErrMalformed,
			`notAfter at line 17, column 15: a time is wanted, in RFC 3339 form such as 2026-01-02T15:04:05Z`},
		{"manifest: member in another case", manifestFile, `"approved": false`, `"Approved": false`, ErrUnknownField,
			`documents.proposal-borealis.Approved at line 19, column 7: unknown field: member names are case-sensitive: did you mean "approved"?`},
		{"manifest: member given twice", manifestFile, `"approved": false,`, `"approved": false, "approved": true,`, ErrDuplicateKey,
			`documents.proposal-borealis.approved at line 19, column 26: given twice (first at line 19, column 7); keep one`},
		{"manifest: ids that differ in case", manifestFile, `"proposal-borealis": {`, `"Proposal-Aurora": {`, ErrDuplicateKey,
			`documents.Proposal-Aurora at line 16, column 5: given twice: "proposal-aurora" at line 4, column 5 differs only in case, ` +
				`and ids that differ only in case name one file; keep one`},
		{"manifest: unknown member", manifestFile, `"label": "Proposal: Borealis",`, `"label": "Proposal: Borealis", "owner": "x",`, ErrUnknownField,
			`documents.proposal-borealis.owner at line 17, column 38: unknown field: remove it or check its spelling`},
		{"manifest: syntax", manifestFile, `"approved": false,`, `"approved": false,,`, ErrMalformed,
			`not valid JSON at line 19, column 25: invalid character ',' looking for beginning of object key string`},
		{"seed record: member in another case", seedFile, `"agentUser"`, `"AgentUser"`, ErrUnknownField,
			`AgentUser at line 2, column 3: unknown field: member names are case-sensitive: did you mean "agentUser"?`},
		{"seed record: member given twice", seedFile, `"ownerUser"`, `"agentUser": "x", "ownerUser"`, ErrDuplicateKey,
			`agentUser at line 3, column 3: given twice (first at line 2, column 3); keep one`},
		{"seed record: unknown member", seedFile, `"ownerUser"`, `"password": "x", "ownerUser"`, ErrUnknownField,
			`password at line 3, column 3: unknown field: remove it or check its spelling`},
		{"seed record: two objects", seedFile, "}\n", "}\n{}\n", ErrMalformed,
			`not valid JSON at line 14, column 1: more after the JSON object; the file holds one object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := copyFixture(t, tt.file.fixture, tt.file.name)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tt.old) {
				t.Fatalf("%s has no %q", tt.file.fixture, tt.old)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(data), tt.old, tt.new, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			err = tt.file.load(path)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("load: %v; want %v", err, tt.wantErr)
			}
			if want := path + ": " + tt.want; err.Error() != want {
				t.Errorf("error\n %s\nwant\n %s", err, want)
			}
		})
	}
}

// TestLoadEmpty: an empty file is said to be empty, with what it should
// hold, whichever of the three it is.
func TestLoadEmpty(t *testing.T) {
	tests := []struct {
		name string
		load func(string) error
		want string
	}{
		{"grant.json", func(p string) error { _, err := Load(p); return err }, "the task's grant as a JSON object (pdmcp grant writes it)"},
		{"manifest.json", func(p string) error { _, err := LoadManifest(p); return err }, "the task's manifest as a JSON object (pdmcp seed writes it)"},
		{"seed-record.json", func(p string) error { _, err := LoadSeedRecord(p); return err }, "the seed record as a JSON object (pdmcp seed writes it)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tt.name)
			if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := tt.load(path)
			if want := path + " is empty: it should hold " + tt.want; !errors.Is(err, ErrEmpty) || err.Error() != want {
				t.Errorf("load: %v\nwant %s", err, want)
			}
		})
	}
}

func TestReadSecureFileLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, make([]byte, 101), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readSecureFile(path, 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("101 bytes with a limit of 100: %v", err)
	}
	if data, err := readSecureFile(path, 101); err != nil || len(data) != 101 {
		t.Fatalf("101 bytes with a limit of 101: %d, %v", len(data), err)
	}
}
