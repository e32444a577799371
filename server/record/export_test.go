package record

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
)

// TestExportOrphans: versions of a destination or document the manifest no
// longer holds are returned as orphans; without allowOrphans the export
// is refused (ErrOrphans, naming them) and writes nothing, with it the
// file is written without them.
func TestExportOrphans(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		rows        []journal.Version
		allow       bool
		wantOrphans int
		wantErr     error
	}{
		{"none", rows()[:1], false, 0, nil},
		{"refused", []journal.Version{rows()[0], rows()[4]}, false, 1, ErrOrphans},
		{"allowed", []journal.Version{rows()[0], rows()[4]}, true, 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			mp := filepath.Join(dir, "manifest.json")
			if err := resultsManifest().Save(mp); err != nil {
				t.Fatal(err)
			}
			j, err := journal.Open(ctx, journal.DefaultPath(mp))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.RestoreVersions(ctx, c.rows); err != nil {
				t.Fatal(err)
			}
			j.Close()
			out := filepath.Join(dir, "export.json")
			merged, orphans, err := Export(ctx, mp, "", out, c.allow, nil)
			if !errors.Is(err, c.wantErr) || len(orphans) != c.wantOrphans {
				t.Fatalf("Export: %d orphans, %v", len(orphans), err)
			}
			if c.wantOrphans > 0 && orphans[0].Destination != "gone" {
				t.Fatalf("orphans %+v", orphans)
			}
			_, statErr := os.Stat(out)
			if c.wantErr != nil {
				if !strings.Contains(err.Error(), "destination gone") || !errors.Is(statErr, os.ErrNotExist) {
					t.Fatalf("refused export: %v; file: %v", err, statErr)
				}
				return
			}
			if statErr != nil || merged == nil {
				t.Fatalf("export not written: %v", statErr)
			}
		})
	}
}

// TestExplicitJournalMustExist: a journal named outright that is not
// there is ErrNoJournal naming the path, for Load and Export, and nothing
// is created; the default journal missing (with nothing saved) is an empty
// record.
func TestExplicitJournalMustExist(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mp := filepath.Join(dir, "manifest.json")
	if err := resultsManifest().Save(mp); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "manifest.jornal.sqlite")
	if _, _, err := Load(ctx, mp, typo); !errors.Is(err, ErrNoJournal) || !strings.Contains(err.Error(), typo) {
		t.Fatalf("Load: %v", err)
	}
	if _, _, err := Export(ctx, mp, typo, filepath.Join(dir, "out.json"), true, nil); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("Export: %v", err)
	}
	if _, err := os.Stat(typo); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the mistyped journal was created")
	}
	if _, vs, err := Load(ctx, mp, ""); err != nil || len(vs) != 0 {
		t.Fatalf("default journal missing: %v %v", vs, err)
	}
}

// resultsManifest is a manifest with destination d alone.
func resultsManifest() *grant.Manifest {
	return &grant.Manifest{Version: grant.ManifestVersion, Destinations: map[string]grant.Destination{"d": {TTag: "t-d"}}}
}

// TestExportLeavesNothingBeside: an export writes its file and nothing
// else (no lock file, no temporary file) beside it, mode 0600; given a
// writer, it writes there and creates no file.
func TestExportLeavesNothingBeside(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mp := filepath.Join(dir, "manifest.json")
	if err := resultsManifest().Save(mp); err != nil {
		t.Fatal(err)
	}
	before := names(t, dir)
	out := filepath.Join(dir, "merged.json")
	if _, _, err := Export(ctx, mp, "", out, false, nil); err != nil {
		t.Fatal(err)
	}
	after := names(t, dir)
	if want := append(slices.Clone(before), "merged.json"); !slices.Equal(after, slices.Sorted(slices.Values(want))) {
		t.Fatalf("folder after export: %v, want %v and merged.json", after, before)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("export: %v %v", fi, err)
	}
	if _, err := grant.LoadManifest(out); err != nil {
		t.Fatalf("the export is not a manifest: %v", err)
	}

	var got []byte
	if _, _, err := Export(ctx, mp, "", filepath.Join(dir, "to-writer.json"), false, func(b []byte) error { got = b; return nil }); err != nil {
		t.Fatal(err)
	}
	if want, _ := os.ReadFile(out); string(got) != string(want) {
		t.Fatalf("the writer got %q, the file holds %q", got, want)
	}
	if again := names(t, dir); !slices.Equal(again, after) {
		t.Fatalf("an export to a writer changed the folder: %v, was %v", again, after)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
