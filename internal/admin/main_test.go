package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// Test tokens.
const (
	adminSecret    = "admin-secret-token"
	readOnlySecret = "readonly-secret-token"
)

// fixture is a server on an isolated database, served by httptest.
type fixture struct {
	t      *testing.T
	pool   *pgxpool.Pool
	srv    *Server
	http   *httptest.Server
	audits *lockedWriter
}

// newFixture starts a server with an admin and a read-only token on a fresh
// database. cfg may adjust the configuration first.
func newFixture(t *testing.T, cfg func(*Config)) *fixture {
	t.Helper()
	pool := testutil.DB(t)
	audits := &lockedWriter{w: &bytes.Buffer{}}
	c := &Config{
		Tokens: []Token{
			{Name: "ops", Secret: adminSecret, Role: RoleAdmin},
			{Name: "viewer", Secret: readOnlySecret, Role: RoleReadOnly},
		},
		Logger: slog.New(slog.NewJSONHandler(audits, nil)),
	}
	if cfg != nil {
		cfg(c)
	}
	srv, err := New(pool, c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	return &fixture{t: t, pool: pool, srv: srv, http: hs, audits: audits}
}

// do sends a request with token (none when empty) and body (JSON-encoded
// unless it is a string or []byte) and returns the status and raw body.
func (f *fixture) do(method, path, token string, body any) (int, []byte) {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, f.http.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := f.http.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return res.StatusCode, out
}

// call is do with the admin token, and decodes a JSON response into out
// (when not nil) after checking the status.
func (f *fixture) call(method, path string, body any, want int, out any) {
	f.t.Helper()
	status, raw := f.do(method, path, adminSecret, body)
	if status != want {
		f.t.Fatalf("%s %s: status %d, want %d; body: %s", method, path, status, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			f.t.Fatalf("%s %s: decode %T: %v; body: %s", method, path, out, err, raw)
		}
	}
}

// lockedWriter serialises writes of concurrent log lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// auditLog returns what the server logged so far, audit lines included.
func (f *fixture) auditLog() string {
	f.audits.mu.Lock()
	defer f.audits.mu.Unlock()
	return f.audits.w.(*bytes.Buffer).String()
}

// startEngine starts an engine working defs on the fixture's database,
// with workers turn workers, and stops it when the test ends; cleanups
// run before the stop, last registered first.
func (f *fixture) startEngine(workers int, defs ...workflow.Definition) *workflow.Engine {
	f.t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	eng, err := workflow.NewEngine(f.pool, &workflow.Config{
		Workflows: defs,
		Queue: &queue.Config{
			Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
			Logger: quiet,
		},
		Logger: quiet,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			f.t.Errorf("stopping the engine: %v", err)
		}
	})
	return eng
}
