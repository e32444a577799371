package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
)

// seeded starts a reference Gateway and seeds a folder: the manifest and
// seed record protect runs against.
func seeded(t *testing.T, tag string) (*reftest.Env, *gateway.ServiceConfig, string) {
	t.Helper()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	dir := t.TempDir()
	if _, err := Seed(context.Background(), SeedOptions{Config: svc, OutDir: dir, Tag: tag}); err != nil {
		t.Fatal(err)
	}
	return env, svc, dir
}

func protectOptions(svc *gateway.ServiceConfig, dir, source, id string) ProtectOptions {
	return ProtectOptions{Config: svc, ManifestPath: filepath.Join(dir, "manifest.json"), SourcePath: source,
		DocumentID: id, RecordPath: filepath.Join(dir, "seed-record.json")}
}

const oruFixture = "seeddata/synthetic-oru.hl7"

// TestProtectRefusesBeforeSpending: a source over the Gateway's limit and a
// section over the read limit are refused before anything is sent (no
// encrypt, no mint, no journal entry), and the document id is still free:
// the ordinary source is then protected under it.
func TestProtectRefusesBeforeSpending(t *testing.T) {
	oru, err := os.ReadFile(oruFixture)
	if err != nil {
		t.Fatal(err)
	}
	bigNote := bytes.Replace(oru, []byte("Repeat in three months"), bytes.Repeat([]byte("A"), MaxSectionBytes+1), 1)
	if bytes.Equal(bigNote, oru) {
		t.Fatal("the fixture lost its NTE")
	}
	for _, tc := range []struct {
		name, want string
		write      func(path string) error
	}{
		{"a section over the read limit", "over the 65536-byte limit of one read", func(p string) error { return os.WriteFile(p, bigNote, 0o600) }},
		// A sparse file: its size is what protect sees; it is read no
		// further than the limit.
		{"a source over the Gateway's limit", "over 16777215 bytes", func(p string) error {
			if err := os.WriteFile(p, oru, 0o600); err != nil {
				return err
			}
			return os.Truncate(p, 200<<20)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			env, svc, dir := seeded(t, "s")
			src := filepath.Join(t.TempDir(), "source.hl7")
			if err := tc.write(src); err != nil {
				t.Fatal(err)
			}
			env.Gateway.ResetCounts()
			_, err := Protect(ctx, protectOptions(svc, dir, src, "oru-0001"))
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was sent") {
				t.Fatalf("protect: %v; want ErrTooLarge saying %q", err, tc.want)
			}
			if n := len(env.Gateway.Counts()); n != 0 {
				t.Fatalf("a refused protect sent requests: %v", env.Gateway.Counts())
			}
			if _, err := os.Lstat(filepath.Join(dir, ProtectJournalName)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a refused protect wrote a journal (%v)", err)
			}
			sum, err := Protect(ctx, protectOptions(svc, dir, oruFixture, "oru-0001"))
			if err != nil || sum.AlreadyDone || len(sum.Rows) == 0 {
				t.Fatalf("the id after the refusal: %+v, %v", sum, err)
			}
		})
	}
}

// journalRun reads the protect journal's run of id, or nil.
func journalRun(t *testing.T, dir, id string) *protectRun {
	t.Helper()
	j, err := loadProtectJournal(filepath.Join(dir, ProtectJournalName))
	if err != nil {
		t.Fatal(err)
	}
	return j.Documents[id]
}

