package auth

import (
	"strings"
	"testing"
	"time"
)

// TestLoadHTTPConfigConnections reads mcp-http.json's "connections": the
// defaults when it or a member is absent, the operator's numbers when
// given, and a clear refusal for numbers that cannot work.
func TestLoadHTTPConfigConnections(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members map[string]any // nil: no "connections" at all
		want    ConnectionsConfig
	}{
		{"absent", nil, ConnectionsConfig{Max: 512, SignedIn: 128, SignedInPerUser: 16,
			HeaderTimeoutSeconds: 5, AnswerTimeoutSeconds: 60}},
		{"empty", map[string]any{}, ConnectionsConfig{Max: 512, SignedIn: 128, SignedInPerUser: 16,
			HeaderTimeoutSeconds: 5, AnswerTimeoutSeconds: 60}},
		{"all given", map[string]any{"max": 100, "signedIn": 40, "signedInPerUser": 5, "headerTimeoutSeconds": 2,
			"answerTimeoutSeconds": 300},
			ConnectionsConfig{Max: 100, SignedIn: 40, SignedInPerUser: 5, HeaderTimeoutSeconds: 2, AnswerTimeoutSeconds: 300}},
		// A small max takes half of itself as the reserve by default.
		{"small max", map[string]any{"max": 20}, ConnectionsConfig{Max: 20, SignedIn: 10, SignedInPerUser: 10,
			HeaderTimeoutSeconds: 5, AnswerTimeoutSeconds: 60}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadHTTPConfig(configDir(t, func(m map[string]any) {
				if tc.members != nil {
					m["connections"] = tc.members
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			if c.Connections != tc.want {
				t.Errorf("got %+v, want %+v", c.Connections, tc.want)
			}
		})
	}
	c, err := LoadHTTPConfig(configDir(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Connections.HeaderTimeout() != 5*time.Second || c.Connections.AnswerTimeout() != time.Minute {
		t.Errorf("timeouts %s %s", c.Connections.HeaderTimeout(), c.Connections.AnswerTimeout())
	}

	for _, tc := range []struct {
		name    string
		members map[string]any
		want    string
	}{
		{"unknown member", map[string]any{"maxConns": 5}, `connections.maxConns at line 1, column 17: unknown field: remove it or check its spelling`},
		{"negative max", map[string]any{"max": -1}, "connections.max is -1"},
		{"negative answer timeout", map[string]any{"answerTimeoutSeconds": -5}, "connections.answerTimeoutSeconds is -5"},
		{"the body timeout is the per-user limits'", map[string]any{"bodyTimeoutSeconds": 5}, `connections.bodyTimeoutSeconds at line 1, column 17: unknown field`},
		{"reserve as large as max", map[string]any{"max": 10, "signedIn": 10}, "connections.signedIn (10) must be less than connections.max (10)"},
		{"per user over the reserve", map[string]any{"signedIn": 10, "signedInPerUser": 11}, "connections.signedInPerUser (11) is more than connections.signedIn (10)"},
		{"header timeout of days", map[string]any{"headerTimeoutSeconds": 86400}, "connections.headerTimeoutSeconds is 86400; at most 3600"},
		{"not a number", map[string]any{"max": "many"}, "connections.max at line 1, column 23: a JSON string where a whole number is wanted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadHTTPConfig(configDir(t, func(m map[string]any) { m["connections"] = tc.members }))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
