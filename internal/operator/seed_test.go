package operator

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
)

// TestCleanupRewritesTheRecord: a cleanup that fails on one key leaves a
// record listing exactly that key and the owner (kept so the retry can act
// as the owner); the retry removes them and leaves a record that lists
// nothing; a third run sends no removal at all.
func TestCleanupRewritesTheRecord(t *testing.T) {
	ctx := context.Background()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	dir := t.TempDir()
	rec, err := Seed(ctx, SeedOptions{Config: svc, OutDir: dir, Tag: "c"})
	if err != nil {
		t.Fatal(err)
	}
	recordPath := filepath.Join(dir, "seed-record.json")

	env.Gateway.SetFaults(reference.Faults{FailNext: map[string]int{api.RouteKeyRemove: 1}})
	if err := Cleanup(ctx, svc, recordPath); err == nil {
		t.Fatal("a cleanup that could not remove a key said OK")
	}
	left, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Keys) != 1 || left.Keys[0] != rec.Keys[0] || !slices.Equal(left.Principals, []string{rec.OwnerUser}) {
		t.Fatalf("after a partial cleanup the record lists keys %d, principals %v; want the one key and the owner",
			len(left.Keys), left.Principals)
	}

	if err := Cleanup(ctx, svc, recordPath); err != nil {
		t.Fatalf("retry: %v", err)
	}
	done, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(done.Keys) != 0 || len(done.Principals) != 0 {
		t.Fatalf("after cleanup the record still lists keys %d, principals %v", len(done.Keys), done.Principals)
	}

	env.Gateway.ResetCounts()
	if err := Cleanup(ctx, svc, recordPath); err != nil {
		t.Fatalf("cleanup of an empty record: %v", err)
	}
	if n := env.Gateway.Count(api.RouteKeyRemove) + env.Gateway.Count(api.RouteAdminDeletePrincipal); n != 0 {
		t.Errorf("a cleanup with nothing left sent %d removals", n)
	}
}

// TestCleanupKeepsAKeyAddedWhileItRan: a key another writer (a protect)
// adds to the seed record while cleanup is at the Gateway stays listed, and
// cleanup says its owner is gone; cleanup removes from the record only what
// it removed.
func TestCleanupKeepsAKeyAddedWhileItRan(t *testing.T) {
	ctx := context.Background()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	dir := t.TempDir()
	if _, err := Seed(ctx, SeedOptions{Config: svc, OutDir: dir, Tag: "k"}); err != nil {
		t.Fatal(err)
	}
	recordPath := filepath.Join(dir, "seed-record.json")

	// Every request is held until the faults change, so cleanup stops at
	// its first request, after it read the record.
	env.Gateway.ResetCounts()
	env.Gateway.SetFaults(reference.Faults{Delay: time.Hour})
	done := make(chan error, 1)
	go func() { done <- Cleanup(ctx, svc, recordPath) }()
	for env.Gateway.Count(api.RouteServiceLogin)+env.Gateway.Count(api.RouteScoped) == 0 {
		select {
		case err := <-done:
			t.Fatalf("cleanup ended before reaching the Gateway: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	rec, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		t.Fatal(err)
	}
	const added = "key-added-by-a-protect"
	rec.Keys = append(rec.Keys, added)
	if err := rec.Save(recordPath); err != nil {
		t.Fatal(err)
	}
	env.Gateway.SetFaults(reference.Faults{})

	err = <-done
	if err == nil || !strings.Contains(err.Error(), "gained 1 keys") {
		t.Fatalf("cleanup: %v; want it to say the record gained a key", err)
	}
	left, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left.Keys, []string{added}) || len(left.Principals) != 0 {
		t.Fatalf("record after cleanup: keys %v, principals %v; want only the added key", left.Keys, left.Principals)
	}
}

// TestSeedRecordsWhatItMadeWhenItFails: a seed that fails part-way (every
// READ grant refused, after the first key was made) leaves no manifest and
// a record naming exactly the principals and the key it made; cleanup of
// that record removes them all.
func TestSeedRecordsWhatItMadeWhenItFails(t *testing.T) {
	ctx := context.Background()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	dir := t.TempDir()
	env.Gateway.SetFaults(reference.Faults{FailNext: map[string]int{api.RouteACLGrant: 1000}})
	if _, err := Seed(ctx, SeedOptions{Config: svc, OutDir: dir, Tag: "f"}); err == nil {
		t.Fatal("a seed whose grants all failed said OK")
	}
	env.Gateway.SetFaults(reference.Faults{})
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed seed left a manifest (%v)", err)
	}
	recordPath := filepath.Join(dir, "seed-record.json")
	rec, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		t.Fatalf("a failed seed left no record of what it made: %v", err)
	}
	if !slices.Equal(rec.Principals, []string{rec.OwnerUser, rec.AgentUser}) || len(rec.Keys) != 1 {
		t.Fatalf("record lists principals %v and %d keys; want the owner and agent and the one key made", rec.Principals, len(rec.Keys))
	}
	if n := env.Gateway.Count(api.RouteEncrypt); n != 1 {
		t.Fatalf("%d encrypts reached the Gateway, want 1", n)
	}

	env.Gateway.ResetCounts()
	if err := Cleanup(ctx, svc, recordPath); err != nil {
		t.Fatalf("cleanup of a failed seed's record: %v", err)
	}
	if n := env.Gateway.Count(api.RouteKeyRemove); n != 1 {
		t.Errorf("cleanup removed %d keys, want 1", n)
	}
	c, err := gateway.New(svc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rec.Principals {
		if _, err := c.GetPrincipal(ctx, p); !errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
			t.Errorf("principal %s after cleanup: %v, want not found", p, err)
		}
	}
}

