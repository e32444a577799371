package record

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
)

// A journal is never silently new. The versions the server saved are files
// in the task folder (results/<destination>.v<N>.bin, and
// <fragment>.v<N>.bin beside a compound document's sections) that only the
// journal's record names: which version each is, and the IV that opens it.
// A journal deleted or left out of a restore would be re-created empty, and
// the server would then serve the manifest's versions, list nothing and
// save over the history as if it were new. So the server and every command
// that reads the record check the journal against the folder first.

// ErrRecordLost: the task folder holds saved versions, and the journal that
// records them is missing or records no save.
var ErrRecordLost = errors.New("saved versions are in the task folder but their journal is missing or empty")

// RepairCommand is what the refusal tells the operator to run.
const RepairCommand = "pdmcp check --repair"

// versionFile is a saved version's file name: <id>.v<N>.bin.
var versionFile = regexp.MustCompile(`^(.+)\.v([1-9][0-9]*)\.bin$`)

// SavedFiles lists, '/'-separated and sorted, the version files in the
// manifest's folder dir that the manifest m does not name: in results/,
// every <destination>.v<N>.bin (of a destination m holds or not); beside
// each compound document's sections, every <section>.v<N>.bin of its
// sections. The manifest's own history and sections as protected are not
// listed, nor an empty file: without a record, these files are what would
// be lost.
func SavedFiles(dir string, m *grant.Manifest) ([]string, error) {
	named := map[string]bool{}
	folders := map[string]map[string]bool{} // folder -> section ids saved there (nil: any id)
	folders["results"] = nil
	for _, d := range m.Destinations {
		for _, v := range d.Versions {
			named[v.Path] = true
		}
	}
	for _, d := range m.Documents {
		for _, f := range d.Fragments {
			named[f.Path] = true
			folder := path.Dir(f.Path)
			if ids, ok := folders[folder]; !ok || ids != nil {
				if ids == nil {
					ids = map[string]bool{}
				}
				ids[f.ID] = true
				folders[folder] = ids
			}
		}
	}
	var out []string
	for folder, ids := range folders {
		entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(folder)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("record: look for saved versions: %w", err)
		}
		for _, e := range entries {
			sub := versionFile.FindStringSubmatch(e.Name())
			if sub == nil || !e.Type().IsRegular() || (ids != nil && !ids[sub[1]]) {
				continue
			}
			rel := path.Join(folder, e.Name())
			if named[rel] {
				continue
			}
			// An empty file holds no version (a ciphertext is never
			// empty): a crash's leftover, which a save steps over.
			if fi, err := e.Info(); err != nil || fi.Size() == 0 {
				continue
			}
			out = append(out, rel)
		}
	}
	slices.Sort(out)
	return out, nil
}

// CheckJournal refuses a journal that cannot vouch for the saved versions
// in the manifest's folder: j is nil (no file at journalPath) or records
// no save, while SavedFiles lists some. The error matches ErrRecordLost,
// names a few of the files, and tells the operator to run `pdmcp check
// --repair` (or to restore the journal from a backup).
//
// A journal of another task is to be refused here as well, once the record
// carries the task's identity (issue 32, item 4).
func CheckJournal(ctx context.Context, manifestPath string, m *grant.Manifest, journalPath string, j *journal.Journal) error {
	state := "missing"
	if j != nil {
		holds, err := j.HoldsSaves(ctx)
		if err != nil {
			return err
		}
		if holds {
			return nil
		}
		state = "empty (it records no save)"
	}
	dir := m.Dir() // the real folder, when m was loaded from a file
	if dir == "" {
		dir = filepath.Dir(manifestPath)
	}
	saved, err := SavedFiles(dir, m)
	if err != nil || len(saved) == 0 {
		return err
	}
	shown := saved[:min(len(saved), 3)]
	more := ""
	if len(saved) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(saved)-len(shown))
	}
	return fmt.Errorf("%w: the journal %s is %s, yet %d saved version files are in %s (%s%s); "+
		"only the journal says which version each is and what opens it, so nothing reads or saves on a new one: "+
		"restore the journal from a backup, or run `%s --manifest %s`",
		ErrRecordLost, journalPath, state, len(saved), dir, strings.Join(shown, ", "), more,
		RepairCommand, manifestPath)
}

// OpenJournal opens the journal at journalPath ("" for the default beside
// the manifest) for a reader of the record, without creating it, after
// CheckJournal: nil and no error when there is none and no saved version
// needs one.
func OpenJournal(ctx context.Context, manifestPath string, m *grant.Manifest, journalPath string) (*journal.Journal, error) {
	if journalPath == "" {
		journalPath = journal.DefaultPath(manifestPath)
	}
	j, err := journal.OpenExisting(ctx, journalPath)
	if errors.Is(err, journal.ErrMissing) {
		return nil, CheckJournal(ctx, manifestPath, m, journalPath, nil)
	}
	if err != nil {
		return nil, err
	}
	if err := CheckJournal(ctx, manifestPath, m, journalPath, j); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}
