package operator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/filelock"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/sidecar"
)

//go:embed seeddata/*.txt
var seedFiles embed.FS

// seedDoc is one synthetic document of the seed set.
type seedDoc struct {
	id, label, category string
	approved            bool
}

// seedSet is the synthetic set: five supplier proposals, one of them not
// approved to the agent's user (and given no access at the key server),
// and the evaluation criteria.
var seedSet = []seedDoc{
	{"proposal-aurora", "Proposal: Aurora Components", "proposal", true},
	{"proposal-borealis", "Proposal: Borealis Industrial", "proposal", true},
	{"proposal-cirrus", "Proposal: Cirrus Precision", "proposal", true},
	{"proposal-doldrum", "Proposal: Doldrum Trading", "proposal", true},
	{"proposal-equinox", "Proposal: Equinox Bearings (under legal review)", "proposal", false},
	{"evaluation-criteria", "Evaluation criteria", "criteria", true},
}

// SeedDestination is the seed's one save destination.
const SeedDestination = "evaluation-summary"

// SeedOptions are `pdmcp seed`'s inputs.
type SeedOptions struct {
	Config *gateway.ServiceConfig
	OutDir string
	// Tag names this seed's principals: <prefix><tag>.owner and
	// <prefix><tag>.agent. Random when empty.
	Tag string
	// Users are extra principals created beside the agent, each granted
	// READ on Approved documents (all approved ones when nil), for
	// multi-user setups such as pdmcp dev.
	Users []SeedUser
	// Logger gets the Gateway requests; nil discards.
	Logger *slog.Logger
}

// SeedUser is an extra user of the seed.
type SeedUser struct {
	Name      string   // the local part; the principal is <prefix><tag>.<name>
	Documents []string // documents granted READ; nil: none
	Save      bool     // READ on the destination's key too
}

// Seed creates the synthetic set through the Gateway, as the registered
// service: the owner and agent principals, one key per document (owned by
// the owner), the destination's key, the agent's READ entries, the
// ciphertexts, the manifest and the seed record. The record comes first and
// names each principal and key once it is made; the manifest comes last, so
// a folder with a record and no manifest is a seed that stopped part-way.
//
// A stop (ctx ending: Ctrl-C, SIGTERM) waits for the Gateway call in flight
// that makes something (a principal, a key), records what it made, and
// returns an error matching ErrInterrupted; Cleanup of the record then
// leaves a folder Seed accepts.
func Seed(ctx context.Context, o SeedOptions) (*grant.SeedRecord, error) {
	rec, err := seed(ctx, o)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrInterrupted) {
		err = fmt.Errorf("seed: %w (%w); pdmcp seed --cleanup --seed-record %s removes what it made", ErrInterrupted, err,
			filepath.Join(o.OutDir, "seed-record.json"))
	}
	return rec, err
}

