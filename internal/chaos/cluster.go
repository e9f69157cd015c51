package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/localpg"
	"github.com/braidflow/braid/migrations"
)

// database is the name of the one database the suite works in.
const database = "braid_chaos"

// schema holds the tables the workload writes besides braid's own.
const schema = `
CREATE TABLE chaos_ledger (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      uuid        NOT NULL,
    ref         text        NOT NULL, -- the step's idempotency key: task ID / step
    task_key    text        NOT NULL,
    step        text        NOT NULL,
    attempt     integer     NOT NULL,
    pid         integer     NOT NULL,
    token       text        NOT NULL,
    seen_refs   text[]      NOT NULL DEFAULT '{}',
    seen_tokens text[]      NOT NULL DEFAULT '{}',
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX chaos_ledger_run ON chaos_ledger (run_id);
CREATE TABLE chaos_effects (
    key         text        PRIMARY KEY, -- Task.IdempotencyKey
    run_id      uuid        NOT NULL,
    task_key    text        NOT NULL,
    step        text        NOT NULL,
    refused     integer     NOT NULL DEFAULT 0,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX chaos_effects_run ON chaos_effects (run_id);
CREATE TABLE chaos_released (
    run_id      uuid        PRIMARY KEY
);
`

// cluster is the suite's private PostgreSQL: it restarts it, so it never
// shares a server.
type cluster struct {
	pg  *localpg.Cluster
	dir string
	url string // the chaos database

	version, fsync string
}

// startCluster starts a private cluster with fsync on, creates the chaos
// database and migrates it.
func startCluster(ctx context.Context) (c *cluster, err error) {
	c = &cluster{}
	if c.dir, err = os.MkdirTemp("", "braidchaos"); err != nil {
		return nil, fmt.Errorf("chaos: creating the cluster directory: %w", err)
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.pg, err = localpg.New(localpg.Config{Dir: c.dir}); err != nil {
		return nil, fmt.Errorf("chaos: install PostgreSQL: %w", err)
	}
	if err = c.pg.Start(ctx); err != nil {
		return nil, err
	}
	admin, err := pgxpool.New(ctx, c.pg.URL("postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if err := admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync')`).Scan(&c.version, &c.fsync); err != nil {
		return nil, fmt.Errorf("chaos: reading the server's version: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+database); err != nil {
		return nil, fmt.Errorf("chaos: creating the database: %w", err)
	}
	c.url = c.pg.URL(database)
	pool, err := pgxpool.New(ctx, c.url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return nil, fmt.Errorf("chaos: migrating: %w", err)
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("chaos: creating the workload's tables: %w", err)
	}
	return c, nil
}

// postmasterPID reads the server's process ID from postmaster.pid.
func (c *cluster) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.pg.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// restartImmediate shuts the server down the way pg_ctl stop -m immediate
// does (SIGQUIT to the postmaster: no checkpoint, every session cut, crash
// recovery at the next start), holds it down for down, and starts it again.
func (c *cluster) restartImmediate(ctx context.Context, down time.Duration) error {
	pid, err := c.postmasterPID()
	if err != nil {
		return fmt.Errorf("chaos: finding the postmaster: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("chaos: signalling the postmaster: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.pg.Running() {
		if time.Now().After(deadline) {
			return errors.New("chaos: the postmaster did not exit within 30s of SIGQUIT")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = c.pg.Stop() // forget the exited server
	if err := sleep(ctx, down); err != nil {
		return err
	}
	return c.pg.Start(context.WithoutCancel(ctx))
}

// close stops the cluster and removes its directory.
func (c *cluster) close() {
	if c.pg != nil {
		_ = c.pg.Stop()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// sleep waits for d or for ctx to end.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
