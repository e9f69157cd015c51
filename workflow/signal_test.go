package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// signalCollector waits for n signals named "item", one wait each, with
// a short step between waits, and returns their payloads in the order it
// took them.
var signalCollector = workflow.Define("signal_collector", func(t *workflow.Task, n int) ([]int, error) {
	var got []int
	for i := range n {
		v, ok, err := workflow.WaitSignal[int](t, "item", 0)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("wait %d timed out without a timeout", i)
		}
		got = append(got, v)
		// A turn that runs a little while: some signals arrive while it
		// runs, some while the task waits, some before the wait.
		if _, err := workflow.Step(t, "between", func(context.Context) (int, error) {
			time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			return i, nil
		}); err != nil {
			return nil, err
		}
	}
	return got, nil
})

// TestSignalsArriveInOrderOncePerWait: 1,000 signals to 100 runs, each
// run's ten sent in order at random moments: before its first wait,
// while a turn runs, while the task waits. Every run takes its ten in the
// order sent, one per wait, and the mailbox shows each delivered once.
func TestSignalsArriveInOrderOncePerWait(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalCollector))
	ctx := ctxTimeout(t, 120*time.Second)
	const runs, per = 100, 10
	want := make([]int, per)
	for i := range want {
		want[i] = i
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for r := range runs {
		wg.Go(func() {
			run, err := signalCollector.Start(ctx, eng, per, nil)
			if err != nil {
				errs <- err
				return
			}
			for i := range per {
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				if err := eng.Signal(ctx, run.ID, "item", i, nil); err != nil {
					errs <- fmt.Errorf("run %d signal %d: %w", r, i, err)
					return
				}
			}
			got, err := run.Result(ctx)
			if err != nil {
				errs <- fmt.Errorf("run %d: %w", r, err)
				return
			}
			if diff := cmp.Diff(want, got); diff != "" {
				errs <- fmt.Errorf("run %d took its signals out of order or not once each (-want +got):\n%s", r, diff)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_signals WHERE delivered_at IS NOT NULL`); n != runs*per {
		t.Errorf("%d signals delivered, want %d", n, runs*per)
	}
	if n := count(t, pool, `SELECT count(DISTINCT (task_id, step)) FROM braid_signals`); n != runs*per {
		t.Errorf("%d distinct waits took a signal, want %d: one each", n, runs*per)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status <> 'completed'`); n != 0 {
		t.Errorf("%d signal waits not completed", n)
	}
}

// signalOrTimeout waits for "go" with a timeout and says which came.
var signalOrTimeout = workflow.Define("signal_or_timeout", func(t *workflow.Task, timeout time.Duration) (string, error) {
	v, ok, err := workflow.WaitSignal[string](t, "go", timeout)
	if err != nil {
		return "", err
	}
	if !ok {
		return "timeout", nil
	}
	return "signal " + v, nil
})

// TestSignalRacesItsTimeout: 200 waits whose signal is sent around the
// moment their timeout passes. Each task wakes exactly once, with the
// signal or the timeout, never both: its wait has one final state, the
// signal is taken only when it won, and the task had exactly two turns.
func TestSignalRacesItsTimeout(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalOrTimeout))
	ctx := ctxTimeout(t, 120*time.Second)
	const runs = 200
	const timeout = 300 * time.Millisecond
	ids := make([]string, runs)
	outcomes := make([]string, runs)
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := range runs {
		wg.Go(func() {
			run, err := signalOrTimeout.Start(ctx, eng, timeout, nil)
			if err != nil {
				errs <- err
				return
			}
			ids[i] = run.ID
			// Wait until the wait is recorded, then send within 60 ms
			// either side of the moment its timeout passes, by the
			// database's clock.
			var left *float64
			for left == nil {
				time.Sleep(5 * time.Millisecond)
				if err := pool.QueryRow(ctx, `
					SELECT extract(epoch FROM s.resume_at - clock_timestamp())::float8
					  FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
					 WHERE k.run_id = $1 AND s.kind = 'signal'`, run.ID).Scan(&left); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					errs <- err
					return
				}
			}
			time.Sleep(time.Duration(*left*float64(time.Second)) - 60*time.Millisecond + time.Duration(rand.IntN(120))*time.Millisecond)
			if err := eng.Signal(ctx, run.ID, "go", "now", nil); err != nil && !errors.Is(err, workflow.ErrRunFinished) {
				errs <- err
				return
			}
			out, err := run.Result(ctx)
			if err != nil {
				errs <- err
				return
			}
			outcomes[i] = out
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var signalled, timedOut int
	for i, out := range outcomes {
		var stepStatus string
		var delivered int
		if err := pool.QueryRow(ctx, `
			SELECT s.status, (SELECT count(*)::int FROM braid_signals g WHERE g.run_id = $1 AND g.delivered_at IS NOT NULL)
			  FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id WHERE k.run_id = $1 AND s.kind = 'signal'`, ids[i]).Scan(&stepStatus, &delivered); err != nil {
			t.Fatal(err)
		}
		switch out {
		case "signal now":
			signalled++
			if stepStatus != "completed" || delivered != 1 {
				t.Errorf("run %s woke by its signal, but its wait is %s and %d signals were taken", ids[i], stepStatus, delivered)
			}
		case "timeout":
			timedOut++
			if stepStatus != "fired" || delivered != 0 {
				t.Errorf("run %s timed out, but its wait is %s and %d signals were taken", ids[i], stepStatus, delivered)
			}
		default:
			t.Errorf("run %s: output %q", ids[i], out)
		}
		if n := count(t, pool, `SELECT count(*) FROM river_job j JOIN braid_tasks k ON k.id = braid_turn_task(j.unique_key, j.args) WHERE k.run_id = $1`, ids[i]); n != 2 {
			t.Errorf("run %s had %d turns, want 2: it woke more than once", ids[i], n)
		}
	}
	t.Logf("%d woken by the signal, %d by the timeout", signalled, timedOut)
	if signalled == 0 || timedOut == 0 {
		t.Errorf("%d woken by the signal, %d by the timeout: the race was not run both ways", signalled, timedOut)
	}
}

// TestSignalIdempotencyKeyAndByKey: a repeated send with the same key is a
// no-op, and a run is signalled by its idempotency key.
func TestSignalIdempotencyKeyAndByKey(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalCollector))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := signalCollector.Start(ctx, eng, 2, &workflow.StartOpts{IdempotencyKey: "collector-7"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := eng.SignalByKey(ctx, "collector-7", "item", 1, &workflow.SignalOpts{IdempotencyKey: "first"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Signal(ctx, run.ID, "item", 2, &workflow.SignalOpts{IdempotencyKey: "second"}); err != nil {
		t.Fatal(err)
	}
	got, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 2}, got); diff != "" {
		t.Errorf("payloads (-want +got):\n%s", diff)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_signals WHERE run_id = $1`, run.ID); n != 2 {
		t.Errorf("%d signals in the mailbox, want 2: a repeated key sends nothing", n)
	}
}

// TestSignalBadInput: each bad send or wait gets a clear error naming what
// is wrong, and sends nothing.
func TestSignalBadInput(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	negative := workflow.Define("signal_negative_timeout", func(t *workflow.Task, _ struct{}) (int, error) {
		v, _, err := workflow.WaitSignal[int](t, "x", -time.Second)
		return v, err
	}, workflow.WithMaxAttempts(1))
	nul := workflow.Define("signal_nul_name", func(t *workflow.Task, _ struct{}) (int, error) {
		if _, _, err := workflow.WaitEvent[int](t, "bad\x00topic", "", 0); err != nil {
			return 0, err
		}
		v, _, err := workflow.WaitSignal[int](t, "bad\x00name", 0)
		return v, err
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(signalCollector, negative, nul)
	cfg.MaxPayloadBytes = 1024
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := signalCollector.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}

	err = eng.Signal(ctx, "0195f3a0-0000-7000-8000-000000000000", "item", 1, nil)
	if !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("signal to an unknown run: %v, want ErrRunNotFound", err)
	}
	if err := eng.Signal(ctx, "not-a-uuid", "item", 1, nil); !errors.Is(err, workflow.ErrRunNotFound) || !strings.Contains(err.Error(), "not-a-uuid") {
		t.Errorf("signal to a bad run ID: %v, want ErrRunNotFound naming it", err)
	}
	if err := eng.SignalByKey(ctx, "no-such-key", "item", 1, nil); !errors.Is(err, workflow.ErrRunNotFound) || !strings.Contains(err.Error(), "no-such-key") {
		t.Errorf("signal by an unknown key: %v, want ErrRunNotFound naming the key", err)
	}
	var tooLarge *workflow.PayloadTooLargeError
	if err := eng.Signal(ctx, run.ID, "item", strings.Repeat("x", 2000), nil); !errors.As(err, &tooLarge) || tooLarge.Limit != 1024 || !strings.Contains(err.Error(), `signal "item"`) {
		t.Errorf("signal over the payload cap: %v, want a *PayloadTooLargeError naming the signal and the limit", err)
	}
	if err := eng.Signal(ctx, run.ID, "", 1, nil); err == nil || !strings.Contains(err.Error(), "signal name is empty") {
		t.Errorf("signal without a name: %v", err)
	}
	if err := eng.Signal(ctx, run.ID, strings.Repeat("n", 201), 1, nil); err == nil || !strings.Contains(err.Error(), "over the limit of 200") {
		t.Errorf("signal with a long name: %v", err)
	}
	for _, name := range []string{"bad\x00name", "bad\xffname"} {
		if err := eng.Signal(ctx, run.ID, name, 1, nil); err == nil || !strings.Contains(err.Error(), "not UTF-8 text without NUL characters") {
			t.Errorf("signal named %q: %v, want an error naming the rule", name, err)
		}
		if _, err := eng.Publish(ctx, name, 1); err == nil || !strings.Contains(err.Error(), "not UTF-8 text without NUL characters") {
			t.Errorf("publish on topic %q: %v, want an error naming the rule", name, err)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := eng.Signal(done, run.ID, "item", 1, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("signal with a cancelled context: %v", err)
	}
	if _, err := eng.Publish(done, "topic", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("publish with a cancelled context: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_signals`) + count(t, pool, `SELECT count(*) FROM braid_events`); n != 0 {
		t.Fatalf("%d signals and events sent by bad sends", n)
	}

	if err := eng.Signal(ctx, run.ID, "item", 5, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eng.Signal(ctx, run.ID, "item", 6, nil); !errors.Is(err, workflow.ErrRunFinished) || !strings.Contains(err.Error(), run.ID) {
		t.Errorf("signal to a finished run: %v, want ErrRunFinished naming the run", err)
	}

	neg, err := negative.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := neg.Result(ctx); err == nil || !strings.Contains(err.Error(), "negative timeout -1s") || !strings.Contains(err.Error(), `signal "x"`) {
		t.Errorf("wait with a negative timeout: %v, want an error naming the signal and the timeout", err)
	}
	// A wait whose topic PostgreSQL's text cannot hold fails its attempt at
	// the call, naming the topic, not later in the batch that records it.
	bad, err := nul.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Result(ctx); err == nil || !strings.Contains(err.Error(), `topic "bad\x00topic" is not UTF-8 text without NUL characters`) {
		t.Errorf("wait on a topic with a NUL: %v, want an error naming the topic and the rule", err)
	}
}

// TestSignalCancelledWait: Cancel settles a waiting signal step, and a
// signal sent after finds the run finished.
func TestSignalCancelledWait(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalCollector))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := signalCollector.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the wait", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == 1
	})
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'cancelled'`); n != 1 {
		t.Errorf("the wait is not cancelled")
	}
	if err := eng.Signal(ctx, run.ID, "item", 1, nil); !errors.Is(err, workflow.ErrRunFinished) {
		t.Errorf("signal to a cancelled run: %v, want ErrRunFinished", err)
	}
	// Retry records the wait anew, and a signal then completes the run.
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if err := eng.Signal(ctx, run.ID, "item", 9, nil); err != nil {
		t.Fatal(err)
	}
	got, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{9}, got); diff != "" {
		t.Errorf("after Retry (-want +got):\n%s", diff)
	}
}

// TestSignalsSentWhileTheWorkerIsDown: the worker of a run that waits on
// signals is killed; the signals sent while no worker runs are delivered
// after a new one starts, once each and in order.
func TestSignalsSentWhileTheWorkerIsDown(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	eng := newEngine(t, pool, crashConfig())
	ctx := ctxTimeout(t, 90*time.Second)
	run, err := signalCollector.Start(ctx, eng, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startWorker(t, url, false)
	waitFor(t, "the first wait", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == 1
	})
	kill(t, a)
	for i := range 5 {
		if err := eng.Signal(ctx, run.ID, "item", i, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The first signal woke the waiting task (its turn waits for a
	// worker); the other four wait in the mailbox.
	if n := count(t, pool, `SELECT count(*) FROM braid_signals WHERE delivered_at IS NULL`); n != 4 {
		t.Errorf("%d signals in the mailbox while no worker runs, want 4", n)
	}
	startWorker(t, url, false)
	got, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3, 4}, got); diff != "" {
		t.Errorf("payloads (-want +got):\n%s", diff)
	}
	if n := count(t, pool, `SELECT count(DISTINCT (task_id, step)) FROM braid_signals WHERE delivered_at IS NOT NULL`); n != 5 {
		t.Errorf("%d waits took a signal, want 5: one each", n)
	}
}

// TestSignalTxRolledBack: a signal sent in a transaction that rolls back
// is not sent and wakes nothing; sent in one that commits, it is.
func TestSignalTxRolledBack(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalCollector))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := signalCollector.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the wait", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == 1
	})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.SignalTx(ctx, tx, run.ID, "item", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_signals`); n != 0 {
		t.Errorf("%d signals after a rollback", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`); n != 1 {
		t.Errorf("the wait is settled by a rolled-back signal")
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return eng.SignalTx(ctx, tx, run.ID, "item", 2, nil) }); err != nil {
		t.Fatal(err)
	}
	got, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{2}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A wait's timeout shorter than the microsecond that the database keeps
// is a timeout all the same: it is rounded up, not down to "no timeout".
func TestASubMicrosecondTimeoutStillTimesOut(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalOrTimeout))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := signalOrTimeout.Start(ctx, eng, 500*time.Nanosecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "timeout" {
		t.Fatalf("run: %q, %v; want it to time out", out, err)
	}
}

// waitsForGo has n children that each wait, with no timeout, for the
// signal "go" of their run.
var waitsForGo = workflow.Define("waits_for_go", func(t *workflow.Task, n int) (int, error) {
	outs, err := workflow.Map(t, "waiter", goWaiter, make([]struct{}, n))
	return len(outs), err
})

var goWaiter = workflow.Define("go_waiter", func(t *workflow.Task, _ struct{}) (string, error) {
	v, _, err := workflow.WaitSignal[string](t, "go", 0)
	return v, err
})

// A send that finds its first waits fired meanwhile (their timeouts won)
// goes on to the next waits, however many it tried: the signal stays in
// the mailbox only when no wait on it is left.
func TestASignalGoesPastEveryWaitThatFiredMeanwhile(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(waitsForGo, goWaiter))
	ctx := ctxTimeout(t, 60*time.Second)
	const waiters = 12
	run, err := waitsForGo.Start(ctx, eng, waiters, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every wait to be recorded", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == waiters
	})
	rows, err := pool.Query(ctx, `SELECT task_id, name FROM braid_steps WHERE kind = 'signal' ORDER BY created_at`)
	if err != nil {
		t.Fatal(err)
	}
	type wait struct {
		Task string
		Name string
	}
	waits, err := pgx.CollectRows(rows, pgx.RowToStructByPos[wait])
	if err != nil {
		t.Fatal(err)
	}
	// All waits but the newest fire while the send runs: their tasks are
	// locked first, as the delay processor locks them, and their steps are
	// marked fired once the send waits for the first of them.
	fired, last := waits[:waiters-1], waits[waiters-1]
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, w := range fired {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM braid_tasks WHERE id = $1 FOR UPDATE`, w.Task); err != nil {
			t.Fatal(err)
		}
	}
	sent := make(chan error, 1)
	go func() { sent <- eng.Signal(ctx, run.ID, "go", "now", nil) }()
	waitFor(t, "the send to wait for a task's lock", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	for _, w := range fired {
		if _, err := tx.Exec(ctx, `UPDATE braid_steps SET status = 'fired', finished_at = clock_timestamp() WHERE task_id = $1 AND name = $2`, w.Task, w.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	var status string
	var delivered int
	if err := pool.QueryRow(ctx, `
		SELECT s.status, (SELECT count(*)::int FROM braid_signals g WHERE g.task_id = s.task_id)
		  FROM braid_steps s WHERE s.task_id = $1 AND s.name = $2`, last.Task, last.Name).Scan(&status, &delivered); err != nil {
		t.Fatal(err)
	}
	if status != "completed" || delivered != 1 {
		t.Fatalf("the one wait left is %s and took %d signals; want it to take the signal", status, delivered)
	}
}

// A send repeated with its idempotency key does nothing and returns nil,
// however the first one's run ended since: the first may have finished
// it, and its caller, who never heard back, sends again.
func TestSignalRepeatedWithItsKeyAfterTheRunFinished(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalCollector))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := signalCollector.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &workflow.SignalOpts{IdempotencyKey: "approve-1"}
	if err := eng.Signal(ctx, run.ID, "item", 7, opts); err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || !cmp.Equal(out, []int{7}) {
		t.Fatalf("the run: %v, %v; want [7]", out, err)
	}
	if err := eng.Signal(ctx, run.ID, "item", 7, opts); err != nil {
		t.Errorf("the send repeated with its key after the run finished: %v; want nil", err)
	}
	if err := eng.Signal(ctx, run.ID, "item", 8, &workflow.SignalOpts{IdempotencyKey: "approve-2"}); !errors.Is(err, workflow.ErrRunFinished) {
		t.Errorf("a new send to the finished run: %v; want ErrRunFinished", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_signals WHERE run_id = $1`, run.ID); n != 1 {
		t.Errorf("the finished run's mailbox holds %d signals; want the first alone", n)
	}
}

// An idempotency key that PostgreSQL cannot store (a NUL, bytes that are
// not UTF-8), of a signal or of the run a signal goes to by key, is
// refused with an error that names it, and leaves the caller's
// transaction usable.
func TestSignalKeyPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(signalCollector))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := signalCollector.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, send := range []struct {
		what string
		fn   func() error
		want string
	}{
		{"a signal's key with a NUL", func() error {
			return eng.SignalTx(ctx, tx, run.ID, "item", 1, &workflow.SignalOpts{IdempotencyKey: "a\x00b"})
		}, `signal "item": idempotency key "a\x00b" is not UTF-8 text without NUL characters`},
		{"a signal's key not UTF-8", func() error {
			return eng.SignalTx(ctx, tx, run.ID, "item", 1, &workflow.SignalOpts{IdempotencyKey: "a\xffb"})
		}, `signal "item": idempotency key "a\xffb" is not UTF-8 text without NUL characters`},
		{"a run's key with a NUL", func() error {
			return eng.SignalByKeyTx(ctx, tx, "k\x00", "item", 1, nil)
		}, `signal "item" to the run with an idempotency key "k\x00" is not UTF-8 text without NUL characters`},
	} {
		if err := send.fn(); err == nil || !strings.Contains(err.Error(), send.want) {
			t.Errorf("%s: %v; want an error saying %s", send.what, err, send.want)
		}
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			t.Fatalf("after %s the caller's transaction is unusable: %v", send.what, err)
		}
	}
}

// A run's delete (retention, through the foreign key's cascade) finds its
// signals by index, delivered ones too, rather than read the whole mailbox
// table once per run.
func TestDeletedRunsFindTheirSignalsByIndex(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 120*time.Second)
	execSQL(t, pool, `
		INSERT INTO braid_runs (id, workflow, input, status, finished_at)
		SELECT gen_random_uuid(), 'w', '{}', 'completed', now() - interval '30 days' FROM generate_series(1, 21)`)
	// One busy run with many delivered signals; one delivered signal for
	// each other run.
	execSQL(t, pool, `
		INSERT INTO braid_signals (run_id, name, payload, delivered_at, task_id, step)
		SELECT (SELECT id FROM braid_runs ORDER BY id LIMIT 1), 'n', '1', now(), gen_random_uuid(), 's' FROM generate_series(1, 20000)`)
	execSQL(t, pool, `
		INSERT INTO braid_signals (run_id, name, payload, delivered_at, task_id, step)
		SELECT id, 'n', '1', now(), gen_random_uuid(), 's' FROM braid_runs ORDER BY id OFFSET 1`)
	execSQL(t, pool, `ANALYZE braid_signals`)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `DELETE FROM braid_runs WHERE id IN (SELECT id FROM braid_runs ORDER BY id OFFSET 1)`); err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(seq_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = 'braid_signals'`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq > 0 {
		t.Errorf("deleting 20 runs read the whole of braid_signals %d times; want an index scan per run", seq)
	}
}