// TestSeedRefusesAFolderWithARecord: a seed into a folder that holds a seed
// record but no manifest (an earlier seed that stopped, or a protect's
// record) is refused before anything reaches the Gateway, and the record is
// left byte for byte.
func TestSeedRefusesAFolderWithARecord(t *testing.T) {
	ctx := context.Background()
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	dir := t.TempDir()
	recordPath := filepath.Join(dir, "seed-record.json")
	earlier := &grant.SeedRecord{OwnerUser: "o", AgentUser: "a", Principals: []string{"o", "a"}, Keys: []string{"k1"}}
	if err := grant.CreateSeedRecord(ctx, recordPath, earlier); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(recordPath)
	if err != nil {
		t.Fatal(err)
	}
	env.Gateway.ResetCounts()
	_, err = Seed(ctx, SeedOptions{Config: svc, OutDir: dir, Tag: "r"})
	if err == nil || !strings.Contains(err.Error(), "seed-record.json exists") {
		t.Fatalf("seed into a folder with a record: %v", err)
	}
	if after, _ := os.ReadFile(recordPath); !bytes.Equal(after, before) {
		t.Fatalf("the earlier record changed:\n%s\nwas\n%s", after, before)
	}
	if n := len(env.Gateway.Counts()); n != 0 {
		t.Fatalf("a refused seed sent requests: %v", env.Gateway.Counts())
	}
	if err := grant.CreateSeedRecord(ctx, recordPath, earlier); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateSeedRecord over a record: %v, want fs.ErrExist", err)
	}
}

// TestSeedStoppedThenCleanedThenSeeded: a seed stopped while its first
// encrypt is at the Gateway waits for the key, records it and says
// interrupted; seed --cleanup removes what the record lists and what the
// stopped seed wrote (its files and the record), and a seed into the same
// folder then succeeds.
func TestSeedStoppedThenCleanedThenSeeded(t *testing.T) {
	env := reftest.Start(t, reference.Config{})
	svc := env.Service(t, "svc", true)
	dir := t.TempDir()
	recordPath := filepath.Join(dir, "seed-record.json")
	err := stopAtFirstEncrypt(t, env, "seed", func(ctx context.Context) error {
		_, err := Seed(ctx, SeedOptions{Config: svc, OutDir: dir, Tag: "stop"})
		return err
	})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("stopped seed: %v, want ErrInterrupted", err)
	}
	rec, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Keys) != 1 || len(rec.Principals) != 2 {
		t.Fatalf("the record lists %d keys and principals %v; want the key in flight and the owner and agent", len(rec.Keys), rec.Principals)
	}

	if err := Cleanup(context.Background(), svc, recordPath); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		// The record's lock file may stay: it is never read.
		if e.Name() != filepath.Base(grant.LockPath(recordPath)) {
			t.Errorf("cleanup of a stopped seed left %s", e.Name())
		}
	}
	if _, err := Seed(context.Background(), SeedOptions{Config: svc, OutDir: dir, Tag: "again"}); err != nil {
		t.Fatalf("seed after cleanup: %v", err)
	}
	// A finished seed's cleanup keeps its manifest and the emptied record.
	if err := Cleanup(context.Background(), svc, recordPath); err != nil {
		t.Fatalf("cleanup of the finished seed: %v", err)
	}
	for _, name := range []string{"manifest.json", "seed-record.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("cleanup of a finished seed removed %s: %v", name, err)
		}
	}
}

// stopAtFirstEncrypt runs run while the Gateway holds every encrypt, stops
// it (cancels its context) once the first encrypt has reached the Gateway,
// then lets the Gateway answer, and returns what run returned. what names
// the run in failures.
func stopAtFirstEncrypt(t *testing.T, env *reftest.Env, what string, run func(context.Context) error) error {
	t.Helper()
	env.Gateway.SetFaults(reference.Faults{HoldRoute: api.RouteEncrypt})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	deadline := time.After(time.Minute)
	for env.Gateway.Count(api.RouteEncrypt) == 0 {
		select {
		case err := <-done:
			t.Fatalf("%s ended before its first encrypt: %v", what, err)
		case <-deadline:
			t.Fatal("no encrypt reached the Gateway")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	// The stop must not cut the encrypt: it is answered only now.
	env.Gateway.SetFaults(reference.Faults{})
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s did not end after the stop", what)
	}
	return nil
}
