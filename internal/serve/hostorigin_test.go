package serve

import "testing"

func TestOwnAddrs(t *testing.T) {
	tests := []struct {
		resource string
		host     map[string]bool
		origin   map[string]bool
	}{
		{"https://127.0.0.1:8443/mcp",
			map[string]bool{"127.0.0.1:8443": true, "localhost:8443": true, "[::1]:8443": true, "LocalHost:8443": true,
				"127.0.0.1:8444": false, "localhost:80": false, "127.0.0.1": false, "evil.example:8443": false,
				"evil.example": false, "": false, "127.0.0.1:8443.evil.example": false, "[::1]": false},
			map[string]bool{"http://127.0.0.1:8443": true, "https://127.0.0.1:8443": true, "http://localhost:8443": true,
				"https://[::1]:8443": true, "http://LOCALHOST:8443/": true,
				"https://127.0.0.1": false, "http://127.0.0.1:8444": false, "http://evil.example:8443": false, "null": false,
				"file://": false, "ftp://127.0.0.1:8443": false, "http://127.0.0.1:8443/page": false,
				"http://user@127.0.0.1:8443": false, "127.0.0.1:8443": false, "http://127.0.0.2:8443": false}},
		{"https://localhost:9000/mcp",
			map[string]bool{"127.0.0.1:9000": true, "localhost:9000": true, "[::1]:9000": true, "localhost:9001": false},
			map[string]bool{"http://127.0.0.1:9000": true, "https://localhost:9000": true, "https://localhost": false}},
		{"https://mcp.example.org/mcp",
			map[string]bool{"mcp.example.org": true, "mcp.example.org:443": true, "MCP.example.org": true,
				"localhost:443": false, "127.0.0.1:443": false, "mcp.example.org:8443": false, "example.org": false},
			map[string]bool{"https://mcp.example.org": true, "http://mcp.example.org:443": true,
				"http://mcp.example.org": false, "https://localhost": false}},
	}
	for _, tc := range tests {
		a := newOwnAddrs(tc.resource)
		for h, want := range tc.host {
			if got := a.hostOK(h); got != want {
				t.Errorf("%s: Host %q allowed %v, want %v", tc.resource, h, got, want)
			}
		}
		for o, want := range tc.origin {
			if got := a.originOK(o); got != want {
				t.Errorf("%s: Origin %q allowed %v, want %v", tc.resource, o, got, want)
			}
		}
	}
}
