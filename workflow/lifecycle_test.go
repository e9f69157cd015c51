package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// bodyWatch counts step bodies that entered and returned, and keeps the
// time the last one returned.
type bodyWatch struct {
	entered, returned atomic.Int64
	lastReturn        atomic.Int64 // UnixNano
}

func (w *bodyWatch) enter() { w.entered.Add(1) }

func (w *bodyWatch) leave() {
	now := time.Now().UnixNano()
	for {
		old := w.lastReturn.Load()
		if old >= now || w.lastReturn.CompareAndSwap(old, now) {
			break
		}
	}
	w.returned.Add(1)
}

// stopDuring starts an engine, starts slow runs whose step blocks on the
// turn's context and then takes linger to return, and prompt runs, waits
// until the slow bodies run, and calls Stop with a deadline of grace. It
// returns when Stop returned, the watch, and Stop's error.
func stopDuring(t *testing.T, name string, slow, prompt int, grace, linger time.Duration) (time.Time, *bodyWatch, error) {
	t.Helper()
	pool := testutil.DB(t)
	w := &bodyWatch{}
	slowWF := workflow.Define(name+"_slow", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "block", func(ctx context.Context) (int, error) {
			w.enter()
			defer w.leave()
			<-ctx.Done()
			time.Sleep(linger) // ignores the context
			return 0, ctx.Err()
		})
	}, workflow.WithRetry(fast))
	promptWF := workflow.Define(name+"_prompt", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "quick", func(ctx context.Context) (int, error) {
			w.enter()
			defer w.leave()
			time.Sleep(20 * time.Millisecond)
			return n, nil
		})
	}, workflow.WithRetry(fast))
	eng, err := workflow.NewEngine(pool, testConfig(slowWF, promptWF))
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 30*time.Second)
	for i := range slow {
		if _, err := slowWF.Start(ctx, eng, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the slow step bodies to run", 10*time.Second, func() bool { return w.entered.Load() >= int64(slow) })
	for i := range prompt {
		if _, err := promptWF.Start(ctx, eng, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Some of the prompt ones are running, or about to, when Stop begins.
	time.Sleep(10 * time.Millisecond)

	stopCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eng.Stop(stopCtx) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Stop did not return 30s after its deadline of %s", grace) // a hang, not a speed bound
	}
	return time.Now(), w, err
}

func checkStoppedAfterBodies(t *testing.T, stopped time.Time, w *bodyWatch, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want nil or the context's error", err)
	}
	entered, returned := w.entered.Load(), w.returned.Load()
	if returned != entered {
		t.Fatalf("Stop returned while %d of %d step bodies had not returned", entered-returned, entered)
	}
	if last := time.Unix(0, w.lastReturn.Load()); last.After(stopped) {
		t.Fatalf("a step body returned %s after Stop did", last.Sub(stopped))
	}
	// Nothing runs after Stop returned.
	time.Sleep(300 * time.Millisecond)
	if e := w.entered.Load(); e != entered {
		t.Fatalf("%d step bodies started after Stop returned", e-entered)
	}
}

// TestStopWaitsForRunningStepBodies: Stop lets running turns finish until
// its context ends, then cancels them and still waits until every step
// body has returned.
func TestStopWaitsForRunningStepBodies(t *testing.T) {
	t.Parallel()
	stopped, w, err := stopDuring(t, "stop_wait", 4, 20, time.Second, 300*time.Millisecond)
	checkStoppedAfterBodies(t, stopped, w, err)
	t.Logf("Stop returned %v, %s after the last step body", err, stopped.Sub(time.Unix(0, w.lastReturn.Load())))
}

// TestStopWaitsForStepBodiesThatIgnoreTheContext: a step body that keeps
// running 2 s past Stop's deadline of 500 ms still holds Stop until it
// returned.
func TestStopWaitsForStepBodiesThatIgnoreTheContext(t *testing.T) {
	t.Parallel()
	stopped, w, err := stopDuring(t, "stop_ignore", 2, 5, 500*time.Millisecond, 2*time.Second)
	checkStoppedAfterBodies(t, stopped, w, err)
}

// TestStartContextBoundsOnlyTheStartUp: cancelling the context given to
// Start, once Start returned, stops nothing: a run started afterwards,
// with a delay, completes.
func TestStartContextBoundsOnlyTheStartUp(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("after_start_ctx", func(t *workflow.Task, n int) (int, error) {
		v, err := workflow.Step(t, "one", func(ctx context.Context) (int, error) { return n + 1, nil })
		if err != nil {
			return 0, err
		}
		if err := t.Delay("nap", 100*time.Millisecond); err != nil {
			return 0, err
		}
		return workflow.Step(t, "two", func(ctx context.Context) (int, error) { return v * 2, nil })
	})
	eng, err := workflow.NewEngine(pool, testConfig(wf))
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancelStart := context.WithCancel(context.Background())
	if err := eng.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	cancelStart()
	time.Sleep(200 * time.Millisecond) // whatever would stop with it, stops

	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, 20, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != 42 {
		t.Fatalf("output %d, want 42", out)
	}
}

// TestPoolCloseAfterResultOnAnEngineNeverStarted: Result on an engine that
// was never started leaves nothing behind: pool.Close returns, and no
// goroutine is left. Not parallel, so that goleak sees only this test.
func TestPoolCloseAfterResultOnAnEngineNeverStarted(t *testing.T) {
	url := testutil.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			pool.Close()
		}
	})
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	ignore := append(testutil.IgnoreGoroutines(), goleak.IgnoreCurrent())

	wf := workflow.Define("never_worked", func(t *workflow.Task, n int) (int, error) { return n, nil })
	eng, err := workflow.NewEngine(pool, testConfig(wf))
	if err != nil {
		t.Fatal(err)
	}
	run, err := wf.Start(context.Background(), eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = run.Result(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Result of a run nobody works: %v, want the context's deadline", err)
	}

	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	select {
	case <-done:
		closed = true
	case <-time.After(3 * time.Second):
		t.Fatal("pool.Close did not return: something still holds a connection of the pool") // a hang, not a speed bound
	}
	goleak.VerifyNone(t, ignore...)
}

