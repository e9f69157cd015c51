package admin

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

// The dashboard is plain HTML, CSS and JavaScript embedded in the binary:
// no build step, no external request. web/app.js holds the shell (router,
// API client, live updates); each page has its own file.
//
//go:embed web
var webFS embed.FS

// ClientConfig is what the dashboard learns about the server at start.
type ClientConfig struct {
	// Role is the role of the token in use.
	Role Role `json:"role"`
	// Who is the token's name.
	Who string `json:"who"`
	// JaegerURL is the base URL of the Jaeger UI, or "".
	JaegerURL string `json:"jaeger_url,omitempty"`
	// Alerts are the overview's thresholds.
	Alerts AlertView `json:"alerts"`
}

// AlertView is AlertThresholds as JSON.
type AlertView struct {
	QueueDepth         int     `json:"queue_depth"`
	FailedRate         float64 `json:"failed_rate"`
	LongRunningSeconds float64 `json:"long_running_seconds"`
}

func (s *Server) routeDashboard() {
	sub, err := fs.Sub(webFS, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	assets := http.FileServerFS(sub)
	s.add(&route{
		Method: "GET", Path: "/api/config", Tag: "meta",
		Summary:  "The dashboard's settings and the role of the token in use",
		Response: ClientConfig{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			writeJSON(w, http.StatusOK, ClientConfig{
				Role: roleOf(r.Context()), Who: tokenName(r.Context()), JaegerURL: s.cfg.JaegerURL,
				Alerts: AlertView{
					QueueDepth: s.cfg.Alerts.QueueDepth, FailedRate: s.cfg.Alerts.FailedRate,
					LongRunningSeconds: s.cfg.Alerts.LongRunning.Seconds(),
				},
			})
			return nil
		},
	})
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		// The path may be a route's under another method: that is 405,
		// with the methods it takes.
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := s.mux.Handler(probe); pattern != "/api/" && pattern != "" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			e := errorf(http.StatusMethodNotAllowed, "%s %s: this route takes %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))
			e.body.Allowed = allowed
			writeError(w, r, e)
			return
		}
		writeError(w, r, errorf(http.StatusNotFound, "no route %s %s; see /api/openapi.json", r.Method, r.URL.Path))
	})
	s.mux.HandleFunc("GET /assets/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.StripPrefix("/assets/", assets).ServeHTTP(w, r)
	})
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		b, err := webFS.ReadFile("web/index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		http.ServeContent(w, r, "index.html", time.Time{}, strings.NewReader(string(b)))
	})
}
