package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/internal/fileerr"
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
		want    string // the message after "<path>: "
	}{
		{"member in lower case", replace(`"maxCallers": 8`, `"maxcallers": 8`), strictjson.ErrUnknownField,
			`maxcallers at line 9, column 3: unknown field: member names are case-sensitive: did you mean "maxCallers"?`},
		{"member misspelt", replace(`"maxCallers": 8`, `"maxcaller": 8`), strictjson.ErrUnknownField,
			`maxcaller at line 9, column 3: unknown field: did you mean "maxCallers"? If not, remove it`},
		{"member in upper case", replace(`"maxCallers": 8`, `"MAXCALLERS": 8`), strictjson.ErrUnknownField,
			`MAXCALLERS at line 9, column 3: unknown field: member names are case-sensitive: did you mean "maxCallers"?`},
		{"three spellings of one member", replace(`"maxCallers": 8`, `"maxCallers": 8, "MAXCALLERS": 2, "maxcallers": 3`),
			strictjson.ErrUnknownField, `MAXCALLERS at line 9, column 20: unknown field: member names are case-sensitive: did you mean "maxCallers"?`},
		{"member given twice", replace(`"maxCallers": 8`, `"maxCallers": 8,`+"\n"+`  "maxCallers": 3`), strictjson.ErrDuplicateKey,
			`maxCallers at line 10, column 3: given twice (first at line 9, column 3); keep one`},
		{"nested member given twice", replace(`"port": 8443`, `"port": 8443, "port": 9443`), strictjson.ErrDuplicateKey,
			`listen.port at line 2, column 49: given twice (first at line 2, column 35); keep one`},
		{"nested member in another case", replace(`"caFile"`, `"cafile"`), strictjson.ErrUnknownField,
			`provider.cafile at line 4, column 61: unknown field: member names are case-sensitive: did you mean "caFile"?`},
		{"unknown member in exchange", replace(`"clientId"`, `"clientID": "x", "clientId"`), strictjson.ErrUnknownField,
			`exchange.clientID at line 6, column 16: unknown field: member names are case-sensitive: did you mean "clientId"?`},
		{"unknown member in connections", replace(`"maxCallers": 8`, `"maxCallers": 8, "connections": {"max": 10, "maxPerUser": 2}`),
			strictjson.ErrUnknownField, `connections.maxPerUser at line 9, column 47: unknown field: remove it or check its spelling`},
		{"connections member given twice", replace(`"maxCallers": 8`, `"maxCallers": 8, "connections": {"max": 10, "max": 20}`),
			strictjson.ErrDuplicateKey, `connections.max at line 9, column 47: given twice (first at line 9, column 36); keep one`},
		{"unknown member in tls", replace(`"key": "mcp-tls.key"`, `"key": "mcp-tls.key", "chain": "x"`), strictjson.ErrUnknownField,
			`tls.chain at line 3, column 63: unknown field: remove it or check its spelling`},
		{"wrong type", replace(`"maxCallers": 8`, `"maxCallers": "8"`), strictjson.ErrMalformed,
			`maxCallers at line 9, column 17: a JSON string where a whole number is wanted`},
		{"two objects", base + "{}", strictjson.ErrMalformed,
			"not valid JSON at line 11, column 1: more after the JSON object; the file holds one object"},
		{"cut short", base[:len(base)/2], strictjson.ErrMalformed,
			"not valid JSON at line 5, column 38: the file ends before the JSON object does"},
		{"syntax", replace(`"maxCallers": 8`, `"maxCallers": 8,`), strictjson.ErrMalformed,
			"not valid JSON at line 10, column 1: invalid character '}' looking for beginning of object key string"},
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
			if want := path + ": " + tt.want; err.Error() != want {
				t.Errorf("error\n %s\nwant\n %s", err, want)
			}
		})
	}
}

// TestLoadHTTPConfigEmpty: an empty mcp-http.json is named and said to be
// empty, the same wording as every other operator file.
func TestLoadHTTPConfigEmpty(t *testing.T) {
	for _, text := range []string{"", "\n  \n"} {
		path := configDir(t, nil)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadHTTPConfig(path)
		want := path + " is empty: it should hold the HTTP transport's settings as a JSON object (docs/operating.md shows one)"
		if !errors.Is(err, fileerr.ErrEmpty) || err.Error() != want {
			t.Errorf("LoadHTTPConfig of %q: %v; want %q", text, err, want)
		}
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
