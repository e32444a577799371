// Package record joins the two places saved versions live: the operator's
// manifest.json, whose destinations' versions and sections are history
// (what releases before the record wrote, and what the operator protected),
// and the journal's record of every version the server saved since
// (journal.Version). Every reader of versions, the server's tools and the
// operator's commands, reads them through here, so all see one answer.
package record

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
)

// FragmentIVs maps each section of a compound document to its IV in the
// manifest: the bases its record chains grow from.
func FragmentIVs(d grant.Document) map[string]string {
	out := make(map[string]string, len(d.Fragments))
	for _, f := range d.Fragments {
		out[f.ID] = f.IV
	}
	return out
}

// Base is the manifest's document as the journal allocates against it.
func Base(d grant.Document) journal.DocumentBase {
	return journal.DocumentBase{Version: d.Version, FragmentIVs: FragmentIVs(d)}
}

// ApplyDocument returns the compound document d as it stands with the
// record's newest versions of its sections (heads, as journal.Heads gives
// them): each such section at its new path, IV, sha256, size and version,
// its key the one it was saved under (TTag), the document's version the
// newest such save's, its size the sum, and no
// whole-document sha256 (the document no longer equals the source it was
// protected from). d itself is not changed.
func ApplyDocument(d grant.Document, heads map[string]journal.Version) grant.Document {
	if len(heads) == 0 {
		return d
	}
	d.Fragments = slices.Clone(d.Fragments)
	for i, f := range d.Fragments {
		h, ok := heads[f.ID]
		if !ok || h.BaseIV != f.IV {
			continue
		}
		d.Size += h.Size - f.Size
		f.Path, f.IV, f.SHA256, f.Size, f.Version = h.Path, h.IV, h.SHA256, h.Size, h.Version
		// The version's own key: a data type's key replaced in the
		// manifest since never relabels it. "" (a row from before the
		// record kept keys): the data type's, as before.
		f.TTag = h.TTag
		d.Fragments[i] = f
		d.Version = max(d.Version, h.DocumentVersion)
		d.SHA256 = ""
	}
	return d
}

// Merge returns a copy of m with the record's versions in it, in the
// manifest's own format: each destination's versions the manifest's and the
// record's (the record's where both name one version), oldest first, each
// of the record's naming the key it was saved under (ttag); each
// compound document as ApplyDocument gives it. A record row for a
// destination or document m does not hold is left out (Orphans lists them).
func Merge(m *grant.Manifest, vs []journal.Version) *grant.Manifest {
	out := m.Clone()
	results, sections := split(vs)
	for id, d := range out.Destinations {
		rows := results[id]
		if len(rows) == 0 {
			continue
		}
		byVersion := map[int]grant.SavedVersion{}
		for _, v := range d.Versions {
			byVersion[v.Version] = v
		}
		for _, r := range rows {
			byVersion[r.Version] = grant.SavedVersion{Version: r.Version, Path: r.Path, IV: r.IV, TTag: r.TTag,
				SHA256: r.SHA256, Size: r.Size, SavedAt: r.SavedAt.UTC()}
		}
		d.Versions = d.Versions[:0:0]
		for _, n := range slices.Sorted(maps.Keys(byVersion)) {
			d.Versions = append(d.Versions, byVersion[n])
		}
		out.Destinations[id] = d
	}
	for id, d := range out.Documents {
		if !d.IsCompound() {
			continue
		}
		out.Documents[id] = ApplyDocument(d, headsOf(sections[id], FragmentIVs(d)))
	}
	return out
}

// Orphans are the record's rows for a destination or document the
// manifest no longer holds.
func Orphans(m *grant.Manifest, vs []journal.Version) []journal.Version {
	var out []journal.Version
	for _, v := range vs {
		if v.Destination != "" {
			if _, ok := m.Destinations[v.Destination]; !ok {
				out = append(out, v)
			}
			continue
		}
		if _, ok := m.Documents[v.DocumentID]; !ok {
			out = append(out, v)
		}
	}
	return out
}

