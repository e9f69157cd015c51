package admin

import (
	"context"
	"crypto/subtle"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// The dashboard keeps the token in this cookie once a person has logged in,
// so that pages, assets and the event stream are authenticated like API
// calls. It is HttpOnly and SameSite=Strict.
const cookieName = "braid_token"

// csrfHeader must accompany every mutation authenticated by the cookie. A
// page of another origin cannot set it without a CORS preflight, which the
// server never grants.
const csrfHeader = "X-Braid-Request"

type ctxKey int

const (
	roleKey ctxKey = iota
	nameKey
)

// roleOf is the role of the request's token.
func roleOf(ctx context.Context) Role {
	r, _ := ctx.Value(roleKey).(Role)
	return r
}

// tokenName is the name of the request's token, for the audit log.
func tokenName(ctx context.Context) string {
	n, _ := ctx.Value(nameKey).(string)
	return n
}

// lookup returns the token whose secret is secret, comparing in constant
// time against every configured token.
func (s *Server) lookup(secret string) (Token, bool) {
	var found Token
	ok := false
	for _, t := range s.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(t.Secret)) == 1 {
			found, ok = t, true
		}
	}
	return found, ok
}

// authenticate admits a request that carries a known token, as a bearer
// token or the dashboard's cookie, and rejects every other with 401: as
// JSON under /api/, as the login page elsewhere. POST /login and /logout
// are the only routes served without a token.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		switch {
		case r.URL.Path == "/login" && r.Method == http.MethodPost:
			s.login(w, r)
			return
		case r.URL.Path == "/logout":
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if s.cfg.InsecureNoAuth {
			// Without a token, a page of another origin could send a
			// simple POST to the loopback address, or reach it through
			// DNS rebinding: a mutation must carry the request header such
			// a page cannot send, and the Host must be a loopback name.
			if !IsLoopback(r.Host) {
				writeError(w, r, errorf(http.StatusForbidden, "forbidden: without authentication the server answers only requests addressed to a loopback host, not %q", r.Host))
				return
			}
			if !safeMethod(r.Method) && r.Header.Get(csrfHeader) == "" {
				writeError(w, r, errorf(http.StatusForbidden, "forbidden: without authentication a mutation must carry the %s header", csrfHeader))
				return
			}
			ctx := context.WithValue(r.Context(), roleKey, RoleAdmin)
			ctx = context.WithValue(ctx, nameKey, "anonymous")
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		secret, byCookie := bearer(r), false
		if secret == "" {
			if c, err := r.Cookie(cookieName); err == nil {
				secret, byCookie = c.Value, true
			}
		}
		tok, ok := s.lookup(secret)
		if secret == "" || !ok {
			s.unauthorized(w, r, secret != "")
			return
		}
		if byCookie && !safeMethod(r.Method) && r.Header.Get(csrfHeader) == "" {
			writeError(w, r, errorf(http.StatusForbidden, "forbidden: a mutation from the dashboard must carry the %s header", csrfHeader))
			return
		}
		ctx := context.WithValue(r.Context(), roleKey, tok.Role)
		ctx = context.WithValue(ctx, nameKey, tok.Name)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// safeMethod reports whether method changes nothing.
func safeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, wrong bool) {
	msg := "unauthorized: send an Authorization: Bearer token"
	if wrong {
		msg = "unauthorized: the token is not valid"
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="braid"`)
	if strings.HasPrefix(r.URL.Path, "/api/") || !strings.Contains(r.Header.Get("Accept"), "text/html") {
		writeError(w, r, errorf(http.StatusUnauthorized, "%s", msg))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	_ = loginPage.Execute(w, struct{ Wrong bool }{wrong})
}

// login checks the token of the login form, sets the cookie, and sends the
// browser to the dashboard.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	secret := strings.TrimSpace(r.PostFormValue("token"))
	if _, ok := s.lookup(secret); !ok || secret == "" {
		s.log.Warn("admin: login refused", slog.String("remote", r.RemoteAddr))
		r.Header.Set("Accept", "text/html")
		s.unauthorized(w, r, true)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: secret, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, Expires: time.Now().Add(12 * time.Hour),
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// audit writes one line for a mutation: who (the token's name), what, and
// which IDs.
func (s *Server) audit(r *http.Request, action string, ids ...any) {
	s.log.Info("admin: audit",
		slog.String("who", tokenName(r.Context())),
		slog.String("action", action),
		slog.Any("ids", ids),
		slog.String("remote", r.RemoteAddr),
	)
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>braid · log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.4 system-ui,sans-serif;background:#f5f6f8;color:#1d2330;display:flex;align-items:center;justify-content:center;height:100vh;margin:0}
form{background:#fff;padding:2rem;border-radius:8px;box-shadow:0 1px 4px #0002;min-width:20rem}
h1{font-size:1.3rem;margin:0 0 1rem}input{width:100%;box-sizing:border-box;padding:.5rem;margin:.5rem 0 1rem;font:inherit}
button{padding:.5rem 1rem;font:inherit;background:#2d5be3;color:#fff;border:0;border-radius:4px;cursor:pointer}
.err{color:#b42318;margin:0 0 .5rem}
</style></head><body>
<form method="post" action="/login" id="login">
<h1>braid</h1>
{{if .Wrong}}<p class="err" id="login-error">That token is not valid.</p>{{end}}
<label for="token">Admin or read-only token</label>
<input id="token" name="token" type="password" autocomplete="current-password" autofocus required>
<button type="submit" id="login-submit">Log in</button>
</form></body></html>
`))