func seed(ctx context.Context, o SeedOptions) (*grant.SeedRecord, error) {
	if o.Config == nil || o.OutDir == "" {
		return nil, errors.New("seed: --config and --out are required")
	}
	manifestPath := filepath.Join(o.OutDir, "manifest.json")
	recordPath := filepath.Join(o.OutDir, "seed-record.json")
	for _, p := range []string{manifestPath, recordPath} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("seed: %s exists: %w; seed into an empty folder (a seed record lists what an earlier seed made: pdmcp seed --cleanup --seed-record %s removes it)", p, ErrSeedExists, recordPath)
		}
	}
	if err := refuseSavedVersions(ctx, o.OutDir, manifestPath); err != nil {
		return nil, err
	}
	task, err := grant.NewTaskID()
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	if o.Tag == "" {
		b := make([]byte, 3)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		o.Tag = "seed" + hex.EncodeToString(b)
	}
	c, err := gateway.New(clientConfig(o.Config, o.Logger))
	if err != nil {
		return nil, err
	}
	if err := c.SignIn(ctx); err != nil {
		return nil, fmt.Errorf("seed: sign in: %w", err)
	}
	prefix := c.Prefix()
	rec := &grant.SeedRecord{
		OwnerUser:  prefix + o.Tag + ".owner",
		AgentUser:  prefix + o.Tag + ".agent",
		Manifest:   abs(manifestPath),
		Principals: []string{},
		Keys:       []string{},
	}
	if err := os.MkdirAll(filepath.Join(o.OutDir, "documents"), 0o700); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	// The record is written before anything is created and grows with each
	// principal and key as soon as the Gateway has made it, so a seed that
	// fails or is stopped part-way leaves a record of what it made for
	// pdmcp seed --cleanup, not keys and principals no file names.
	if err := grant.CreateSeedRecord(ctx, recordPath, rec); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	// A call that makes something is not cut by a stop: what it made is
	// recorded first (bounded by the client's per-request timeout), then
	// the run stops between steps.
	work := context.WithoutCancel(ctx)
	stopped := func() error {
		if ctx.Err() == nil {
			return nil
		}
		return fmt.Errorf("seed: %w; the seed record lists what was made: pdmcp seed --cleanup --seed-record %s removes it", ErrInterrupted, recordPath)
	}
	if err := stopped(); err != nil {
		return nil, err
	}
	made := func(principal, key string) error {
		written, err := grant.UpdateSeedRecord(context.WithoutCancel(ctx), recordPath, func(r *grant.SeedRecord) error {
			if principal != "" && !slices.Contains(r.Principals, principal) {
				r.Principals = append(r.Principals, principal)
			}
			r.AddKeys(key)
			return nil
		})
		if err != nil {
			return fmt.Errorf("seed: record what was made: %w", err)
		}
		rec = written
		return stopped()
	}
	for _, name := range []string{rec.OwnerUser, rec.AgentUser} {
		if _, err := c.CreatePrincipal(work, api.PrincipalRequest{Name: name}); err != nil {
			return nil, fmt.Errorf("seed: create principal %s: %w", name, err)
		}
		if err := made(name, ""); err != nil {
			return nil, err
		}
	}
	extra := map[string]*api.Principal{}
	for _, u := range o.Users {
		name := prefix + o.Tag + "." + u.Name
		p, err := c.CreatePrincipal(work, api.PrincipalRequest{Name: name})
		if err != nil {
			return nil, fmt.Errorf("seed: create principal %s: %w", name, err)
		}
		if err := made(name, ""); err != nil {
			return nil, err
		}
		extra[u.Name] = p
	}
	agent, err := c.GetPrincipal(ctx, rec.AgentUser)
	if err != nil {
		return nil, fmt.Errorf("seed: read principal %s: %w", rec.AgentUser, err)
	}
	// The owner's session starts empty: each key it mints joins its scope.
	owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: rec.OwnerUser, TTL: api.MaxScopedTTL})
	if err != nil {
		return nil, fmt.Errorf("seed: owner session: %w", err)
	}
	defer owner.Revoke(context.WithoutCancel(ctx))

	m := &grant.Manifest{Version: grant.ManifestVersion, Task: task, Documents: map[string]grant.Document{},
		Destinations: map[string]grant.Destination{}}
	for _, d := range seedSet {
		text, err := seedFiles.ReadFile("seeddata/" + d.id + ".txt")
		if err != nil {
			return nil, err
		}
		iv := make([]byte, api.IVBytes)
		if _, err := rand.Read(iv); err != nil {
			return nil, err
		}
		enc, err := owner.Encrypt(work, gateway.EncryptInput{IV: iv, Plaintext: text})
		if err != nil {
			return nil, fmt.Errorf("seed: encrypt %s: %w", d.id, err)
		}
		if err := made("", enc.TTag); err != nil {
			return nil, err
		}
		rel := "documents/" + d.id + ".v1.bin"
		if err := os.WriteFile(filepath.Join(o.OutDir, filepath.FromSlash(rel)), enc.Ciphertext, 0o600); err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
		sum := sha256.Sum256(text)
		m.Documents[d.id] = grant.Document{Label: d.label, Category: d.category, Approved: d.approved,
			ContentType: "text/plain; charset=utf-8", Version: 1, Path: rel, TTag: enc.TTag,
			IV: base64.StdEncoding.EncodeToString(enc.IV), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(text))}
		if d.approved {
			if err := grantRead(ctx, owner, enc.TTag, agent); err != nil {
				return nil, err
			}
		}
		for _, u := range o.Users {
			if slices.Contains(u.Documents, d.id) {
				if err := grantRead(ctx, owner, enc.TTag, extra[u.Name]); err != nil {
					return nil, err
				}
			}
		}
	}
	// The destination's key: minted by an encrypt whose output is dropped.
	anchor, err := owner.Encrypt(work, gateway.EncryptInput{Plaintext: []byte(SeedDestination)})
	if err != nil {
		return nil, fmt.Errorf("seed: destination key: %w", err)
	}
	if err := made("", anchor.TTag); err != nil {
		return nil, err
	}
	m.Destinations[SeedDestination] = grant.Destination{Label: "Evaluation summary", TTag: anchor.TTag}
	// READ is enough for a user to encrypt a new result under the key.
	if err := grantRead(ctx, owner, anchor.TTag, agent); err != nil {
		return nil, err
	}
	for _, u := range o.Users {
		if u.Save {
			if err := grantRead(ctx, owner, anchor.TTag, extra[u.Name]); err != nil {
				return nil, err
			}
		}
	}
	// Created under the manifest's lock, and refused if a manifest
	// appeared while this ran: another's is never replaced.
	if err := grant.CreateManifest(ctx, manifestPath, m); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	return rec, nil
}

