package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
)

// concrete fills a route pattern's path values with harmless ones.
func concrete(path string) string {
	return pathParam.ReplaceAllStringFunc(path, func(string) string { return "999999" })
}

func TestEveryRouteNeedsAToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	paths := []string{"/", "/assets/app.js", "/assets/style.css", "/api/nope"}
	for _, rt := range f.srv.routes {
		paths = append(paths, rt.Method+" "+concrete(rt.Path))
	}
	for _, p := range paths {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "GET", p
		}
		for _, token := range []string{"", "wrong-token"} {
			status, body := f.do(method, path, token, nil)
			if status != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d, want 401", method, path, token, status)
				continue
			}
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Status != 401 || !strings.HasPrefix(e.Error.Message, "unauthorized") {
				t.Errorf("%s %s: 401 body %s is not a JSON error", method, path, body)
			}
		}
	}
}

func TestReadOnlyTokenCannotMutate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	mutations := 0
	for _, rt := range f.srv.routes {
		if rt.Path == "/api/events" {
			continue // a stream that never ends; TestServeStopsWithItsContext reads it
		}
		path := concrete(rt.Path)
		status, body := f.do(rt.Method, path, readOnlySecret, "{}")
		if rt.Mutates {
			mutations++
			if status != http.StatusForbidden {
				t.Errorf("%s %s with the read-only token: %d, want 403; %s", rt.Method, path, status, body)
			}
			continue
		}
		if status == http.StatusForbidden || status == http.StatusUnauthorized {
			t.Errorf("%s %s (read) with the read-only token: %d; %s", rt.Method, path, status, body)
		}
	}
	if strings.Contains(f.auditLog(), `"admin: audit"`) {
		t.Errorf("a refused mutation was audited:\n%s", f.auditLog())
	}
	t.Logf("%d routes, %d of them mutations", len(f.srv.routes), mutations)
}

