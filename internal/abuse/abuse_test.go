package abuse

import (
	"context"
	"strings"
	"testing"
)

// TestStartStaysBounded: only loopback IP addresses are attacked, and only
// up to MaxCount connections; nothing is dialled for a refused Config.
func TestStartStaysBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"a name, not an IP", Config{URL: "https://localhost:8443/mcp", Count: 1}, "only a loopback IP address"},
		{"another machine", Config{URL: "https://192.0.2.1:8443/mcp", Count: 1}, "only a loopback IP address"},
		{"no port", Config{URL: "https://127.0.0.1/mcp", Count: 1}, "only a loopback IP address"},
		{"plain http", Config{URL: "http://127.0.0.1:8443/mcp", Count: 1}, "want https://"},
		{"no connections", Config{URL: "https://127.0.0.1:8443/mcp", Count: 0}, "count 0"},
		{"too many", Config{URL: "https://127.0.0.1:8443/mcp", Count: MaxCount + 1}, "count 4097"},
		{"unknown kind", Config{URL: "https://127.0.0.1:8443/mcp", Count: 1, Kind: Kind(9)}, "unknown kind Kind(9)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Start(context.Background(), tc.cfg)
			if err == nil {
				a.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseKind(t *testing.T) {
	for _, k := range []Kind{StalledBody, StalledHeaders, StalledHandshake} {
		if got, err := ParseKind(k.String()); err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, got, err)
		}
	}
	if _, err := ParseKind("slowloris"); err == nil || !strings.Contains(err.Error(), `no kind "slowloris"`) {
		t.Errorf("ParseKind(slowloris): %v", err)
	}
}
