package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/localpg"
	"github.com/braidflow/braid/migrations"
)

// server is the PostgreSQL server the benchmark measures on: a private
// cluster, or the server of Config.DatabaseURL. Every side of every
// scenario gets a scratch database cloned from one migrated template.
type server struct {
	admin    *pgx.ConnConfig // a connection to a database that is not a scratch one
	maxConns int
	cluster  *localpg.Cluster
	dir      string
	prefix   string
	template string
	next     int
	live     map[string]bool          // scratch databases not yet dropped
	pools    map[string]*pgxpool.Pool // pools on them not yet closed

	kind    string
	version string
	fsync   string
}

// openServer starts a private cluster (url empty) or connects to url's
// server, and migrates a template database to clone.
func openServer(ctx context.Context, url string, maxConns int, statements bool) (s *server, err error) {
	s = &server{maxConns: maxConns, live: map[string]bool{}, pools: map[string]*pgxpool.Pool{}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	s.prefix = "braid_bench_" + hex.EncodeToString(suffix[:])

	if url == "" {
		s.kind = "private"
		if s.dir, err = os.MkdirTemp("", "braidbench"); err != nil {
			return nil, fmt.Errorf("bench: creating the cluster directory: %w", err)
		}
		lc := localpg.Config{Dir: s.dir}
		if statements {
			lc.Settings = map[string]string{"shared_preload_libraries": "pg_stat_statements"}
		}
		if s.cluster, err = localpg.New(lc); err != nil {
			return nil, fmt.Errorf("bench: set DATABASE_URL or install PostgreSQL: %w", err)
		}
		if err = s.cluster.Start(ctx); err != nil {
			return nil, err
		}
		url = s.cluster.URL("postgres")
	} else {
		s.kind = "url"
	}
	if s.admin, err = pgx.ParseConfig(url); err != nil {
		return nil, fmt.Errorf("bench: invalid database URL: %w", err)
	}
	s.admin.ConnectTimeout = 10 * time.Second

	conn, err := pgx.ConnectConfig(ctx, s.admin)
	if err != nil {
		return nil, fmt.Errorf("bench: connecting to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync')`).Scan(&s.version, &s.fsync); err != nil {
		return nil, fmt.Errorf("bench: reading the server's version: %w", err)
	}

	// Migrate the template.
	s.template = s.prefix + "_template"
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+s.template); err != nil {
		return nil, fmt.Errorf("bench: creating a scratch database (the role needs CREATEDB; the benchmark never writes to the database in the URL): %w", err)
	}
	s.live[s.template] = true
	pool, err := s.pool(ctx, s.template, s.maxConns)
	if err != nil {
		return nil, err
	}
	err = migrations.Up(ctx, pool)
	if err == nil && statements {
		if _, err = pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			err = fmt.Errorf("bench: statement statistics need pg_stat_statements preloaded: %w", err)
		}
	}
	pool.Close()
	if err != nil {
		return nil, fmt.Errorf("bench: migrating the template database: %w", err)
	}
	return s, nil
}

// fresh returns a pool on a new scratch database, a clone of the migrated
// template, and a function that closes the pool and drops the database.
func (s *server) fresh(ctx context.Context, label string) (*pgxpool.Pool, func(), error) {
	return s.freshSized(ctx, label, s.maxConns)
}

// freshSized is fresh with a pool of maxConns connections.
func (s *server) freshSized(ctx context.Context, label string, maxConns int) (*pgxpool.Pool, func(), error) {
	s.next++
	name := fmt.Sprintf("%s_%d_%s", s.prefix, s.next, label)
	if err := s.exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+s.template); err != nil {
		return nil, nil, fmt.Errorf("bench: creating database %s: %w", name, err)
	}
	s.live[name] = true
	pool, err := s.pool(ctx, name, maxConns)
	if err != nil {
		s.drop(name)
		return nil, nil, err
	}
	s.pools[name] = pool
	return pool, func() {
		pool.Close()
		delete(s.pools, name)
		s.drop(name)
	}, nil
}

// pool opens a pool on database name.
func (s *server) pool(ctx context.Context, name string, maxConns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.ConnConfig = s.admin.Copy()
	pc.ConnConfig.Database = name
	pc.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("bench: opening a pool on %s: %w", name, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("bench: connecting to %s: %w", name, err)
	}
	return pool, nil
}

// exec runs one statement on the admin connection.
func (s *server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.ConnectConfig(ctx, s.admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// commits reads xact_commit of database name from pg_stat_database, on a
// connection to the admin database, so that the reading itself is not
// counted. Each reading is its own transaction, which sees the counters
// the server holds at that moment, not a cached snapshot.
func (s *server) commits(ctx context.Context, name string) (int64, error) {
	conn, err := pgx.ConnectConfig(ctx, s.admin)
	if err != nil {
		return 0, fmt.Errorf("bench: reading the commits of %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	if err := conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, name).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench: reading the commits of %s: %w", name, err)
	}
	return n, nil
}

// goneTimeout bounds how long waitGone waits for the backends of a closed
// pool to exit.
const goneTimeout = 30 * time.Second

// waitGone waits until no backend is connected to database name. A backend
// publishes its statistics as it exits, before it leaves
// pg_stat_activity.
func (s *server) waitGone(ctx context.Context, name string) error {
	conn, err := pgx.ConnectConfig(ctx, s.admin)
	if err != nil {
		return fmt.Errorf("bench: waiting for the connections to %s to close: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(goneTimeout)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, name).Scan(&n); err != nil {
			return fmt.Errorf("bench: waiting for the connections to %s to close: %w", name, err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d connections to %s still open %s after its pool closed", n, name, goneTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// drop drops a scratch database.
func (s *server) drop(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err == nil {
		delete(s.live, name)
	}
}

// close closes every pool still open, drops every scratch database and
// stops the private cluster, removing its directory.
func (s *server) close() {
	for name, pool := range s.pools {
		pool.Close()
		delete(s.pools, name)
	}
	if s.admin != nil && (s.cluster == nil || s.cluster.Running()) {
		for name := range s.live {
			s.drop(name)
		}
	}
	if s.cluster != nil {
		_ = s.cluster.Stop()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