func TestDashboardLoginSetsACookieAndGuardsMutations(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}

	// Without a token a browser gets the login form, with 401.
	req, _ := http.NewRequest("GET", f.http.URL+"/", nil)
	req.Header.Set("Accept", "text/html")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / without a token: %d %s, want 401 with the login page", res.StatusCode, res.Header.Get("Content-Type"))
	}

	// A wrong token is refused and sets no cookie.
	res, err = c.PostForm(f.http.URL+"/login", url.Values{"token": {"nope"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || len(jar.Cookies(mustURL(f.http.URL))) != 0 {
		t.Fatalf("login with a wrong token: %d, cookies %v", res.StatusCode, jar.Cookies(mustURL(f.http.URL)))
	}

	// The right one logs in: the dashboard and its assets load.
	res, err = c.PostForm(f.http.URL+"/login", url.Values{"token": {adminSecret}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/" {
		t.Fatalf("login: %d at %s, want 200 at /", res.StatusCode, res.Request.URL.Path)
	}
	for _, p := range []string{"/assets/app.js", "/api/config"} {
		res, err := c.Get(f.http.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the cookie: %d", p, res.StatusCode)
		}
	}

	// A mutation by cookie needs the request header that other origins
	// cannot send.
	var mutation *route
	for _, rt := range f.srv.routes {
		if rt.Mutates {
			mutation = rt
			break
		}
	}
	if mutation != nil {
		req, _ := http.NewRequest(mutation.Method, f.http.URL+concrete(mutation.Path), strings.NewReader("{}"))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s by cookie without %s: %d, want 403", mutation.Method, mutation.Path, csrfHeader, res.StatusCode)
		}
	}

	// Logging out drops the cookie.
	res, err = c.Get(f.http.URL + "/logout")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	res, err = c.Get(f.http.URL + "/api/config")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("after logout: %d, want 401", res.StatusCode)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestNewRefusesUnsafeConfigurations(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
		is   error
	}{
		{name: "no token", cfg: Config{}, is: ErrNoToken},
		{name: "insecure on every interface", cfg: Config{InsecureNoAuth: true, Addr: "0.0.0.0:8080"}, is: ErrInsecureAddr},
		{name: "insecure on a public host", cfg: Config{InsecureNoAuth: true, Addr: "example.com:80"}, is: ErrInsecureAddr},
		{name: "empty secret", cfg: Config{Tokens: []Token{{Name: "a", Role: RoleAdmin}}}, want: `token 0 ("a") has an empty secret`},
		{name: "unknown role", cfg: Config{Tokens: []Token{{Name: "a", Secret: "x", Role: "root"}}}, want: `token "a" has role "root"`},
		{name: "same secret twice", cfg: Config{Tokens: []Token{{Name: "a", Secret: "x", Role: RoleAdmin}, {Name: "b", Secret: "x", Role: RoleReadOnly}}}, want: `tokens "a" and "b" have the same secret`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			_, err := New(pool, &cfg)
			switch {
			case err == nil:
				t.Fatal("New accepted the configuration")
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Errorf("error %q does not match %v", err, tc.is)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:8080", "localhost:9"} {
		srv, err := New(pool, &Config{InsecureNoAuth: true, Addr: addr})
		if err != nil {
			t.Errorf("insecure on %s: %v", addr, err)
			continue
		}
		srv.Close()
	}
}

func TestServeStopsWithItsContext(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	srv, err := New(pool, &Config{Addr: "127.0.0.1:0", Tokens: []Token{{Secret: "s", Role: RoleAdmin}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, func(a net.Addr) { addrc <- a.String() }) }()
	base := "http://" + <-addrc
	req, _ := http.NewRequest("GET", base+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer s")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got := res.Header.Get("Content-Type"); got != "text/event-stream" {
		t.Errorf("events: content type %q", got)
	}
	buf := make([]byte, 256)
	n, _ := res.Body.Read(buf)
	if !strings.Contains(string(buf[:n]), "retry:") {
		t.Errorf("events: first bytes %q", buf[:n])
	}
	cancel() // an open event stream must not hold the shutdown
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestCloseEndsTheEventStreamsOfAMountedHandler mounts the server's
// Handler in a server of the caller's own, as an application does: Close
// must end the open event streams, or the caller's Shutdown would wait for
// them.
func TestCloseEndsTheEventStreamsOfAMountedHandler(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	srv, err := New(pool, &Config{Tokens: []Token{{Secret: "s", Role: RoleAdmin}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	req, _ := http.NewRequest("GET", hs.URL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer s")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 256)
	if n, _ := res.Body.Read(buf); !strings.Contains(string(buf[:n]), "retry:") {
		t.Fatalf("events: first bytes %q", buf[:n])
	}
	srv.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, res.Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream ended with %v, want its end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream went on after Close")
	}
}

func TestOpenAPIListsEveryRoute(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	f.call("GET", "/api/openapi.json", nil, http.StatusOK, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	var missing []string
	for _, rt := range f.srv.routes {
		p := pathParam.ReplaceAllString(rt.Path, "{$1}")
		op, ok := doc.Paths[p][strings.ToLower(rt.Method)]
		if !ok {
			missing = append(missing, rt.Method+" "+p)
			continue
		}
		if op["summary"] == "" || op["operationId"] == "" {
			t.Errorf("%s %s: no summary or operationId", rt.Method, p)
		}
	}
	if diff := cmp.Diff([]string(nil), missing); diff != "" {
		t.Errorf("routes missing from the document (-want +got):\n%s", diff)
	}
	// The statuses that the routes' own tests see them answer.
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"post", "/api/runs/{id}/cancel", 409},      // a finished run
		{"post", "/api/runs/{id}/retry", 409},       // a run neither failed nor cancelled
		{"put", "/api/admin/jobs/{id}/status", 409}, // a turn job
		{"post", "/api/admin/jobs/{id}/boost", 409}, // a finished job
		{"post", "/api/admin/dispatch/job", 200},    // an existing job's key
		{"post", "/api/admin/dispatch/run", 200},    // an existing run's key
		{"post", "/api/admin/dispatch/run", 409},    // another workflow's key
		{"post", "/api/admin/scheduled-jobs", 409},  // a taken name
		{"get", "/api/events", 503},                 // a server shutting down
		{"get", "/api/runs", 500},                   // any route, a fault
		{"post", "/api/admin/scheduled-jobs", 500},  // any route, a fault
	} {
		responses, _ := doc.Paths[c.path][c.method]["responses"].(map[string]any)
		if _, ok := responses[strconv.Itoa(c.status)]; !ok {
			t.Errorf("%s %s: the document lists no %d", strings.ToUpper(c.method), c.path, c.status)
		}
	}
	var full struct {
		Components struct {
			Schemas map[string]struct {
				Required []string `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	f.call("GET", "/api/openapi.json", nil, http.StatusOK, &full)
	if req := full.Components.Schemas["ToggleRequest"].Required; !slices.Contains(req, "enabled") {
		t.Errorf("ToggleRequest requires %v, want enabled, which the route refuses to go without", req)
	}
}

// Without a token, the server still refuses what another origin's page
// could send: a mutation without the request header, and any request whose
// Host is not a loopback name (DNS rebinding).
func TestInsecureModeRefusesCrossSiteRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Tokens, c.InsecureNoAuth = nil, true })
	send := func(method, path, host string, header bool) int {
		req, _ := http.NewRequest(method, f.http.URL+path, strings.NewReader(`{}`))
		if host != "" {
			req.Host = host
		}
		if header {
			req.Header.Set(csrfHeader, "1")
		}
		res, err := f.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := send("GET", "/api/config", "", false); got != http.StatusOK {
		t.Errorf("a read on loopback: %d, want 200", got)
	}
	if got := send("POST", "/api/admin/queues/default/pause", "", false); got != http.StatusForbidden {
		t.Errorf("a mutation without %s: %d, want 403", csrfHeader, got)
	}
	if got := send("POST", "/api/admin/queues/nosuchqueue/pause", "", true); got != http.StatusNotFound {
		t.Errorf("a mutation with %s: %d, want it to reach the route (404 for an unknown queue)", csrfHeader, got)
	}
	for _, host := range []string{"evil.example", "evil.example:8080", "10.0.0.1:8080"} {
		if got := send("GET", "/api/config", host, false); got != http.StatusForbidden {
			t.Errorf("Host %s: %d, want 403", host, got)
		}
	}
	if strings.Contains(f.auditLog(), "queue.pause") {
		t.Errorf("a refused mutation was audited:\n%s", f.auditLog())
	}
}

func TestWrongMethodIs405AndUnknownPathIs404(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	status, raw := f.do("DELETE", "/api/runs/019a0000-0000-7000-8000-000000000000/cancel", adminSecret, nil)
	var e errorBody
	if err := json.Unmarshal(raw, &e); err != nil || status != http.StatusMethodNotAllowed || e.Error == nil || !cmp.Equal(e.Error.Allowed, []string{"POST"}) {
		t.Errorf("DELETE on a POST route: %d %s; want 405 allowing POST", status, raw)
	}
	if status, raw := f.do("GET", "/api/no/such/route", adminSecret, nil); status != http.StatusNotFound {
		t.Errorf("an unknown path: %d %s; want 404", status, raw)
	}
}