// refuseSavedVersions refuses a seed into a folder that still holds an
// earlier task's saved versions: in the journal beside the manifest, or in
// the sidecars beside their files (the journal may be gone). The new task
// would otherwise take them for its own (its first save would be version
// 2, and the export would list the old task's versions under its keys).
// Nothing is created when it refuses.
func refuseSavedVersions(ctx context.Context, dir, manifestPath string) error {
	jpath := journal.DefaultPath(manifestPath)
	if _, err := os.Lstat(jpath); err == nil {
		j, err := journal.Open(ctx, jpath)
		if err != nil {
			return fmt.Errorf("seed: read the folder's journal: %w", err)
		}
		has, err := j.HasVersions(ctx)
		j.Close()
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if has {
			return fmt.Errorf("seed: %s: %w; a new task is not seeded over them: seed into an empty folder, or move the old task's journal, results/ and documents/ away first", jpath, ErrSavedVersions)
		}
	}
	vs, _, err := sidecar.Scan(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("seed: %w", err)
	}
	if len(vs) > 0 {
		return fmt.Errorf("seed: %s: %w (%d version sidecars, e.g. %s); a new task is not seeded over them: seed into an empty folder, or move them away first",
			dir, ErrSavedVersions, len(vs), sidecar.PathOf(vs[0].Record.Path))
	}
	return nil
}

// ErrSeedExists: seed was asked to seed a folder that holds an earlier
// seed's manifest or seed record.
var ErrSeedExists = errors.New("the folder holds an earlier seed")

// ErrSavedVersions: seed was asked to seed a folder that holds an earlier
// task's saved versions.
var ErrSavedVersions = errors.New("the folder holds saved versions of an earlier task")

// grantRead gives p READ on ttag and reads the entry back.
func grantRead(ctx context.Context, owner *gateway.Session, ttag string, p *api.Principal) error {
	err := owner.ACLGrant(ctx, api.ACLGrantRequest{TTag: ttag, SystemID: p.SystemID, PrincipalID: p.PrincipalID,
		Rights: []string{api.RightRead}})
	if err != nil {
		return fmt.Errorf("seed: grant READ to %s: %w", p.Name, err)
	}
	entries, err := owner.ACLGet(ctx, ttag)
	if err != nil {
		return fmt.Errorf("seed: read back ACL: %w", err)
	}
	for _, e := range entries {
		if e.SystemID == p.SystemID && e.PrincipalID == p.PrincipalID && slices.Contains(e.Rights, api.RightRead) {
			return nil
		}
	}
	return fmt.Errorf("seed: READ for %s did not read back", p.Name)
}

// Cleanup removes every key of a seed record, reading each back absent, then
// its principals, and rewrites the record to list only what is left
// (nothing, when all went): a second run has nothing to do, and after a
// partial run it retries only the rest. While a key is left, the owner
// principal is kept, so the retry can act as the owner. It returns what it
// could not remove.
func Cleanup(ctx context.Context, cfg *gateway.ServiceConfig, recordPath string) error {
	_, err := CleanupSeed(ctx, CleanupOptions{Config: cfg, RecordPath: recordPath})
	return err
}

// CleanupOptions are `pdmcp seed --cleanup`'s inputs.
type CleanupOptions struct {
	Config     *gateway.ServiceConfig
	RecordPath string
	// Logger gets the Gateway requests; nil discards.
	Logger *slog.Logger
}

// CleanupResult is what a cleanup removed.
type CleanupResult struct {
	Keys       int // keys removed, each read back absent
	Principals int // principals removed, each read back absent
}

// CleanupSeed is Cleanup, with a logger, returning what it removed (also
// when some of it could not be removed: the error says what).
func CleanupSeed(ctx context.Context, o CleanupOptions) (*CleanupResult, error) {
	res := &CleanupResult{}
	err := cleanup(ctx, o, res)
	return res, err
}

