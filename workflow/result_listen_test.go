package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Result misses no run that finishes while its waiter's connection is
// still being opened: with a poll longer than the test's deadline, only a
// notification, or the wake-up of every waiter once the connection
// listens, can end each wait. The run finishes a few milliseconds after
// Result is called, when the connection of a process that waited on no run
// before is most likely not yet listening.
func TestResultMissesNoFinishWhileItStartsToListen(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	wf := workflow.Define("listen_race", func(t *workflow.Task, _ struct{}) (int, error) {
		entered <- struct{}{}
		select {
		case <-release:
			return 1, nil
		case <-t.Context().Done():
			return 0, t.Context().Err()
		}
	})
	cfg := testConfig(wf)
	cfg.ResultPollInterval = time.Hour
	eng := startEngine(t, pool, cfg)
	for i := range 20 {
		ctx := ctxTimeout(t, 30*time.Second)
		run, err := wf.Start(ctx, eng, struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatalf("wait %d: the run did not start", i)
		}
		waitFor(t, "the listener of the earlier wait to close", 20*time.Second, func() bool { return !listening(t, pool) })
		got := make(chan error, 1)
		go func() {
			_, err := run.Result(ctx)
			got <- err
		}()
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		release <- struct{}{}
		if err := <-got; err != nil {
			t.Fatalf("wait %d: Result = %v; want the run's output, notified", i, err)
		}
	}
}

// TestResultRidesOutALostConnection: a connection that the server ends
// while Result reads the run (a restart, a failover, an operator's
// pg_terminate_backend) is not the run's failure. Result reads again, on
// another connection, and returns the run's output once it finishes. The
// read is held on a lock of braid_runs so that the test ends its backend
// mid-statement.
func TestResultRidesOutALostConnection(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	pool := testutil.DB(t)
	release := make(chan struct{})
	wf := workflow.Define("result_reconnects", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			select {
			case <-release:
				return 7, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	})
	cfg := testConfig(wf)
	cfg.ResultPollInterval = 50 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}

	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE braid_runs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	got := make(chan result, 1)
	go func() {
		n, err := run.Result(ctx)
		got <- result{n, err}
	}()
	var pid int32
	waitFor(t, "Result's read to wait for the lock", 20*time.Second, func() bool {
		err := pool.QueryRow(ctx, `
			SELECT pid FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM braid_runs WHERE id = $1%'`).Scan(&pid)
		return err == nil
	})
	var ended bool
	if err := pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ended); err != nil || !ended {
		t.Fatalf("ending Result's backend: %v, %v", ended, err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		t.Fatalf("Result returned %d, %v while the run was still running; want it to wait", r.n, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case r := <-got:
		if r.err != nil || r.n != 7 {
			t.Fatalf("Result returned %d, %v; want 7", r.n, r.err)
		}
	case <-ctx.Done():
		t.Fatal("Result did not return once the run completed")
	}
}