var twoNumbers = regexp.MustCompile(`\b(\d+)\b.*\b(\d+)\b`)

// TestPoolSize: a pool below PoolMinConns is refused with an error naming
// both sizes; a pool of 4 works 300 runs of 4 steps, and the leases of the
// delay processor and of maintenance never change hands meanwhile.
func TestPoolSize(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	small := func(n int32) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = n
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	wf := workflow.Define("four_steps", func(t *workflow.Task, n int) (int, error) {
		total := n
		for i := range 4 {
			v, err := workflow.Step(t, fmt.Sprint("step", i), func(ctx context.Context) (int, error) { return i, nil })
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	})

	tooSmall := int32(workflow.PoolMinConns - 1)
	_, err := workflow.NewEngine(small(tooSmall), testConfig(wf))
	if err == nil {
		t.Fatalf("NewEngine accepted a pool of %d connections", tooSmall)
	}
	m := twoNumbers.FindStringSubmatch(err.Error())
	if m == nil || m[1] != fmt.Sprint(tooSmall) || m[2] != fmt.Sprint(workflow.PoolMinConns) {
		t.Fatalf("NewEngine's error %q does not name the pool's %d connections and the minimum %d", err, tooSmall, workflow.PoolMinConns)
	}

	pool := small(4)
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 90*time.Second)
	type holder struct {
		holder     string
		generation int64
	}
	leasesNow := func() map[string]holder {
		rows, err := pool.Query(ctx, `SELECT name, holder, generation FROM braid_leases WHERE name = ANY($1) AND expires_at > now()`,
			[]string{workflow.DelayLease, queue.MaintenanceLease})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]holder{}
		for rows.Next() {
			var name string
			var h holder
			if err := rows.Scan(&name, &h.holder, &h.generation); err != nil {
				t.Fatal(err)
			}
			out[name] = h
		}
		rows.Close()
		return out
	}
	var before map[string]holder
	waitFor(t, "both leases to be held", 10*time.Second, func() bool {
		before = leasesNow()
		return len(before) == 2
	})

	const runs = 300
	ids := make([]string, 0, runs)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range runs {
			run, err := wf.StartTx(ctx, tx, eng, i, nil)
			if err != nil {
				return err
			}
			ids = append(ids, run.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		out, err := eng.Wait(ctx, id)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if want := fmt.Sprint(i + 0 + 1 + 2 + 3); string(out) != want {
			t.Fatalf("run %d: output %s, want %s", i, out, want)
		}
	}
	after := leasesNow()
	for _, name := range []string{workflow.DelayLease, queue.MaintenanceLease} {
		if after[name] != before[name] {
			t.Errorf("lease %s changed hands during the runs: %+v, then %+v", name, before[name], after[name])
		}
	}
}

// TestATurnThatTimesOutWhileStopWaitsSpendsItsAttempt: Stop puts back,
// without spending their attempt, only the turns it cancelled. A turn
// whose own timeout ends it while Stop waits for it failed on its own:
// its attempt is spent, here its last, and its run fails.
func TestATurnThatTimesOutWhileStopWaitsSpendsItsAttempt(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	pool := testutil.DB(t)
	began := make(chan struct{}, 1)
	slow := workflow.Define("times_out_in_stop", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (struct{}, error) {
			select {
			case began <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return struct{}{}, ctx.Err()
		})
	}, workflow.WithTimeout(time.Second), workflow.WithMaxAttempts(1))
	eng, err := workflow.NewEngine(pool, testConfig(slow))
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	run, err := slow.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-began:
	case <-ctx.Done():
		t.Fatal("the step never began")
	}
	// Stop waits far longer than the turn's timeout: the timeout ends the
	// turn, not Stop.
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := eng.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM braid_runs WHERE id = $1`, run.ID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "failed" {
		t.Fatalf("after its last attempt timed out while Stop waited, the run is %s; want failed", status)
	}
}