// TestProtectInterruptedThenAbandoned: a stop while the first encrypt (the
// one that creates a key) is at the Gateway waits for its answer, records
// the key it made and says interrupted, not that the Gateway was
// unreachable; AbandonProtect removes that key at the Gateway (read back
// gone), the journal entry and any files, and leaves the manifest's and the
// seed's keys alone; the id is then protected from the start.
func TestProtectInterruptedThenAbandoned(t *testing.T) {
	env, svc, dir := seeded(t, "i")
	env.Gateway.ResetCounts()
	err := stopAtFirstEncrypt(t, env, "protect", func(ctx context.Context) error {
		_, err := Protect(ctx, protectOptions(svc, dir, oruFixture, "oru-0001"))
		return err
	})
	if !errors.Is(err, ErrInterrupted) || strings.Contains(err.Error(), api.CodeUnreachable) {
		t.Fatalf("interrupted protect: %v; want ErrInterrupted", err)
	}
	if n := env.Gateway.Count(api.RouteEncrypt); n != 1 {
		t.Fatalf("%d encrypts after the stop, want only the one in flight", n)
	}
	run := journalRun(t, dir, "oru-0001")
	if run == nil || len(run.Attempts) != 1 || run.Attempts[0].State != attemptEncrypted || !run.Attempts[0].CreatesKey || run.Attempts[0].TTag == "" {
		t.Fatalf("the journal does not hold the key the interrupted encrypt made: %+v", run)
	}
	made := run.Attempts[0].TTag
	m, err := grant.LoadManifest(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Documents["oru-0001"]; ok {
		t.Fatal("the manifest lists the interrupted document")
	}

	// The key is in the seed record too: seed --cleanup would remove it
	// were the run never continued or abandoned.
	recordPath := filepath.Join(dir, "seed-record.json")
	if rec, err := grant.LoadSeedRecord(recordPath); err != nil || !slices.Contains(rec.Keys, made) {
		t.Fatalf("the seed record lacks the interrupted run's key (%v)", err)
	}

	sum, err := AbandonProtect(context.Background(), AbandonOptions{Config: svc, ManifestPath: filepath.Join(dir, "manifest.json"),
		DocumentID: "oru-0001", RecordPath: recordPath})
	if err != nil || sum.KeysRemoved != 1 || sum.KeysKept != 0 {
		t.Fatalf("abandon: %+v, %v", sum, err)
	}
	rec, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(rec.Keys, made) {
		t.Fatal("the seed record still lists the abandoned run's key")
	}
	c, err := gateway.New(svc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	owner, err := c.Mint(context.Background(), gateway.MintRequest{ActingAs: rec.OwnerUser, Objects: append([]string{made}, rec.Keys...), TTL: api.MaxScopedTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Revoke(context.Background())
	if _, err := owner.ACLGet(context.Background(), made); !errors.Is(err, &api.Error{Code: api.CodeKeyNotFound}) {
		t.Fatalf("the abandoned run's key: %v, want KEY_NOT_FOUND", err)
	}
	for _, k := range rec.Keys {
		if _, err := owner.ACLGet(context.Background(), k); err != nil {
			t.Fatalf("a seed key after abandon: %v", err)
		}
	}
	if journalRun(t, dir, "oru-0001") != nil {
		t.Fatal("the journal still holds the abandoned run")
	}
	if _, err := os.Lstat(filepath.Join(dir, "documents", "oru-0001")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("documents/oru-0001 after abandon: %v", err)
	}
	// A second abandon has nothing to abandon, and says so.
	if _, err := AbandonProtect(context.Background(), AbandonOptions{Config: svc, ManifestPath: filepath.Join(dir, "manifest.json"), DocumentID: "oru-0001"}); !errors.Is(err, ErrNoUnfinishedRun) {
		t.Fatalf("second abandon: %v, want ErrNoUnfinishedRun", err)
	}
	if _, err := Protect(context.Background(), protectOptions(svc, dir, oruFixture, "oru-0001")); err != nil {
		t.Fatalf("protect after abandon: %v", err)
	}
	// A protected document is not abandoned.
	if _, err := AbandonProtect(context.Background(), AbandonOptions{Config: svc, ManifestPath: filepath.Join(dir, "manifest.json"), DocumentID: "oru-0001"}); !errors.Is(err, ErrAlreadyProtected) {
		t.Fatalf("abandon of a protected document: %v, want ErrAlreadyProtected", err)
	}
}

// TestAbandonKeepsKeysOthersUse: of the two keys an unfinished ORU run
// created, the one another run of the journal used, or the one the
// manifest's compoundKeys names, is kept; the other is removed, and the
// run's files go. The other run's journal entry is untouched.
func TestAbandonKeepsKeysOthersUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		// share makes one of the run's keys (demographics, results) in use
		// elsewhere.
		share func(j *protectJournal, m *grant.Manifest, keys map[string]string)
	}{
		{"another run used it", func(j *protectJournal, _ *grant.Manifest, keys map[string]string) {
			j.Documents["oru-0002"] = &protectRun{SourceSHA256: "x", Owner: j.Documents["oru-0001"].Owner, State: "encrypting",
				Attempts: []*protectEntry{{Fragment: "PID.1", DataType: "demographics", State: attemptEncrypted, TTag: keys["demographics"]}}}
		}},
		{"the manifest names it", func(_ *protectJournal, m *grant.Manifest, keys map[string]string) {
			m.CompoundKeys = map[string]string{"results": keys["results"]}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			_, svc, dir := seeded(t, "k")
			if _, err := Protect(ctx, protectOptions(svc, dir, oruFixture, "oru-0001")); err != nil {
				t.Fatal(err)
			}
			// Make oru-0001's run look unfinished, as if its manifest step
			// never ran.
			jpath := filepath.Join(dir, ProtectJournalName)
			j, err := loadProtectJournal(jpath)
			if err != nil {
				t.Fatal(err)
			}
			keys := j.createdKeys()
			if len(keys) != 2 {
				t.Fatalf("the ORU run created keys for %v, want demographics and results", keys)
			}
			j.Documents["oru-0001"].State = "encrypting"
			if _, err := grant.UpdateManifest(ctx, filepath.Join(dir, "manifest.json"), func(m *grant.Manifest) error {
				delete(m.Documents, "oru-0001")
				m.CompoundKeys = nil
				tc.share(j, m, keys)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := j.save(); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(jpath)
			sum, err := AbandonProtect(ctx, AbandonOptions{Config: svc, ManifestPath: filepath.Join(dir, "manifest.json"), DocumentID: "oru-0001"})
			if err != nil || sum.KeysKept != 1 || sum.KeysRemoved != 1 || sum.FilesRemoved == 0 {
				t.Fatalf("abandon: %+v, %v; want one key kept, one removed, the files removed", sum, err)
			}
			after, err := loadProtectJournal(jpath)
			if err != nil {
				t.Fatal(err)
			}
			var was protectJournal
			if err := json.Unmarshal(before, &was); err != nil {
				t.Fatal(err)
			}
			if len(after.Documents) != len(was.Documents)-1 || after.Documents["oru-0001"] != nil {
				t.Fatalf("abandon removed %d journal entries, want only oru-0001's", len(was.Documents)-len(after.Documents))
			}
		})
	}
}
