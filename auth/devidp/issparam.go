package devidp

import (
	"net/http"
	"net/url"
	"strings"
)

// withIssParameter adds the RFC 9207 iss parameter to every authorization
// response: every redirect the provider sends away from itself, which, with
// the host client's loopback redirect rule, is a redirect to a client's
// redirect URI carrying a code or an error. A client that checks iss (the
// metadata says it may: authorization_response_iss_parameter_supported)
// knows the answer came from this issuer and not from another provider it
// also talks to (mix-up attacks). The library has no hook for it, so it is
// added to the Location header on the way out.
func withIssParameter(issuer string, next http.Handler) http.Handler {
	own, _ := url.Parse(issuer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&issWriter{ResponseWriter: w, issuer: issuer, own: own}, r)
	})
}

type issWriter struct {
	http.ResponseWriter
	issuer string
	own    *url.URL
	done   bool
}

func (w *issWriter) WriteHeader(code int) {
	if !w.done && code >= 300 && code < 400 {
		w.done = true
		if loc := w.Header().Get("Location"); loc != "" {
			if u, err := url.Parse(loc); err == nil && w.leavesProvider(u) {
				w.Header().Set("Location", withIss(u, w.issuer))
			}
		}
	}
	w.done = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *issWriter) Write(b []byte) (int, error) {
	w.done = true
	return w.ResponseWriter.Write(b)
}

// leavesProvider reports whether u points outside the issuer's own URLs.
func (w *issWriter) leavesProvider(u *url.URL) bool {
	if !u.IsAbs() || w.own == nil {
		return false // a relative Location stays on this host
	}
	return !(strings.EqualFold(u.Scheme, w.own.Scheme) && strings.EqualFold(u.Host, w.own.Host) &&
		(w.own.Path == "" || u.Path == w.own.Path || strings.HasPrefix(u.Path, w.own.Path+"/")))
}

// withIss adds iss where the response's parameters are: in the fragment
// when the library put them there, else in the query.
func withIss(u *url.URL, issuer string) string {
	if u.Fragment != "" {
		if f, err := url.ParseQuery(u.Fragment); err == nil && (f.Has("code") || f.Has("error")) {
			f.Set("iss", issuer)
			u.Fragment = f.Encode()
			return u.String()
		}
	}
	q := u.Query()
	q.Set("iss", issuer)
	u.RawQuery = q.Encode()
	return u.String()
}
