// Package handofftest builds, for tests, a compound document whose sections
// are encrypted through a real reference Gateway under one key per data
// type, a manifest holding it with a hand-off step, and the users a step
// needs: the patient who owns the keys, the doctor who receives, and a
// nurse who holds the keys READ only.
package handofftest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/compound"
)

// Step ids of the built manifest.
const (
	// StepReferral hands allergies, medications and problems of DocID (three
	// keys), not results, from the patient to the doctor.
	StepReferral = "referral"
	// StepByNurse hands problems from the nurse, who holds it READ only.
	StepByNurse = "nurse-referral"
	// DocID is the compound document; PlainDocID a single one.
	DocID      = "ccd-0001"
	PlainDocID = "note-0001"
)

// Sections of the compound document: fragment id, data type, text. Each
// is a C-CDA section element, as pdmcp protect would have split it, so a
// save of one passes the section-text check.
var Sections = []struct{ ID, DataType, Text string }{
	{"allergies", "allergies", "<section><text>Synthetic allergy: penicillin.</text></section>"},
	{"medications", "medications", "<section><text>Synthetic medication: none.</text></section>"},
	{"problems", "problems", "<section><text>Synthetic problem: persistent cough, three weeks.</text></section>"},
	{"results", "results", "<section><text>Synthetic result: chest film clear.</text></section>"},
}

// World is what Build made.
type World struct {
	Service  *gateway.ServiceConfig
	Client   *gateway.Client
	Patient  *api.Principal
	Doctor   *api.Principal
	Nurse    *api.Principal
	Manifest string // path of the saved manifest
	Dir      string
	// Keys maps a data type to its key; PlainKey is the single document's.
	Keys     map[string]string
	PlainKey string
}

// Options change what Build makes.
type Options struct {
	// Users, when set, names the principals (relative to the service's
	// prefix) instead of "patient", "doctor", "nurse"; they are created
	// unless they exist.
	Patient, Doctor, Nurse string
	// Window is the referral step's maxWindowSeconds (default 1800).
	Window int
	// Confirm is the referral step's confirm (default "none").
	Confirm string
}

// Build registers a service at env, makes the users and keys, writes the
// ciphertexts under dir and saves dir/manifest.json.
func Build(t testing.TB, env *reftest.Env, dir string, o Options) *World {
	t.Helper()
	svc := env.Service(t, "svc", true)
	return BuildWith(t, svc, env.ServiceClient(t, svc), dir, o)
}

// BuildWith is Build for a service already registered.
func BuildWith(t testing.TB, svc *gateway.ServiceConfig, c *gateway.Client, dir string, o Options) *World {
	t.Helper()
	ctx := context.Background()
	name := func(v, def string) string {
		if v == "" {
			v = def
		}
		return svc.Prefix + v
	}
	w := &World{Service: svc, Client: c, Dir: dir, Keys: map[string]string{}}
	w.Patient = principal(t, c, name(o.Patient, "patient"))
	w.Doctor = principal(t, c, name(o.Doctor, "doctor"))
	w.Nurse = principal(t, c, name(o.Nurse, "nurse"))
	patient := Mint(t, c, w.Patient.Name)
	defer patient.Revoke(ctx)

	if err := os.MkdirAll(filepath.Join(dir, "documents", DocID), 0o700); err != nil {
		t.Fatal(err)
	}
	doc := grant.Document{Kind: grant.KindCompound, Label: "Synthetic summary", Category: "clinical", Approved: true,
		ContentType: "application/xml", Version: 1, Skeleton: "documents/" + DocID + "/skeleton.xml"}
	skeleton := `<ClinicalDocument xmlns="urn:hl7-org:v3"><component><structuredBody>`
	for _, s := range Sections {
		iv := make([]byte, 16)
		iv[0] = byte(len(s.ID))
		in := gateway.EncryptInput{IV: iv, Plaintext: []byte(s.Text), TTag: w.Keys[s.DataType]}
		enc, err := patient.Encrypt(ctx, in)
		if err != nil {
			t.Fatalf("encrypt %s: %v", s.ID, err)
		}
		w.Keys[s.DataType] = enc.TTag
		rel := "documents/" + DocID + "/" + s.ID + ".v1.bin"
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(rel)), enc.Ciphertext, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(s.Text))
		doc.Fragments = append(doc.Fragments, grant.Fragment{ID: s.ID, Label: "Synthetic " + s.ID, DataType: s.DataType,
			Path: rel, IV: base64.StdEncoding.EncodeToString(iv), SHA256: hex.EncodeToString(sum[:]),
			Size: int64(len(s.Text)), Version: 1})
		skeleton += "<component>" + string(compound.Marker(s.ID)) + "</component>"
		doc.Size += int64(len(s.Text))
	}
	skeleton += "</structuredBody></component></ClinicalDocument>"
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(doc.Skeleton)), []byte(skeleton), 0o600); err != nil {
		t.Fatal(err)
	}
	doc.Size += int64(len(skeleton))

	// A single document, so a grant can name a key outside the step.
	plainIV := make([]byte, 16)
	plain, err := patient.Encrypt(ctx, gateway.EncryptInput{IV: plainIV, Plaintext: []byte("Synthetic note.")})
	if err != nil {
		t.Fatal(err)
	}
	w.PlainKey = plain.TTag
	if err := os.WriteFile(filepath.Join(dir, "documents", PlainDocID+".bin"), plain.Ciphertext, 0o600); err != nil {
		t.Fatal(err)
	}
	psum := sha256.Sum256([]byte("Synthetic note."))

	// The nurse holds every key READ only: she can read, and cannot hand.
	for _, k := range append(mapValues(w.Keys), w.PlainKey) {
		if err := patient.ACLGrant(ctx, api.ACLGrantRequest{TTag: k, SystemID: w.Nurse.SystemID,
			PrincipalID: w.Nurse.PrincipalID, Rights: []string{api.RightRead}}); err != nil {
			t.Fatal(err)
		}
	}
	window := o.Window
	if window == 0 {
		window = 1800
	}
	confirm := o.Confirm
	if confirm == "" {
		confirm = grant.ConfirmNone
	}
	to := grant.Recipient{Label: "Dr. Synthetic", ActingAs: w.Doctor.Name, SystemID: w.Doctor.SystemID,
		PrincipalID: w.Doctor.PrincipalID}
	m := &grant.Manifest{Version: grant.ManifestVersion, CompoundKeys: w.Keys,
		Documents: map[string]grant.Document{DocID: doc, PlainDocID: {Label: "Synthetic note", Approved: true,
			ContentType: "text/plain", Version: 1, Path: "documents/" + PlainDocID + ".bin", TTag: plain.TTag,
			IV: base64.StdEncoding.EncodeToString(plainIV), SHA256: hex.EncodeToString(psum[:]), Size: 15}},
		Steps: map[string]grant.Step{
			StepReferral: {Label: "Referral: history", From: w.Patient.Name, To: to,
				Documents: map[string][]string{DocID: {"allergies", "medications", "problems"}}, MaxWindowSeconds: window,
				Confirm: confirm},
			StepByNurse: {Label: "Nurse's referral", From: w.Nurse.Name, To: to,
				Documents: map[string][]string{DocID: {"problems"}}, MaxWindowSeconds: 600, Confirm: grant.ConfirmNone},
		}}
	w.Manifest = filepath.Join(dir, "manifest.json")
	if err := m.Save(w.Manifest); err != nil {
		t.Fatal(err)
	}
	return w
}

