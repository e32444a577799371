package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

// devClient connects the go-sdk client to a running pdmcp dev over
// Streamable HTTP as a development user.
func devClient(t *testing.T, d *devRun, user string) *mcp.ClientSession {
	t.Helper()
	token := strings.TrimSpace(run(t, "dev", "token", user, "--state", d.state))
	pem, err := os.ReadFile(d.info["caFile"].(string))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &testutil.Bearer{Token: token, Base: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	c := mcp.NewClient(&mcp.Implementation{Name: "dev-compound", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.info["mcpUrl"].(string), HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestDevCompoundOverHTTP: pdmcp dev protects both synthetic compound
// documents at its first run; over Streamable HTTP, alice (every data type)
// reads the sources' exact bytes, bob (results only) reads results and
// placeholders refused by the key server, carol reads placeholders only. A
// second run protects and grants nothing again.
func TestDevCompoundOverHTTP(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	d := startDev(t, state)
	sources := map[string][]byte{}
	for id, name := range map[string]string{"ccd-0001": "synthetic-ccd.xml", "oru-0001": "synthetic-oru.hl7"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "internal", "operator", "seeddata", name))
		if err != nil {
			t.Fatal(err)
		}
		sources[id] = b
	}

	alice := devClient(t, d, "alice")
	for id, src := range sources {
		got, isErr := call(t, alice, "read_protected_document", map[string]any{"documentId": id})
		if isErr || got["complete"] != true || got["text"] != string(src) || got["provenance"].(map[string]any)["sha256"] != sha(src) {
			t.Fatalf("alice %s: complete %v, same bytes %v", id, got["complete"], got["text"] == string(src))
		}
	}

	bob := devClient(t, d, "bob")
	got, isErr := call(t, bob, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
	text, _ := got["text"].(string)
	if isErr || got["complete"] != false || !strings.Contains(text, "LDL cholesterol") || strings.Contains(text, "Penicillin") ||
		!strings.Contains(text, "withheld: keyserver ACL_DENIED") {
		t.Fatalf("bob's mixed view: %v", got)
	}
	for _, o := range got["sections"].([]any) {
		o := o.(map[string]any)
		if (o["dataType"] == "results") != (o["outcome"] == "opened") || (o["outcome"] == "withheld" && (o["layer"] != "keyserver" || o["code"] != "ACL_DENIED")) {
			t.Fatalf("bob's section %v", o)
		}
	}
	got, isErr = call(t, bob, "read_protected_document", map[string]any{"documentId": "oru-0001"})
	if text, _ := got["text"].(string); isErr || !strings.Contains(text, "ZPF|PID.1|demographics|keyserver|ACL_DENIED") || !strings.Contains(text, "OBX|1|NM|2093-3") {
		t.Fatalf("bob's ORU: %v", got)
	}
	got, isErr = call(t, bob, "read_protected_fragment", map[string]any{"documentId": "ccd-0001", "fragmentId": "medications"})
	wantRefused(t, got, isErr, "keyserver", "ACL_DENIED")

	carol := devClient(t, d, "carol")
	got, _ = call(t, carol, "read_protected_document", map[string]any{"documentId": "ccd-0001"})
	for _, o := range got["sections"].([]any) {
		if o.(map[string]any)["outcome"] != "withheld" {
			t.Fatalf("carol opened %v", o)
		}
	}

	// A second run reuses the protected documents: no new key, no second
	// entry.
	d.stop(t)
	db := filepath.Join(state, "gateway", "gateway.sqlite")
	keys := countRows(t, db, "keys")
	acl := countRows(t, db, "acl")
	d2 := startDev(t, state)
	if countRows(t, db, "keys") != keys || countRows(t, db, "acl") != acl {
		t.Fatal("the second run made keys or entries again")
	}
	got, _ = call(t, devClient(t, d2, "bob"), "read_protected_fragment", map[string]any{"documentId": "oru-0001", "fragmentId": "OBX.4"})
	if got["text"] != "OBX|4|NM|4548-4^Hemoglobin A1c^LN||6.9|%|<5.7|H|||F" {
		t.Fatalf("after a restart: %v", got)
	}
}
