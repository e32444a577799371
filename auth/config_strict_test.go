package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/strictjson"
)

// TestLoadHTTPConfigStrict: mcp-http.json is decoded as strictly as
// config.json and grant.json. encoding/json alone took "maxcallers" as
// maxCallers and kept the last of a name given twice.
func TestLoadHTTPConfigStrict(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "mcp-http.json"))
	if err != nil {
		t.Fatal(err)
	}
	base := string(raw)
	// replace makes the file's text with old replaced by new once.
	replace := func(old, new string) string {
		t.Helper()
		if !strings.Contains(base, old) {
			t.Fatalf("testdata/mcp-http.json has no %q", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	tests := []struct {
		name    string
		text    string
		wantErr error
		want    []string // each in the error
	}{
		{"member in lower case", replace(`"maxCallers": 8`, `"maxcallers": 8`), strictjson.ErrUnknownField,
			[]string{`unknown field "maxcallers" at line 9, column 3 (in the top level)`, `did you mean "maxCallers"?`}},
		{"member in upper case", replace(`"maxCallers": 8`, `"MAXCALLERS": 8`), strictjson.ErrUnknownField,
			[]string{`"MAXCALLERS"`, `did you mean "maxCallers"?`}},
		{"three spellings of one member", replace(`"maxCallers": 8`, `"maxCallers": 8, "MAXCALLERS": 2, "maxcallers": 3`),
			strictjson.ErrUnknownField, []string{`"MAXCALLERS" at line 9, column 20`}},
		{"member given twice", replace(`"maxCallers": 8`, `"maxCallers": 8,`+"\n"+`  "maxCallers": 3`), strictjson.ErrDuplicateKey,
			[]string{`duplicate field "maxCallers" at line 10, column 3 (maxCallers), first given at line 9, column 3`}},
		{"nested member given twice", replace(`"port": 8443`, `"port": 8443, "port": 9443`), strictjson.ErrDuplicateKey,
			[]string{`"port" at line 2, column 49 (listen.port), first given at line 2, column 35`}},
		{"nested member in another case", replace(`"caFile"`, `"cafile"`), strictjson.ErrUnknownField,
			[]string{`"cafile" at line 4, column 61 (in provider)`, `did you mean "caFile"?`}},
		{"unknown member in exchange", replace(`"clientId"`, `"clientID": "x", "clientId"`), strictjson.ErrUnknownField,
			[]string{`"clientID"`, `(in exchange)`, `did you mean "clientId"?`}},
		{"unknown member in connections", replace(`"maxCallers": 8`, `"maxCallers": 8, "connections": {"max": 10, "maxPerUser": 2}`),
			strictjson.ErrUnknownField, []string{`"maxPerUser"`, `(in connections)`}},
		{"connections member given twice", replace(`"maxCallers": 8`, `"maxCallers": 8, "connections": {"max": 10, "max": 20}`),
			strictjson.ErrDuplicateKey, []string{`(connections.max)`}},
		{"unknown member in tls", replace(`"key": "mcp-tls.key"`, `"key": "mcp-tls.key", "chain": "x"`), strictjson.ErrUnknownField,
			[]string{`"chain"`, `(in tls)`}},
		{"wrong type", replace(`"maxCallers": 8`, `"maxCallers": "8"`), strictjson.ErrMalformed,
			[]string{`maxCallers at line 9 is a JSON string where a int is wanted`}},
		{"two objects", base + "{}", strictjson.ErrMalformed, []string{"data after the JSON object at line 11, column 1"}},
		{"cut short", base[:len(base)/2], strictjson.ErrMalformed, []string{"ends inside the JSON object"}},
		{"empty", "\n", strictjson.ErrMalformed, []string{"the file is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := configDir(t, nil)
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadHTTPConfig(path)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("LoadHTTPConfig: %v; want %v", err, tt.wantErr)
			}
			for _, w := range append(tt.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestExampleHTTPConfigLoads: the example the docs point to stays loadable
// under the strict decoding (its files are stood in by configDir's).
func TestExampleHTTPConfigLoads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "examples", "mcp-http.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c HTTPConfig
	if err := strictjson.Decode(raw, &c); err != nil {
		t.Fatalf("deploy/examples/mcp-http.json: %v", err)
	}
}