// Grant is a grant over the world's manifest: both documents, the given
// steps and tools, for ttl.
func (w *World) Grant(localUser string, tools, steps []string, ttl time.Duration) *grant.Grant {
	now := time.Now().Truncate(time.Second)
	return &grant.Grant{ID: "feedfacecafebeef", Version: grant.GrantVersion, LocalUser: localUser,
		CallerIdentity: localUser == "", AllowedTools: tools, Documents: []string{DocID, PlainDocID},
		Destinations: []string{}, Steps: steps, IssuedAt: now.Add(-time.Minute), NotAfter: now.Add(ttl), Manifest: w.Manifest}
}

// Mint is a five-minute scoped session acting as who, over every key of
// the world (or none, for a session that only encrypts new keys).
func Mint(t testing.TB, c *gateway.Client, who string, objects ...string) *gateway.Session {
	t.Helper()
	s, err := c.Mint(context.Background(), gateway.MintRequest{ActingAs: who, Objects: objects, TTL: 5 * time.Minute})
	if err != nil {
		t.Fatalf("mint as %s: %v", who, err)
	}
	return s
}

// As is a session acting as who over every key of the world.
func (w *World) As(t testing.TB, who string) *gateway.Session {
	t.Helper()
	return Mint(t, w.Client, who, append(mapValues(w.Keys), w.PlainKey)...)
}

// Entry is who's entry on the key, as the patient (the owner) reads it.
func (w *World) Entry(t testing.TB, ttag string, who *api.Principal) (api.ACLEntry, bool) {
	t.Helper()
	s := w.As(t, w.Patient.Name)
	defer s.Revoke(context.Background())
	entries, err := s.ACLGet(context.Background(), ttag)
	if err != nil {
		t.Fatalf("acl get: %v", err)
	}
	for _, e := range entries {
		if e.SystemID == who.SystemID && e.PrincipalID == who.PrincipalID {
			return e, true
		}
	}
	return api.ACLEntry{}, false
}

// Fragment reads one section's ciphertext and IV from the manifest.
func (w *World) Fragment(t testing.TB, id string) (ttag string, iv, ct []byte) {
	t.Helper()
	m, err := grant.LoadManifest(w.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	d := m.Documents[DocID]
	f, ok := d.Fragment(id)
	if !ok {
		t.Fatalf("no fragment %s", id)
	}
	iv, _ = base64.StdEncoding.DecodeString(f.IV)
	ct, err = os.ReadFile(filepath.Join(w.Dir, filepath.FromSlash(f.Path)))
	if err != nil {
		t.Fatal(err)
	}
	return m.CompoundKeys[f.DataType], iv, ct
}

func principal(t testing.TB, c *gateway.Client, name string) *api.Principal {
	t.Helper()
	if p, err := c.GetPrincipal(context.Background(), name); err == nil {
		return p
	}
	return reftest.Principal(t, c, name)
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
