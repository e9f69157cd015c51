package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// hookedPool opens a pool whose connections are finished by BeforeConnect:
// its configuration alone names a database that does not exist, as a pool
// whose password is a token set by the hook has none of its own.
func hookedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testutil.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	database := cfg.ConnConfig.Database
	cfg.ConnConfig.Database = "no_such_db"
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Database = database
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The delay processor and the waiters of Result listen on connections made
// as the pool makes its own, hooks included: a delay fires, and Result
// returns, on a pool that can connect only through its BeforeConnect.
func TestDelaysFireOnAPoolFinishedByItsConnectHooks(t *testing.T) {
	t.Parallel()
	pool := hookedPool(t)
	nap := workflow.Define("hooked_nap", func(t *workflow.Task, _ struct{}) (string, error) {
		if err := t.Delay("nap", 100*time.Millisecond); err != nil {
			return "", err
		}
		return "woke", nil
	})
	eng := startEngine(t, pool, testConfig(nap))
	run, err := nap.Start(ctxTimeout(t, 10*time.Second), eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := run.Result(ctxTimeout(t, 30*time.Second)); err != nil || got != "woke" {
		t.Fatalf("run whose delay was due after 100ms: %q, %v; want it woken", got, err)
	}
}
