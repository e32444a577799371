package record

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
)

const iv = "AAAAAAAAAAAAAAAAAAAAAA=="

var (
	h64 = strings.Repeat("ab", 32)
	at  = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
)

func manifest() *grant.Manifest {
	return &grant.Manifest{Version: 1,
		CompoundKeys: map[string]string{"lab": "t-lab"},
		Documents: map[string]grant.Document{"x": {Kind: grant.KindCompound, Approved: true, Version: 1, Size: 10, SHA256: h64,
			Skeleton: "documents/x/skeleton.txt", Fragments: []grant.Fragment{
				{ID: "A", DataType: "lab", Path: "documents/x/A.v1.bin", IV: "ivA", SHA256: h64, Size: 4, Version: 1},
				{ID: "B", DataType: "lab", Path: "documents/x/B.v1.bin", IV: "ivB", SHA256: h64, Size: 6, Version: 1}}}},
		Destinations: map[string]grant.Destination{"d": {TTag: "t-d", Versions: []grant.SavedVersion{
			{Version: 1, Path: "results/d.v1.bin", IV: iv, SHA256: h64, Size: 3, SavedAt: at}}}},
	}
}

func rows() []journal.Version {
	return []journal.Version{
		{Destination: "d", Version: 2, Path: "results/d.v2.bin", IV: iv, SHA256: h64, Size: 5, SavedAt: at, ActingAs: "agent"},
		{DocumentID: "x", FragmentID: "A", Version: 2, DocumentVersion: 2, BaseIV: "ivA", Path: "documents/x/A.v2.bin", IV: "iv2", SHA256: h64, Size: 7, SavedAt: at},
		{DocumentID: "x", FragmentID: "A", Version: 3, DocumentVersion: 3, BaseIV: "ivA", Path: "documents/x/A.v3.bin", IV: "iv3", SHA256: h64, Size: 8, SavedAt: at},
		// A chain from an IV the manifest no longer names: history only.
		{DocumentID: "x", FragmentID: "B", Version: 2, DocumentVersion: 9, BaseIV: "old", Path: "documents/x/B.v2.bin", IV: "ivOld", SHA256: h64, Size: 1, SavedAt: at},
		{Destination: "gone", Version: 1, Path: "results/gone.v1.bin", IV: iv, SHA256: h64, SavedAt: at},
	}
}

func TestMerge(t *testing.T) {
	m := manifest()
	merged := Merge(m, rows())
	d := merged.Destinations["d"]
	if len(d.Versions) != 2 || d.Versions[1].Path != "results/d.v2.bin" {
		t.Fatalf("destination versions %+v", d.Versions)
	}
	x := merged.Documents["x"]
	a, _ := x.Fragment("A")
	b, _ := x.Fragment("B")
	if a.Version != 3 || a.IV != "iv3" || b.Version != 1 || x.Version != 3 || x.Size != 14 || x.SHA256 != "" {
		t.Fatalf("document %+v", x)
	}
	if m.Documents["x"].Fragments[0].Version != 1 || len(m.Destinations["d"].Versions) != 1 {
		t.Fatal("Merge changed its input")
	}
	if o := Orphans(m, rows()); len(o) != 1 || o[0].Destination != "gone" {
		t.Fatalf("orphans %+v", o)
	}
	if Merge(m, nil).Documents["x"].SHA256 != h64 {
		t.Fatal("with no record the document keeps its sha256")
	}
}

func TestList(t *testing.T) {
	entries := List(manifest(), rows())
	var got []string
	for _, e := range entries {
		id := e.Destination
		if e.Kind == KindSection {
			id = e.DocumentID + "/" + e.FragmentID
		}
		mark := ""
		if e.Current {
			mark = "*"
		}
		got = append(got, e.Kind+":"+id+":"+string(rune('0'+e.Version))+":"+e.Source+mark)
	}
	want := []string{"result:d:1:manifest", "result:d:2:record", "result:gone:1:record",
		"section:x/A:1:manifest", "section:x/A:2:record", "section:x/A:3:record*",
		"section:x/B:1:manifest*", "section:x/B:2:record"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("list\n got %v\nwant %v", got, want)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, entries); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "3 (document v3) current") || !strings.Contains(buf.String(), "agent") {
		t.Fatalf("table:\n%s", buf.String())
	}
	if u := UnderKeys(manifest(), rows(), []string{"t-d"}); len(u) != 2 {
		t.Fatalf("under t-d: %+v", u)
	}
}

// TestRotatedKeyKeepsOldVersions: after a destination's key and a data
// type's key are replaced in the manifest, the record's versions stay
// under the keys they were saved under, in the merge (export), the list
// and the versions a key's removal leaves unreadable.
func TestRotatedKeyKeepsOldVersions(t *testing.T) {
	m := manifest()
	d := m.Destinations["d"]
	d.TTag = "t-d-new"
	m.Destinations["d"] = d
	m.CompoundKeys["lab"] = "t-lab-new"
	vs := rows()
	vs[0].TTag = "t-d" // results/d.v2.bin
	vs[2].TTag = "t-lab"
	merged := Merge(m, vs)
	if got := merged.Destinations["d"].Versions; got[1].TTag != "t-d" || got[0].TTag != "" {
		t.Fatalf("merged versions %+v", got)
	}
	if a, _ := merged.Documents["x"].Fragment("A"); a.TTag != "t-lab" || a.Version != 3 {
		t.Fatalf("merged section %+v", a)
	}
	keys := map[string]string{}
	for _, e := range List(m, vs) {
		keys[e.Path] = e.TTag
	}
	if keys["results/d.v2.bin"] != "t-d" || keys["documents/x/A.v3.bin"] != "t-lab" || keys["results/d.v1.bin"] != "t-d-new" {
		t.Fatalf("listed keys %v", keys)
	}
	paths := func(es []Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Path)
		}
		return out
	}
	if got := paths(UnderKeys(m, vs, []string{"t-d"})); strings.Join(got, " ") != "results/d.v2.bin" {
		t.Fatalf("under the old key: %v", got)
	}
	if got := paths(UnderKeys(m, vs, []string{"t-d-new"})); strings.Join(got, " ") != "results/d.v1.bin" {
		t.Fatalf("under the new key: %v", got)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, List(m, vs)); err != nil || !strings.Contains(buf.String(), "t-d-new") {
		t.Fatalf("table (%v):\n%s", err, buf.String())
	}
}

// TestLoadRefusesAnotherTasksJournal: versions, export-manifest and seed
// --cleanup read the record through Load, which refuses the journal of
// another task by name.
func TestLoadRefusesAnotherTasksJournal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mp := filepath.Join(dir, "manifest.json")
	m := &grant.Manifest{Version: grant.ManifestVersion, Task: "task-new"}
	if err := m.Save(mp); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(ctx, journal.DefaultPath(mp))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.BindTask(ctx, "task-old"); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, _, err = Load(ctx, mp, "")
	if !errors.Is(err, journal.ErrOtherTask) || !strings.Contains(err.Error(), "task-old") || !strings.Contains(err.Error(), "task-new") {
		t.Fatalf("Load: %v", err)
	}
	if _, _, err := Export(ctx, mp, "", filepath.Join(dir, "out.json"), false, nil); !errors.Is(err, journal.ErrOtherTask) {
		t.Fatalf("Export: %v", err)
	}
	m.Task = "task-old"
	if err := m.Save(mp); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(ctx, mp, ""); err != nil {
		t.Fatalf("its own task: %v", err)
	}
}