func cleanup(ctx context.Context, o CleanupOptions, res *CleanupResult) error {
	cfg, recordPath := o.Config, o.RecordPath
	rec, err := grant.LoadSeedRecord(recordPath)
	if err != nil {
		return err
	}
	c, err := gateway.New(clientConfig(cfg, o.Logger))
	if err != nil {
		return err
	}
	var problems []string
	keysLeft := []string{}
	if len(rec.Keys) > 0 {
		owner, err := c.Mint(ctx, gateway.MintRequest{ActingAs: rec.OwnerUser, Objects: rec.Keys, TTL: api.MaxScopedTTL})
		if err != nil {
			return fmt.Errorf("cleanup: owner session: %w", err)
		}
		for _, k := range rec.Keys {
			if err := owner.RemoveKey(ctx, k); err != nil && !errors.Is(err, &api.Error{Code: api.CodeKeyNotFound}) {
				problems = append(problems, fmt.Sprintf("key %s…: %v", short(k), err))
				keysLeft = append(keysLeft, k)
				continue
			}
			if _, err := owner.ACLGet(ctx, k); !errors.Is(err, &api.Error{Code: api.CodeKeyNotFound}) {
				problems = append(problems, fmt.Sprintf("key %s… still reads back (%v)", short(k), err))
				keysLeft = append(keysLeft, k)
			}
		}
		_ = owner.Revoke(ctx)
	}
	principalsLeft := []string{}
	for _, p := range rec.Principals {
		if p == rec.OwnerUser && len(keysLeft) > 0 {
			principalsLeft = append(principalsLeft, p)
			continue
		}
		if err := c.DeletePrincipal(ctx, p); err != nil && !errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
			problems = append(problems, fmt.Sprintf("principal %s: %v", p, err))
			principalsLeft = append(principalsLeft, p)
			continue
		}
		if _, err := c.GetPrincipal(ctx, p); !errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
			problems = append(problems, fmt.Sprintf("principal %s still reads back (%v)", p, err))
			principalsLeft = append(principalsLeft, p)
		}
	}
	// The record is changed as it is now, under its lock: only what this
	// run removed leaves it, so a key a protect added meanwhile stays
	// listed for the next cleanup.
	removedKeys := removedSet(rec.Keys, keysLeft)
	removedPrincipals := removedSet(rec.Principals, principalsLeft)
	res.Keys, res.Principals = len(removedKeys), len(removedPrincipals)
	_, err = grant.UpdateSeedRecord(ctx, recordPath, func(r *grant.SeedRecord) error {
		r.Keys = slices.DeleteFunc(r.Keys, func(k string) bool { return removedKeys[k] })
		r.Principals = slices.DeleteFunc(r.Principals, func(p string) bool { return removedPrincipals[p] })
		if len(r.Keys) > 0 && removedPrincipals[r.OwnerUser] {
			problems = append(problems, fmt.Sprintf("the record gained %d keys while cleanup ran (a protect?); their owner %s is removed, so remove them as another owner", len(r.Keys), r.OwnerUser))
		}
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("the seed record could not be rewritten (%v); it still lists what was removed", err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("cleanup: %s", strings.Join(problems, "; "))
	}
	return removeStoppedSeed(ctx, recordPath)
}

// removeStoppedSeed removes, once everything a seed record lists is gone,
// what a seed that stopped before its manifest wrote beside the record: its
// documents' ciphertexts (by the seed set's names only), documents/ if that
// leaves it empty, and the record itself, so that the folder is one Seed
// accepts. A folder with a manifest.json is a seed that finished: its
// manifest refers to those files and the record stays, listing nothing.
func removeStoppedSeed(ctx context.Context, recordPath string) error {
	dir := filepath.Dir(recordPath)
	if _, err := os.Lstat(filepath.Join(dir, "manifest.json")); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	abs, err := grant.RealPath(recordPath)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	// Under the record's lock, read as it is now: a protect or seed that
	// added to it since keeps it.
	l, err := filelock.Acquire(ctx, grant.LockPath(abs))
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer l.Release()
	rec, err := grant.LoadSeedRecord(abs)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	if len(rec.Keys) > 0 || len(rec.Principals) > 0 {
		return nil
	}
	var problems []string
	for _, d := range seedSet {
		p := filepath.Join(dir, "documents", d.id+".v1.bin")
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, err.Error())
		}
	}
	// Only an empty documents/ goes: anything else in it is not the seed's.
	docs := filepath.Join(dir, "documents")
	if left, err := os.ReadDir(docs); err == nil && len(left) == 0 {
		if err := os.Remove(docs); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) == 0 {
		if err := os.Remove(abs); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("cleanup: everything the record listed is removed, but the stopped seed's files are not: %s", strings.Join(problems, "; "))
	}
	return nil
}

// removedSet is the entries of all that are not in left.
func removedSet(all, left []string) map[string]bool {
	out := map[string]bool{}
	for _, v := range all {
		if !slices.Contains(left, v) {
			out[v] = true
		}
	}
	return out
}

func short(ttag string) string {
	if len(ttag) > 8 {
		return ttag[:8]
	}
	return ttag
}
