package serve

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// ownAddrs is the set of host:port pairs that name this server, taken from
// the resource URL hosts are given: its own host and port, and, when that
// host is a loopback name, the same port under 127.0.0.1, localhost and
// [::1] (only this server can hold that port on this machine, whichever
// loopback name a client typed).
//
// It answers the two DNS-rebinding questions of the MCP transport rules:
// a request whose Host is not one of these was sent to another name that
// resolves here; a request whose Origin is not one of these (either
// scheme) comes from a page of another site. Both are refused 403, before
// the token is looked at, so a page learns nothing from a 401 either.
type ownAddrs map[string]bool

func newOwnAddrs(resource string) ownAddrs {
	addrs := ownAddrs{}
	u, err := url.Parse(resource)
	if err != nil || u.Hostname() == "" {
		return addrs // names nothing: every Host is refused
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	host := strings.ToLower(u.Hostname())
	addrs[net.JoinHostPort(host, port)] = true
	if isLoopbackName(host) {
		for _, h := range [...]string{"127.0.0.1", "localhost", "::1"} {
			addrs[net.JoinHostPort(h, port)] = true
		}
	}
	return addrs
}

func isLoopbackName(h string) bool {
	switch h {
	case "127.0.0.1", "localhost", "::1":
		return true
	}
	return false
}

func defaultPort(scheme string) string {
	switch strings.ToLower(scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// hostOK reports whether a request's Host header names this server. The
// request came over TLS, so a Host without a port means 443.
func (a ownAddrs) hostOK(host string) bool { return a.hostOKOn(host, "443") }

// hostOKOn is hostOK for a listener whose scheme's default port is
// defPort (the ops listener serves plain HTTP).
func (a ownAddrs) hostOKOn(host, defPort string) bool {
	if host == "" {
		return false
	}
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		// No port (or a malformed value, which matches nothing below).
		h, port = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), defPort
	}
	return a[net.JoinHostPort(strings.ToLower(h), port)]
}

// originOK reports whether an Origin header names this server, under either
// scheme. "null" and anything that is not scheme://host[:port] is refused.
func (a ownAddrs) originOK(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	return a[net.JoinHostPort(strings.ToLower(u.Hostname()), port)]
}

// check refuses, with 403, a request whose Host or Origin does not name
// this server; it reports whether the request may go on.
func (a ownAddrs) check(w http.ResponseWriter, r *http.Request) bool {
	if !a.hostOK(r.Host) {
		http.Error(w, "Forbidden: Host does not name this server", http.StatusForbidden)
		return false
	}
	if o := r.Header.Values("Origin"); len(o) > 1 || (len(o) == 1 && !a.originOK(o[0])) {
		http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
		return false
	}
	return true
}