func split(vs []journal.Version) (results map[string][]journal.Version, sections map[string][]journal.Version) {
	results, sections = map[string][]journal.Version{}, map[string][]journal.Version{}
	for _, v := range vs {
		if v.Destination != "" {
			results[v.Destination] = append(results[v.Destination], v)
		} else {
			sections[v.DocumentID] = append(sections[v.DocumentID], v)
		}
	}
	return results, sections
}

// headsOf picks, from one document's rows, each section's newest version
// on the chain from its manifest IV: what journal.Heads reads from the
// file.
func headsOf(rows []journal.Version, bases map[string]string) map[string]journal.Version {
	out := map[string]journal.Version{}
	for _, r := range rows {
		if bases[r.FragmentID] != r.BaseIV {
			continue
		}
		if h, ok := out[r.FragmentID]; !ok || r.Version > h.Version {
			out[r.FragmentID] = r
		}
	}
	return out
}

// Entry is one saved version as an operator sees it: from the manifest's
// history or from the record.
type Entry struct {
	// Kind is "result" or "section".
	Kind        string `json:"kind"`
	Destination string `json:"destinationId,omitempty"`
	DocumentID  string `json:"documentId,omitempty"`
	FragmentID  string `json:"fragmentId,omitempty"`
	Version     int    `json:"version"`
	// DocumentVersion is a section's: the document's version with it.
	DocumentVersion int    `json:"documentVersion,omitempty"`
	Path            string `json:"path"`
	IV              string `json:"iv"`
	// TTag is the key the version is under: the record's own for a version
	// it holds (never the manifest's key of today), the manifest's for its
	// history; "" when neither names one.
	TTag    string    `json:"ttag,omitempty"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	SavedAt time.Time `json:"savedAt,omitzero"`
	// ActingAs is the principal that saved it; "" for the manifest's
	// history, which does not name one.
	ActingAs string `json:"actingAs"`
	Caller   string `json:"caller,omitempty"`
	// Source is "manifest" (history, or the section as protected) or
	// "record" (the journal).
	Source string `json:"source"`
	// Current is a section's version the server serves now.
	Current bool `json:"current,omitempty"`
}

// Sources of an Entry.
const (
	SourceManifest = "manifest"
	SourceRecord   = "record"
)

// Kinds of an Entry.
const (
	KindResult  = "result"
	KindSection = "section"
)

// List returns every destination's and section's versions: the manifest's
// and the record's, by destination, then by document and section, each
// oldest first. Rows for ids the manifest no longer holds are listed too.
func List(m *grant.Manifest, vs []journal.Version) []Entry {
	var out []Entry
	merged := Merge(m, vs)
	inRecord := map[string]bool{}
	for _, v := range vs {
		inRecord[v.Path] = true
	}
	for id, d := range m.Destinations {
		for _, v := range d.Versions {
			if !inRecord[v.Path] {
				out = append(out, Entry{Kind: KindResult, Destination: id, Version: v.Version, Path: v.Path, IV: v.IV,
					TTag: cmp.Or(v.TTag, d.TTag), SHA256: v.SHA256, Size: v.Size, SavedAt: v.SavedAt.UTC(), Source: SourceManifest})
			}
		}
	}
	current := map[string]bool{}
	for id, d := range merged.Documents {
		if !d.IsCompound() {
			continue
		}
		for _, f := range d.Fragments {
			current[f.Path] = true
		}
		for _, f := range m.Documents[id].Fragments {
			if !inRecord[f.Path] {
				out = append(out, Entry{Kind: KindSection, DocumentID: id, FragmentID: f.ID, Version: f.Version, Path: f.Path,
					IV: f.IV, TTag: cmp.Or(f.TTag, m.CompoundKeys[f.DataType]), SHA256: f.SHA256, Size: f.Size, Source: SourceManifest})
			}
		}
	}
	for _, v := range vs {
		e := Entry{Version: v.Version, Path: v.Path, IV: v.IV, TTag: v.TTag, SHA256: v.SHA256, Size: v.Size,
			SavedAt: v.SavedAt.UTC(), ActingAs: v.ActingAs, Caller: v.Caller, Source: SourceRecord}
		if v.Destination != "" {
			e.Kind, e.Destination = KindResult, v.Destination
		} else {
			e.Kind, e.DocumentID, e.FragmentID, e.DocumentVersion = KindSection, v.DocumentID, v.FragmentID, v.DocumentVersion
		}
		out = append(out, e)
	}
	for i := range out {
		if out[i].Kind == KindSection {
			out[i].Current = current[out[i].Path]
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Destination, b.Destination),
			cmp.Compare(a.DocumentID, b.DocumentID), cmp.Compare(a.FragmentID, b.FragmentID),
			cmp.Compare(a.Version, b.Version), cmp.Compare(a.Source, b.Source))
	})
	return out
}

// ErrNoJournal: a journal path given outright names no file.
var ErrNoJournal = errors.New("no journal at the path given")

// Load reads the manifest and the record beside it: the journal at
// journalPath ("" for the default beside the manifest). A journal that does
// not exist yet is an empty record and is not created, unless the folder
// holds saved versions: then a missing or empty journal is ErrRecordLost
// (CheckJournal). A journalPath given that does not exist is ErrNoJournal.
// A journal of another task than the manifest's is refused by name
// (journal.ErrOtherTask): its versions are not this task's.
func Load(ctx context.Context, manifestPath, journalPath string) (*grant.Manifest, []journal.Version, error) {
	m, err := grant.LoadManifest(manifestPath)
	if err != nil {
		return nil, nil, err
	}
	// A journal named outright is one the operator means: if it is not
	// there (mistyped), reading the manifest alone would pass for a task
	// with nothing saved.
	if journalPath != "" {
		if _, err := os.Stat(journalPath); errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("record: %w: %s (name the journal that exists, or leave --journal out for the one beside the manifest)", ErrNoJournal, journalPath)
		}
	}
	j, err := OpenJournal(ctx, manifestPath, m, journalPath)
	if err != nil {
		return nil, nil, err
	}
	if j == nil {
		return m, nil, nil
	}
	defer j.Close()
	if err := j.CheckTask(ctx, m.Task); err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	vs, err := j.Versions(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	return m, vs, nil
}

// WriteText writes entries for a person: one line a version, grouped by
// destination and by section.
func WriteText(w io.Writer, entries []Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tID\tVERSION\tSAVED AT\tACTING AS\tKEY\tSIZE\tSHA256\tIV\tPATH\tSOURCE")
	for _, e := range entries {
		id, version := e.Destination, strconv.Itoa(e.Version)
		if e.Kind == KindSection {
			id = e.DocumentID + "/" + e.FragmentID
			if e.DocumentVersion > 0 {
				version += fmt.Sprintf(" (document v%d)", e.DocumentVersion)
			}
			if e.Current {
				version += " current"
			}
		}
		saved := "-"
		if !e.SavedAt.IsZero() {
			saved = e.SavedAt.UTC().Format(time.RFC3339)
		}
		acting := e.ActingAs
		if acting == "" {
			acting = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Kind, id, version, saved, acting, shortKey(e.TTag),
			e.Size, e.SHA256, e.IV, e.Path, e.Source)
	}
	return tw.Flush()
}

// shortKey is a t-Tag's first 8 characters, enough to tell keys apart in
// a table; "-" for none.
func shortKey(ttag string) string {
	if ttag == "" {
		return "-"
	}
	if len(ttag) > 8 {
		return ttag[:8] + "…"
	}
	return ttag
}

// ErrExportOverManifest: an export was asked to replace the manifest or
// the journal it reads.
var ErrExportOverManifest = errors.New("the merged manifest would replace the manifest or journal it is made from")

// ErrOrphans: the record holds versions of a destination or document the
// manifest no longer holds, which a manifest-format export cannot carry.
var ErrOrphans = errors.New("the record holds versions the manifest no longer names")

// Export writes the merged manifest (Merge) to out, in manifest.json's own
// format, for tools that read one. write, when not nil, writes it (the
// command's writer, which also takes "-" for standard output); nil writes
// out itself, in full or not at all (a synced temporary file renamed into
// place), mode 0600. It refuses to write over the manifest itself (the
// operator's file, which the record never rewrites) or the journal.
//
// The export takes no lock and leaves none beside out: it is a snapshot no
// pdmcp writer shares or updates (unlike the manifest, whose writers take
// its lock so an update's read, change and rename stay one step), and the
// rename already makes each export whole. What it reads is read as
// Load reads it.
//
// It also returns the orphans (Orphans): versions of a destination or
// document the manifest no longer holds, which the export leaves out. With
// orphans and !allowOrphans nothing is written and the error matches
// ErrOrphans: an export that silently drops saved versions would be taken
// for the whole record.
func Export(ctx context.Context, manifestPath, journalPath, out string, allowOrphans bool, write func([]byte) error) (*grant.Manifest, []journal.Version, error) {
	explicit := journalPath != ""
	if journalPath == "" {
		journalPath = journal.DefaultPath(manifestPath)
	}
	for _, own := range []string{manifestPath, journalPath} {
		if samePath(own, out) {
			return nil, nil, fmt.Errorf("export to %s: %w", out, ErrExportOverManifest)
		}
	}
	if !explicit {
		journalPath = ""
	}
	m, vs, err := Load(ctx, manifestPath, journalPath)
	if err != nil {
		return nil, nil, err
	}
	orphans := Orphans(m, vs)
	if len(orphans) > 0 && !allowOrphans {
		return nil, orphans, fmt.Errorf("export: %w: %d versions (of %s); nothing was written: add the destination or document back to the manifest, or pass --allow-orphans to export without them",
			ErrOrphans, len(orphans), orphanTargets(orphans))
	}
	merged := Merge(m, vs)
	if err := merged.Validate(); err != nil {
		return nil, orphans, fmt.Errorf("export: the merged manifest does not hold: %w", err)
	}
	data, err := json.MarshalIndent(merged, "", "  ")
	if err != nil {
		return nil, orphans, fmt.Errorf("export: %w", err)
	}
	data = append(data, '\n')
	if write == nil {
		write = func(b []byte) error { return writeWhole(out, b) }
	}
	if err := write(data); err != nil {
		return nil, orphans, fmt.Errorf("export: %w", err)
	}
	return merged, orphans, nil
}

// writeWhole writes b to path in full or not at all: a synced temporary
// file beside it, mode 0600, renamed into place.
func writeWhole(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// orphanTargets names the destinations and documents of orphans, sorted.
func orphanTargets(orphans []journal.Version) string {
	var ids []string
	for _, v := range orphans {
		id := "destination " + v.Destination
		if v.Destination == "" {
			id = "document " + v.DocumentID
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return strings.Join(ids, ", ")
}

// samePath reports whether a and b name one file: the same absolute path,
// or (when both exist) the same file by another name.
func samePath(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	ba, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == ba {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// UnderKeys returns the entries of List saved under one of keys, each by
// its own key (Entry.TTag): a version of the record by the key it was
// saved under, whatever the manifest names today; the manifest's history
// by the manifest's. A version of the record from before the record kept
// keys (no key of its own) goes by its destination's or data type's key in
// the manifest. Removing those keys leaves these files unreadable.
func UnderKeys(m *grant.Manifest, vs []journal.Version, keys []string) []Entry {
	var out []Entry
	for _, e := range List(m, vs) {
		ttag := e.TTag
		if ttag == "" {
			if e.Kind == KindResult {
				ttag = m.Destinations[e.Destination].TTag
			} else if f, ok := m.Documents[e.DocumentID].Fragment(e.FragmentID); ok {
				ttag = m.CompoundKeys[f.DataType]
			}
		}
		if ttag != "" && slices.Contains(keys, ttag) {
			out = append(out, e)
		}
	}
	return out
}
