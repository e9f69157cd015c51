package testdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/localpg"
	"github.com/braidflow/braid/migrations"
)

// Server is a PostgreSQL server of one test's own, migrated, which the test
// may stop and start again to see what a restart of the database does to
// the processes on it. Tests that need no restart use DB or URL: a
// database on the shared server is much cheaper.
type Server struct {
	// URL is the connection string of the server's migrated database.
	URL string
	c   *localpg.Cluster
}

// Private starts a server for the test alone, with fsync off, and migrates
// its database. The server is removed when the test ends. It needs the
// PostgreSQL server binaries on this machine, whatever TEST_DATABASE_URL
// says.
func Private(tb testing.TB) *Server {
	tb.Helper()
	dir, err := os.MkdirTemp("", "braidpg")
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	c, err := localpg.New(localpg.Config{Dir: dir, DisableFsync: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		tb.Fatalf("testdb: a private server needs PostgreSQL installed: %v", err)
	}
	tb.Cleanup(func() {
		_ = c.Remove()
		_ = os.RemoveAll(dir)
	})
	s := &Server{URL: c.URL("postgres"), c: c}
	s.Start(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, s.URL)
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		tb.Fatalf("testdb: migrating the private server: %v", err)
	}
	return s
}

// Stop shuts the server down (fast shutdown: open sessions end) and waits
// for it to exit.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	if err := s.c.Stop(); err != nil {
		tb.Fatalf("testdb: stopping the private server: %v", err)
	}
}

// Start starts the server again (or for the first time) and returns once it
// accepts connections.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.c.Start(ctx); err != nil {
		tb.Fatalf("testdb: starting the private server: %v\n%s", err, s.c.Logs())
	}
}
