package devidp

import (
	"context"
	"crypto/subtle"
	"html/template"
	"net/http"
	"strings"

	"github.com/zitadel/oidc/v3/pkg/op"
)

// Names of the sign-in form's fields. Login and scripts rely on them.
const (
	formFieldID       = "id"
	formFieldUsername = "username"
	formFieldPassword = "password"
)

// maxFormBytes bounds the sign-in form body.
const maxFormBytes = 16 << 10

// loginHTML is the sign-in page: a plain form a person can use in a browser
// and a script can fill by field name.
const loginHTML = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Sign in - pdmcp development provider</title></head>
<body>
<h1>Sign in</h1>
<p>Development identity provider, for tests and local use only.</p>
<p>Signing in to <strong>{{.ClientID}}</strong> for scope <code>{{.Scopes}}</code>.</p>
{{if .Error}}<p id="error" role="alert">{{.Error}}</p>
{{end}}<form method="post" action="{{.Action}}">
<input type="hidden" name="id" value="{{.ID}}">
<p><label>Username <input type="text" name="username" value="{{.Username}}" autocomplete="username" required autofocus></label></p>
<p><label>Password <input type="password" name="password" autocomplete="current-password" required></label></p>
<p><button type="submit">Sign in</button></p>
</form>
</body>
</html>
`

func parseLoginTemplate() (*template.Template, error) {
	return template.New("login").Parse(loginHTML)
}

type loginView struct {
	Action, ID, ClientID, Scopes, Username, Error string
}

// loginPage shows the sign-in form for a pending sign-in request.
func (p *Provider) loginPage(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get(formFieldID)
	a, err := p.store.pendingAuthRequest(id)
	if err != nil {
		p.loginGone(w)
		return
	}
	p.renderLogin(w, http.StatusOK, loginView{ID: id, ClientID: a.clientID, Scopes: strings.Join(a.scopes, " ")})
}

// loginSubmit checks the credentials. A wrong pair shows the form again with
// an error and issues nothing; a right one completes the sign-in and sends
// the browser to the library's callback, which redirects to the client with
// a code.
func (p *Provider) loginSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "unreadable sign-in form", http.StatusBadRequest)
		return
	}
	id := r.PostForm.Get(formFieldID)
	a, err := p.store.pendingAuthRequest(id)
	if err != nil {
		p.loginGone(w)
		return
	}
	username := r.PostForm.Get(formFieldUsername)
	u, ok := p.checkPassword(username, r.PostForm.Get(formFieldPassword))
	if !ok {
		// What was typed as a username reaches the log only when it names a
		// user: people type their password into the wrong field.
		if _, known := p.users[username]; known {
			p.log.Info("sign-in refused: wrong password", "username", username, "client", a.clientID)
		} else {
			p.log.Info("sign-in refused: no such user", "client", a.clientID)
		}
		p.renderLogin(w, http.StatusOK, loginView{ID: id, ClientID: a.clientID, Scopes: strings.Join(a.scopes, " "),
			Username: username, Error: "Wrong username or password."})
		return
	}
	if err := p.store.completeAuthRequest(id, u.Subject); err != nil {
		p.loginGone(w)
		return
	}
	p.log.Info("signed in", "username", u.Username, "sub", u.Subject, "client", a.clientID)
	callback := p.legacy.AuthCallbackURL()(op.ContextWithIssuer(context.WithoutCancel(r.Context()), p.issuer), id)
	http.Redirect(w, r, callback, http.StatusFound)
}

func (p *Provider) checkPassword(username, password string) (User, bool) {
	u, ok := p.users[username]
	if !ok {
		return User{}, false
	}
	return u, subtle.ConstantTimeCompare([]byte(password), []byte(u.Password)) == 1
}

func (p *Provider) renderLogin(w http.ResponseWriter, status int, v loginView) {
	v.Action = p.issuer + loginPath
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	w.WriteHeader(status)
	if err := p.loginTmpl.Execute(w, v); err != nil {
		p.log.Warn("sign-in page not written", "err", err)
	}
}

func (p *Provider) loginGone(w http.ResponseWriter) {
	http.Error(w, "This sign-in request is unknown, expired or finished. Start again from the application.", http.StatusBadRequest)
}
