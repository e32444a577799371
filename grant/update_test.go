package grant

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// writerEnv makes the test binary a writer process (see writer).
const writerEnv = "GRANT_TEST_WRITER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(writerEnv); spec != "" {
		if err := writer(spec); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// writer is one operator's process: "name:rounds:manifest:record" waits for
// "go" on standard input, then each round adds a destination named after it
// and the round to the manifest, and a key to the seed record.
func writer(spec string) error {
	if manifest, ok := strings.CutPrefix(spec, "die:"); ok {
		return dieMidUpdate(manifest)
	}
	parts := strings.SplitN(spec, ":", 4)
	if len(parts) != 4 {
		return fmt.Errorf("spec %q", spec)
	}
	name, manifest, record := parts[0], parts[2], parts[3]
	rounds, err := strconv.Atoi(parts[1])
	if err != nil {
		return err
	}
	if line, _ := bufio.NewReader(os.Stdin).ReadString('\n'); line != "go\n" {
		return fmt.Errorf("no go: %q", line)
	}
	ctx := context.Background()
	for i := range rounds {
		id := fmt.Sprintf("%s-%d", name, i)
		if _, err := UpdateManifest(ctx, manifest, func(m *Manifest) error {
			if m.Destinations == nil {
				m.Destinations = map[string]Destination{}
			}
			m.Destinations[id] = Destination{Label: id}
			return nil
		}); err != nil {
			return err
		}
		if _, err := UpdateSeedRecord(ctx, record, func(r *SeedRecord) error {
			r.Keys = append(r.Keys, "key-"+id)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// dieMidUpdate is killed, as kill -9 would, while it holds the manifest's
// lock with its change half made.
func dieMidUpdate(manifest string) error {
	_, err := UpdateManifest(context.Background(), manifest, func(m *Manifest) error {
		delete(m.Documents, "proposal-aurora")
		fmt.Println("changing")
		p, err := os.FindProcess(os.Getpid())
		if err != nil {
			return err
		}
		_ = p.Kill()
		select {} // not reached where Kill works
	})
	return err
}

// TestUpdateManifestKilledHoldingTheLock: a writer killed in the middle of
// its change leaves the manifest byte for byte as it was, and its lock
// stops no one.
func TestUpdateManifestKilledHoldingTheLock(t *testing.T) {
	manifest := copyFixture(t, "manifest-valid.json", "manifest.json")
	before, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"=die:"+manifest)
	out, err := cmd.Output()
	if err == nil || string(out) != "changing\n" {
		t.Fatalf("the writer was not killed mid-change: %v, said %q", err, out)
	}
	if after, _ := os.ReadFile(manifest); string(after) != string(before) {
		t.Fatal("a writer killed mid-change altered the manifest")
	}
	if _, err := UpdateManifest(context.Background(), manifest, func(m *Manifest) error {
		m.Destinations["after-the-kill"] = Destination{}
		return nil
	}); err != nil {
		t.Fatalf("the next writer: %v", err)
	}
	assertOnly(t, filepath.Dir(manifest), "manifest.json", "manifest.json.lock")
}

// TestUpdateManifestAcrossProcesses: three processes change one manifest
// and one seed record at once, many rounds each; every change of every
// process is in the files at the end.
func TestUpdateManifestAcrossProcesses(t *testing.T) {
	const procs, rounds = 3, 40
	manifest := copyFixture(t, "manifest-valid.json", "manifest.json")
	record := filepath.Join(filepath.Dir(manifest), "seed-record.json")
	data, err := os.ReadFile(filepath.Join("testdata", "seed-record-valid.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(record, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var ps []*testutil.Child
	for i := range procs {
		ps = append(ps, testutil.StartChild(t, fmt.Sprintf("%s=w%d:%d:%s:%s", writerEnv, i, rounds, manifest, record)))
	}
	// All start together, so their writes overlap.
	for _, p := range ps {
		if _, err := io.WriteString(p.Stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		p.Wait(t)
	}
	m, err := LoadManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	r, err := LoadSeedRecord(record)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for i := range procs {
		for j := range rounds {
			id := fmt.Sprintf("w%d-%d", i, j)
			if _, ok := m.Destinations[id]; !ok {
				lost = append(lost, "destination "+id)
			}
			if !slices.Contains(r.Keys, "key-"+id) {
				lost = append(lost, "key "+id)
			}
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d changes lost, e.g. %v", len(lost), 2*procs*rounds, lost[:min(len(lost), 5)])
	}
	// What the fixture held before is still there too.
	if _, ok := m.Documents["proposal-aurora"]; !ok {
		t.Fatal("the fixture's document is gone")
	}
}

// TestUpdateManifestFailedChangeLeavesFile: a change that fails, and one
// that makes the manifest invalid, leave the file byte for byte as it was
// and no temporary file beside it.
func TestUpdateManifestFailedChangeLeavesFile(t *testing.T) {
	errOwn := errors.New("the caller's own refusal")
	tests := []struct {
		name   string
		change func(*Manifest) error
		want   error
	}{
		{"change refuses", func(m *Manifest) error {
			delete(m.Documents, "proposal-aurora")
			return errOwn
		}, errOwn},
		{"result invalid", func(m *Manifest) error {
			d := m.Documents["proposal-aurora"]
			d.IV = "not base64"
			m.Documents["proposal-aurora"] = d
			return nil
		}, ErrBadIV},
		{"result escapes the folder", func(m *Manifest) error {
			m.Destinations["evaluation-summary"] = Destination{Versions: []SavedVersion{{Version: 1, Path: "../x"}}}
			return nil
		}, ErrBadPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := copyFixture(t, "manifest-valid.json", "manifest.json")
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := UpdateManifest(context.Background(), path, tt.change); !errors.Is(err, tt.want) {
				t.Fatalf("UpdateManifest: %v, want %v", err, tt.want)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(after) != string(before) {
				t.Fatal("a failed change altered the manifest")
			}
			assertOnly(t, filepath.Dir(path), "manifest.json", "manifest.json.lock")
		})
	}
}

// assertOnly checks dir holds exactly the names given.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	if got := testutil.DirNames(t, dir); !slices.Equal(got, names) {
		t.Fatalf("folder holds %v, want %v", got, names)
	}
}

// TestUpdateManifestReadsUnderTheLock: the change sees what another writer
// saved after this caller's own copy was read, and keeps it; a change that
// changes nothing leaves the very file in place.
func TestUpdateManifestReadsUnderTheLock(t *testing.T) {
	ctx := context.Background()
	path := copyFixture(t, "manifest-valid.json", "manifest.json")
	if _, err := LoadManifest(path); err != nil {
		t.Fatal(err)
	}
	if _, err := UpdateManifest(ctx, path, func(m *Manifest) error {
		m.Destinations["other"] = Destination{Label: "another writer's"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := UpdateManifest(ctx, path, func(m *Manifest) error {
		d := m.Documents["proposal-aurora"]
		d.Approved = false
		m.Documents["proposal-aurora"] = d
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := back.Destinations["other"]; !ok || back.Documents["proposal-aurora"].Approved || got.File() != back.File() {
		t.Fatalf("after two updates: destinations %v, approved %v", back.Destinations, back.Documents["proposal-aurora"].Approved)
	}

	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := UpdateManifest(ctx, path, func(*Manifest) error { return nil }); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("a change that changed nothing replaced the file")
	}
}

// TestWritersWaitForTheLock: while another holds the manifest's lock, an
// update, a whole-file Save and a create all wait; one whose context ends
// returns its error and writes nothing.
func TestWritersWaitForTheLock(t *testing.T) {
	path := copyFixture(t, "manifest-valid.json", "manifest.json")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	held, err := filelock.TryAcquire(LockPath(path))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = UpdateManifest(ctx, path, func(m *Manifest) error {
		t.Error("the change ran without the lock")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("UpdateManifest while locked: %v, want context.Canceled", err)
	}
	fresh := filepath.Join(filepath.Dir(path), "new", "manifest.json")
	if err := os.Mkdir(filepath.Dir(fresh), 0o700); err != nil {
		t.Fatal(err)
	}
	newLock, err := filelock.TryAcquire(LockPath(fresh))
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := CreateManifest(ctx, fresh, m); !errors.Is(err, context.Canceled) {
		t.Fatalf("CreateManifest while locked: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("CreateManifest wrote without the lock: %v", err)
	}

	// Save has no context: it waits for the holder, and writes once the
	// lock is released.
	saved := make(chan error, 1)
	go func() { saved <- m.Save(path) }()
	select {
	case err := <-saved:
		t.Fatalf("Save returned (%v) while another held the lock", err)
	default:
	}
	if got, _ := os.ReadFile(path); string(got) != string(before) {
		t.Fatal("Save wrote while another held the lock")
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-saved; err != nil {
		t.Fatalf("Save after the release: %v", err)
	}
	if err := newLock.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestCreateManifest: a new manifest is written; one already there is
// refused and kept.
func TestCreateManifest(t *testing.T) {
	ctx := context.Background()
	src, err := LoadManifest(copyFixture(t, "manifest-valid.json", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "manifest.json")
	if err := CreateManifest(ctx, path, src); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	other := src.Clone()
	delete(other.Documents, "proposal-aurora")
	if err := CreateManifest(ctx, path, other); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateManifest over a manifest: %v, want ErrExist", err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(first) {
		t.Fatal("a refused create changed the manifest")
	}
	bad := src.Clone()
	bad.Version = 9
	if err := CreateManifest(ctx, filepath.Join(t.TempDir(), "manifest.json"), bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CreateManifest of an invalid manifest: %v", err)
	}
}

// TestUpdateSeedRecordFailedChangeLeavesFile: a refused or invalid change
// to the seed record leaves it byte for byte as it was.
func TestUpdateSeedRecordFailedChangeLeavesFile(t *testing.T) {
	path := copyFixture(t, "seed-record-valid.json", "seed-record.json")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	errOwn := errors.New("refused")
	for _, change := range []func(*SeedRecord) error{
		func(r *SeedRecord) error { r.Keys = nil; return errOwn },
		func(r *SeedRecord) error { r.Keys = append(r.Keys, r.Keys[0]); return nil },
	} {
		if _, err := UpdateSeedRecord(context.Background(), path, change); err == nil {
			t.Fatal("a failed change reported success")
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Fatal("a failed change altered the seed record")
		}
	}
}
