package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// stepClock records when every step body started, and the spans of time
// in which each run was cancelled: from the moment Cancel returned (its
// transaction committed before that) to the moment Retry was called. A
// step body that starts inside such a span ran after a cancel. All times
// come from this process's monotonic clock, so they compare exactly; the
// ledger table keeps the database's clock_timestamp() of each start too,
// for the report.
type stepClock struct {
	mu        sync.Mutex
	starts    map[string][]stepStart  // by run ID
	cancelled map[string][]cancelSpan // by run ID
}

type stepStart struct {
	name string
	at   time.Time
}

// cancelSpan is a span in which a run was cancelled; to is zero while it
// still is.
type cancelSpan struct {
	from, to time.Time
}

func newStepClock() *stepClock {
	return &stepClock{starts: map[string][]stepStart{}, cancelled: map[string][]cancelSpan{}}
}

func (c *stepClock) started(runID, name string) {
	now := time.Now()
	c.mu.Lock()
	c.starts[runID] = append(c.starts[runID], stepStart{name: name, at: now})
	c.mu.Unlock()
}

// cancelReturned opens a span; call it right after Cancel returned nil.
func (c *stepClock) cancelReturned(runID string) {
	now := time.Now()
	c.mu.Lock()
	c.cancelled[runID] = append(c.cancelled[runID], cancelSpan{from: now})
	c.mu.Unlock()
}

// retryCalled closes the open span; call it right before Retry. It
// returns a function that opens the span again, for a Retry that failed.
func (c *stepClock) retryCalled(runID string) (undo func()) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	spans := c.cancelled[runID]
	if len(spans) == 0 || !spans[len(spans)-1].to.IsZero() {
		return func() {}
	}
	i := len(spans) - 1
	spans[i].to = now
	return func() {
		c.mu.Lock()
		c.cancelled[runID][i].to = time.Time{}
		c.mu.Unlock()
	}
}

// startsOf counts the starts of the step body labelled name in a run.
func (c *stepClock) startsOf(runID, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, st := range c.starts[runID] {
		if st.name == name {
			n++
		}
	}
	return n
}

// awaitStart waits, at most d, until the step body labelled name starts
// in the run once more than it had when awaitStart was called.
func (c *stepClock) awaitStart(runID, name string, d time.Duration) {
	before := c.startsOf(runID, name)
	deadline := time.Now().Add(d)
	for c.startsOf(runID, name) == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// violations lists the step bodies that started while their run was
// cancelled.
func (c *stepClock) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for runID, spans := range c.cancelled {
		for _, st := range c.starts[runID] {
			for _, sp := range spans {
				if st.at.After(sp.from) && (sp.to.IsZero() || st.at.Before(sp.to)) {
					out = append(out, fmt.Sprintf("run %s: step %s started %s after Cancel had returned", runID, st.name, st.at.Sub(sp.from)))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func deadlocks(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(),
		`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdRow locks, in a transaction the test commits or that is rolled back
// when it ends, the row of table whose id is id.
func holdRow(t *testing.T, pool *pgxpool.Pool, table string, id any) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	return tx
}

// holdRunningTurnJob holds the row of the running turn job of run runID
// (as holdRow does), which must have one.
func holdRunningTurnJob(t *testing.T, pool *pgxpool.Pool, runID string) pgx.Tx {
	t.Helper()
	var job int64
	if err := pool.QueryRow(context.Background(), `
		SELECT j.id FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND j.state = 'running'`, runID).Scan(&job); err != nil {
		t.Fatal(err)
	}
	return holdRow(t, pool, "river_job", job)
}

// waitsForALock reports whether a session of the test's database, other
// than a turn's heartbeat, waits for a row lock.
func waitsForALock(t *testing.T, pool *pgxpool.Pool) bool {
	return count(t, pool, `
		SELECT count(*) FROM pg_stat_activity
		 WHERE datname = current_database() AND wait_event_type = 'Lock'
		   AND query NOT LIKE '%braid_job_progress%'`) > 0
}

// TestCancelRetryStormNoDeadlockNothingRunsAfterCancel races 200 calls of
// Cancel and Retry against turns that complete, suspend on a delay and on
// joins, and spawn children, among them one run of 1,000 children. No
// deadlock may occur, Cancel and Retry return only their documented
// errors, no step body starts while its run is cancelled, every run ends
// settled, and Retry completes the runs left cancelled.
func TestCancelRetryStormNoDeadlockNothingRunsAfterCancel(t *testing.T) {
	t.Parallel()
	const (
		totalRounds = 200
		stormers    = 6
		bigChildren = 1000
	)
	url := testutil.URL(t)
	admin := testutil.Pool(t, url) // the test's own reads
	lpool := testutil.Pool(t, url) // the ledger's writes
	epool := testutil.Pool(t, url) // the engine's
	ledger(t, admin)
	deadlocksBefore := deadlocks(t, admin)

	clock := newStepClock()
	body := func(t *workflow.Task, name string, v int) func(ctx context.Context) (int, error) {
		full := t.Key() + "/" + name
		return func(ctx context.Context) (int, error) {
			clock.started(t.RunID(), full)
			if _, err := lpool.Exec(ctx, `INSERT INTO ledger (run_id, step) VALUES ($1, $2)`, t.RunID(), full); err != nil {
				return 0, err
			}
			time.Sleep(time.Millisecond)
			return v, nil
		}
	}
	leaf := workflow.Define("storm_leaf", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "work", body(t, "work", n))
	}, workflow.WithRetry(fast))
	// A diamond DAG, started as a child of each mixed run, so that
	// cancels and retries land on blocked, released and skipped nodes too.
	diamond := workflow.DAG[int]("storm_diamond",
		workflow.Node("a", leaf),
		workflow.Node("b", leaf, workflow.After("a")),
		workflow.Node("c", leaf, workflow.After("a")),
		workflow.Node("d", leaf, workflow.After("b", "c")),
	)
	mixed := workflow.Define("storm_mixed", func(t *workflow.Task, n int) (int, error) {
		a, err := workflow.Step(t, "a", body(t, "a", n))
		if err != nil {
			return 0, err
		}
		if err := t.Delay("nap", 20*time.Millisecond); err != nil {
			return 0, err
		}
		left := workflow.Go(t, "left", leaf, 1)
		right := workflow.Go(t, "right", leaf, 2)
		l, err := left.Get()
		if err != nil {
			return 0, err
		}
		r, err := right.Get()
		if err != nil {
			return 0, err
		}
		few, err := workflow.Map(t, "few", leaf, []int{3, 4, 5})
		if err != nil {
			return 0, err
		}
		if _, err := workflow.Go(t, "diamond", diamond, 0).Get(); err != nil {
			return 0, err
		}
		b, err := workflow.Step(t, "b", body(t, "b", 1))
		if err != nil {
			return 0, err
		}
		// A run of steps in one turn, so that cancels land between them.
		c := 0
		for i := range 10 {
			v, err := workflow.Step(t, "c", body(t, fmt.Sprint("c", i), 1))
			if err != nil {
				return 0, err
			}
			c += v
		}
		return a + l + r + few[0] + few[1] + few[2] + b + c, nil
	}, workflow.WithRetry(fast))
	big := workflow.Define("storm_big", func(t *workflow.Task, n int) (int, error) {
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		outs, err := workflow.Map(t, "many", leaf, items)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, o := range outs {
			sum += o
		}
		return workflow.Step(t, "sum", body(t, "sum", sum))
	}, workflow.WithRetry(fast))

	eng := startEngine(t, epool, testConfig(leaf, mixed, big, diamond))
	ctx := ctxTimeout(t, 2*time.Minute)

	var (
		rounds  atomic.Int64
		errMu   sync.Mutex
		errs    []string
		runsMu  sync.Mutex
		runs    []string
		mixedN  = map[string]int{} // expected output of each mixed run
		bigRun  string
		wg      sync.WaitGroup
		mistake = func(format string, args ...any) {
			errMu.Lock()
			errs = append(errs, fmt.Sprintf(format, args...))
			errMu.Unlock()
		}
	)
	// cancel and retry call the engine, keep the clock, and accept only
	// the documented sentinels. They report whether the call took effect.
	cancel := func(runID string) bool {
		rounds.Add(1)
		err := eng.Cancel(ctx, runID)
		if err == nil {
			clock.cancelReturned(runID)
			return true
		}
		if !errors.Is(err, workflow.ErrRunFinished) {
			mistake("Cancel(%s): %v", runID, err)
		}
		return false
	}
	retry := func(runID string) bool {
		rounds.Add(1)
		undo := clock.retryCalled(runID)
		err := eng.Retry(ctx, runID)
		if err == nil {
			return true
		}
		undo()
		if !errors.Is(err, workflow.ErrRunNotRetryable) {
			mistake("Retry(%s): %v", runID, err)
		}
		return false
	}
	pause := func(max time.Duration) { time.Sleep(rand.N(max) + time.Millisecond) }

	// The big run: cancel it while its children run, retry it, and leave
	// the last cancel in place.
	wg.Add(1)
	go func() {
		defer wg.Done()
		run, err := big.Start(ctx, eng, bigChildren, nil)
		if err != nil {
			mistake("starting the big run: %v", err)
			return
		}
		runsMu.Lock()
		runs, bigRun = append(runs, run.ID), run.ID
		runsMu.Unlock()
		for i := range 3 {
			// Let a random share of the children run first.
			target := (i+1)*150 + rand.IntN(100)
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				var n int
				if err := admin.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE run_id = $1`, run.ID).Scan(&n); err != nil {
					mistake("counting the big run's steps: %v", err)
					return
				}
				if n >= target {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !cancel(run.ID) {
				return
			}
			if i == 2 {
				return // left cancelled
			}
			pause(100 * time.Millisecond)
			if !retry(run.ID) {
				return
			}
		}
	}()

	cancelPoints := []string{"root/a", "left/work", "few/1/work", "b/work", "d/work", "root/b", "root/c0", "root/c4"}
	// The storm: small runs cancelled at random points, retried, cancelled
	// again; some are left cancelled, the others complete.
	for g := range stormers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; rounds.Load() < totalRounds; i++ {
				n := g*1000 + i
				run, err := mixed.Start(ctx, eng, n, nil)
				if err != nil {
					mistake("starting a run: %v", err)
					return
				}
				runsMu.Lock()
				runs = append(runs, run.ID)
				mixedN[run.ID] = n
				runsMu.Unlock()
				ops := 1 + rand.IntN(3)
				for op := range ops {
					// Cancel after a random pause, or right as a random
					// step body starts: in the first turn, in a child, in
					// a continuation, between the steps of one turn.
					if rand.IntN(2) == 0 {
						pause(60 * time.Millisecond)
					} else {
						clock.awaitStart(run.ID, cancelPoints[rand.IntN(len(cancelPoints))], 2*time.Second)
					}
					if !cancel(run.ID) {
						break // it completed first
					}
					if op == ops-1 && rand.IntN(2) == 0 {
						break // left cancelled
					}
					pause(30 * time.Millisecond)
					if !retry(run.ID) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.FailNow()
	}
	if bigRun == "" {
		t.Fatal("the big run was never started")
	}
	t.Logf("%d rounds of Cancel and Retry over %d runs", rounds.Load(), len(runs))

	// Every run settles: the retried ones complete, the cancelled ones
	// stay cancelled.
	settleBy := time.Now().Add(60 * time.Second)
	for count(t, admin, `SELECT count(*) FROM braid_runs WHERE status NOT IN ('completed', 'cancelled')`) > 0 {
		if time.Now().After(settleBy) {
			dumpUnsettled(t, admin)
			t.Fatal("timed out after 60s waiting for every run to settle")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Give whatever might still run after a cancel the time to show.
	time.Sleep(time.Second)
	if n := count(t, admin, `SELECT count(*) FROM braid_runs WHERE status NOT IN ('completed', 'cancelled')`); n != 0 {
		t.Fatalf("%d runs are neither completed nor cancelled", n)
	}
	if n := count(t, admin, `SELECT count(*) FROM braid_runs WHERE status = 'cancelled'`); n == 0 {
		t.Fatal("no run was left cancelled")
	}
	if n := count(t, admin, `
		SELECT count(*) FROM braid_tasks t
		 WHERE t.status IN ('pending', 'running')
		   AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = 'braid_task' AND braid_turn_task(j.unique_key, j.args) = t.id
		                      AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled'))`); n != 0 {
		t.Fatalf("%d tasks are pending or running without a live turn", n)
	}
	if n := count(t, admin, `
		SELECT count(*) FROM braid_tasks t JOIN braid_runs r ON r.id = t.run_id
		 WHERE r.status = 'cancelled' AND t.status NOT IN ('completed', 'cancelled')`); n != 0 {
		dumpUnsettled(t, admin)
		t.Fatalf("%d tasks of cancelled runs are neither completed nor cancelled", n)
	}
	if v := clock.violations(); len(v) > 0 {
		t.Errorf("%d step bodies started after Cancel had committed, for example:\n%s", len(v), strings.Join(v[:min(len(v), 30)], "\n"))
	}

	// Retry completes the runs left cancelled, the big one among them.
	cancelled := count(t, admin, `SELECT count(*) FROM braid_runs WHERE status = 'cancelled'`)
	rows, err := admin.Query(ctx, `SELECT id::text FROM braid_runs WHERE status = 'cancelled'`)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	rows.Close()
	if len(left) != cancelled {
		t.Fatalf("read %d cancelled runs, counted %d", len(left), cancelled)
	}
	for _, id := range left {
		if err := eng.Retry(ctx, id); err != nil {
			t.Fatalf("final Retry(%s): %v", id, err)
		}
	}
	for _, id := range runs {
		out, err := eng.Wait(ctx, id)
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		want := "499500" // the sum of 0…999 for the big run
		if id != bigRun {
			want = fmt.Sprint(mixedN[id] + 1 + 2 + 3 + 4 + 5 + 1 + 10)
		}
		if string(out) != want {
			t.Fatalf("run %s output %s, want %s", id, out, want)
		}
	}

	// No deadlock: stop the engine and close its connections, whose
	// backends flush their statistics as they exit, then read the counter.
	stopCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := eng.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	epool.Close()
	lpool.Close()
	time.Sleep(1500 * time.Millisecond)
	execSQL(t, admin, `SELECT pg_stat_clear_snapshot()`)
	if d := deadlocks(t, admin) - deadlocksBefore; d != 0 {
		t.Fatalf("%d deadlocks during the storm", d)
	}
}

// dumpUnsettled logs the runs that are neither completed nor cancelled,
// with their unfinished tasks and those tasks' turn jobs.
func dumpUnsettled(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT r.id, r.status, t.key, t.status, t.remaining, coalesce(t.error::text, ''),
		       coalesce((SELECT string_agg(j.id || ':' || j.state || '@' || j.attempt || coalesce(' ' || (j.errors[array_length(j.errors, 1)]->>'error'), ''), ', ' ORDER BY j.id)
		                   FROM river_job j WHERE j.kind = 'braid_task' AND braid_turn_task(j.unique_key, j.args) = t.id), '')
		  FROM braid_runs r JOIN braid_tasks t ON t.run_id = r.id
		 WHERE (r.status NOT IN ('completed', 'cancelled') AND t.status <> 'completed')
		    OR (r.status = 'cancelled' AND t.status NOT IN ('completed', 'cancelled'))
		 ORDER BY r.id, t.created_at LIMIT 40`)
	if err != nil {
		t.Logf("listing unsettled runs: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var run, runStatus, key, status, taskErr, jobs string
		var remaining int
		if err := rows.Scan(&run, &runStatus, &key, &status, &remaining, &taskErr, &jobs); err != nil {
			t.Logf("listing unsettled runs: %v", err)
			return
		}
		t.Logf("run %s (%s): task %s %s remaining=%d error=%s jobs=[%s]", run, runStatus, key, status, remaining, taskErr, jobs)
	}
}

// TestCancelSparesTheTurnThatARetryLeftItsTaskTo pins down one race of
// Cancel and Retry. Cancel's transaction skips a turn job that another
// transaction holds, and cancels it through River after its commit. When
// a Retry resets the task in between, its turn runs the retried task, and
// that later cancel must leave it alone; a cancelled turn would leave the
// task without one, and the reconciler would fail it. The test holds the
// turn job's row so that Cancel skips it, resets the task and its run in
// that same transaction, as Retry's would, and commits it while Cancel
// waits to cancel the job. The turn keeps running and completes the run.
func TestCancelSparesTheTurnThatARetryLeftItsTaskTo(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	wf := workflow.Define("spared_turn", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			started <- struct{}{}
			select {
			case <-release:
				return 7, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	var (
		jobID  int64
		taskID string
	)
	if err := pool.QueryRow(ctx, `
		SELECT j.id, k.id::text FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND j.state = 'running'`, run.ID).Scan(&jobID, &taskID); err != nil {
		t.Fatal(err)
	}

	holder := holdRow(t, pool, "river_job", jobID)
	cancelled := make(chan error, 1)
	go func() { cancelled <- eng.Cancel(ctx, run.ID) }()
	waitFor(t, "Cancel to commit and wait for the held turn job", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_tasks WHERE id = $1 AND status = 'cancelled'`, taskID) == 1 &&
			waitsForALock(t, pool)
	})
	// What Retry's transaction writes for this run: the task is pending
	// again, the run running, and the live turn job is left to run it.
	if _, err := holder.Exec(ctx, `
		UPDATE braid_tasks SET status = 'pending', error = NULL, attempt = 0, finished_at = NULL WHERE id = $1`, taskID); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `
		UPDATE braid_runs SET status = 'running', error = NULL, finished_at = NULL WHERE id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("Cancel = %v", err)
	}
	var state string
	var cancelRequested bool
	if err := pool.QueryRow(ctx, `SELECT state::text, metadata ? 'cancel_attempted_at' FROM river_job WHERE id = $1`, jobID).
		Scan(&state, &cancelRequested); err != nil {
		t.Fatal(err)
	}
	if state != "running" || cancelRequested {
		t.Fatalf("turn job %d: state %s, cancel requested %v; want it running, not cancelled", jobID, state, cancelRequested)
	}
	close(release)
	got, err := run.Result(ctx)
	if err != nil || got != 7 {
		t.Fatalf("Result = %v, %v; want 7 from the turn that Cancel spared", got, err)
	}
}

// TestRetryWaitsForATurnThatStartedAfterItsWait pins down the other half:
// Retry waits for the running turns of the tasks it resets before its
// transaction, but a turn may start between that wait and the
// transaction's locks. Retry must not leave the task to such a turn,
// which may be one whose cancel a Cancel requested; it waits for it to
// end, then gives the task a turn of its own. The test stands in for
// that turn with a job on a queue no worker takes, and starts it while
// Retry waits for the task's lock.
func TestRetryWaitsForATurnThatStartedAfterItsWait(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var first atomic.Bool
	first.Store(true)
	started := make(chan struct{}, 1)
	wf := workflow.Define("late_turn", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			if first.CompareAndSwap(true, false) {
				started <- struct{}{}
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 9, nil
		})
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatalf("Cancel = %v", err)
	}
	var taskID string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM braid_tasks WHERE run_id = $1`, run.ID).Scan(&taskID); err != nil {
		t.Fatal(err)
	}
	var late int64
	if err := pool.QueryRow(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, priority, state, scheduled_at)
		VALUES (jsonb_build_object('task_id', $1::text, 'workflow', 'late_turn'), $2, 25, 'unworked', 2, 'available', now())
		RETURNING id`, taskID, workflow.TaskKind).Scan(&late); err != nil {
		t.Fatal(err)
	}

	holder := holdRow(t, pool, "braid_tasks", taskID)
	retried := make(chan error, 1)
	go func() { retried <- eng.Retry(ctx, run.ID) }()
	waitFor(t, "Retry to wait for the task's lock", 20*time.Second, func() bool { return waitsForALock(t, pool) })
	// The turn starts now, after Retry's wait.
	if _, err := pool.Exec(ctx, `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY['elsewhere']
		 WHERE id = $1`, late); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-retried:
		t.Fatalf("Retry returned %v while a turn of the task it resets was running", err)
	case <-time.After(500 * time.Millisecond):
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE id = $1 AND status = 'cancelled'`, taskID); n != 1 {
		t.Fatalf("the task was reset while its turn ran")
	}
	// The turn ends.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, late); err != nil {
		t.Fatal(err)
	}
	if err := <-retried; err != nil {
		t.Fatalf("Retry = %v", err)
	}
	if got, err := run.Result(ctx); err != nil || got != 9 {
		t.Fatalf("Result = %v, %v; want 9 from the turn Retry gave the task", got, err)
	}
}

// TestCancelCancelsTheTurnsItSkippedOnceTheirRowsAreFree runs three
// children whose steps wait on their contexts, and holds one child's turn
// job row while the run is cancelled. Cancel's transaction skips that
// job; the others' turns end at once. Cancel then waits for the held row,
// cancels that turn too once it is free, and returns after every turn has
// ended.
func TestCancelCancelsTheTurnsItSkippedOnceTheirRowsAreFree(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started := make(chan string, 3)
	var mu sync.Mutex
	ended := map[string]bool{}
	stuck := workflow.Define("skipped_stuck", func(t *workflow.Task, _ int) (int, error) {
		key := t.Key()
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			started <- key
			<-ctx.Done()
			mu.Lock()
			ended[key] = true
			mu.Unlock()
			return 0, ctx.Err()
		})
	})
	parent := workflow.Define("skipped_parent", func(t *workflow.Task, _ int) ([]int, error) {
		return workflow.Map(t, "c", stuck, []int{1, 2, 3})
	})
	eng := startEngine(t, pool, testConfig(parent, stuck))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-started
	}
	var heldJob int64
	var heldKey string
	if err := pool.QueryRow(ctx, `
		SELECT j.id, k.key FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND k.parent_task_id IS NOT NULL AND j.state = 'running'
		 ORDER BY j.id LIMIT 1`, run.ID).Scan(&heldJob, &heldKey); err != nil {
		t.Fatal(err)
	}
	holder := holdRow(t, pool, "river_job", heldJob)
	cancelled := make(chan error, 1)
	go func() { cancelled <- eng.Cancel(ctx, run.ID) }()
	endedCount := func() (n int, held bool) {
		mu.Lock()
		defer mu.Unlock()
		return len(ended), ended[heldKey]
	}
	waitFor(t, "the turns Cancel did not skip to end", 20*time.Second, func() bool {
		n, held := endedCount()
		return n == 2 && !held
	})
	waitFor(t, "Cancel to wait for the held turn job", 20*time.Second, func() bool { return waitsForALock(t, pool) })
	select {
	case err := <-cancelled:
		t.Fatalf("Cancel returned %v while a turn of the run ran", err)
	default:
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("Cancel = %v", err)
	}
	if n, held := endedCount(); n != 3 || !held {
		t.Fatalf("Cancel returned with %d of 3 turns ended (the held one: %v)", n, held)
	}
	if _, err := run.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Fatalf("Result = %v, want cancelled", err)
	}
}

// TestCancelInterruptsATurnWhoseJobWasHeldPastItsLockTimeout holds a
// running turn's job row while the run is cancelled, for longer than
// Cancel waits for one row. Cancel leaves the job for the moment, tries it
// again while it waits for the run's turns to end, and so interrupts the
// turn once the row is free: it returns with the turn ended, not with a
// *TurnsRunningError.
func TestCancelInterruptsATurnWhoseJobWasHeldPastItsLockTimeout(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	stuck := workflow.Define("held_past_timeout", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			started <- struct{}{}
			<-ctx.Done()
			ended <- struct{}{}
			return 0, ctx.Err()
		})
	})
	eng := startEngine(t, pool, testConfig(stuck))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := stuck.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	holder := holdRunningTurnJob(t, pool, run.ID)
	cancelled := make(chan error, 1)
	go func() { cancelled <- eng.Cancel(ctx, run.ID) }()
	// Cancel waits for the row, then gives up on it for the moment.
	waitFor(t, "Cancel to wait for the held turn job", 20*time.Second, func() bool { return waitsForALock(t, pool) })
	waitFor(t, "Cancel to stop waiting for the held turn job", 20*time.Second, func() bool { return !waitsForALock(t, pool) })
	select {
	case err := <-cancelled:
		t.Fatalf("Cancel returned %v while the run's turn ran", err)
	case <-ended:
		t.Fatal("the turn ended while its job row was held")
	default:
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("Cancel = %v; want the held turn interrupted once its row was free", err)
	}
	select {
	case <-ended:
	default:
		t.Fatal("Cancel returned before the turn ended")
	}
	if _, err := run.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Fatalf("Result = %v, want cancelled", err)
	}
}

// TestCancelTxInterruptsATurnWhoseJobWasHeld holds a running turn's job row
// while CancelTx cancels its run, so that CancelTx skips the job, and
// releases it once the caller's transaction has committed. CancelTx's
// caller cancels no skipped job itself; the engine does, so the turn's
// context ends, and a Retry then finds no turn running.
func TestCancelTxInterruptsATurnWhoseJobWasHeld(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	var calls atomic.Int32
	stuck := workflow.Define("held_by_cancel_tx", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			if calls.Add(1) > 1 {
				return 1, nil // the run retried
			}
			started <- struct{}{}
			<-ctx.Done()
			ended <- struct{}{}
			return 0, ctx.Err()
		})
	})
	eng := startEngine(t, pool, testConfig(stuck))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := stuck.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	holder := holdRunningTurnJob(t, pool, run.ID)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return eng.CancelTx(ctx, tx, run.ID) }); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the turn CancelTx skipped was never interrupted")
	}
	if _, err := run.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Fatalf("Result = %v, want cancelled", err)
	}
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatalf("Retry after the interrupted turn: %v", err)
	}
	if got, err := run.Result(ctx); err != nil || got != 1 {
		t.Fatalf("the retried run: %d, %v; want 1", got, err)
	}
}

// TestOrphanTurnHeldPastItsLockTimeoutIsStillInterrupted holds the job row
// of a running child's turn while its parent completes without awaiting
// it. The batch cancels the child, but its turn job stays held longer than
// one cancel waits for a row; the cancel is tried again, so that the
// child's turn is interrupted once its row is free.
func TestOrphanTurnHeldPastItsLockTimeoutIsStillInterrupted(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started, ended, finish := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	stuck := workflow.Define("held_orphan", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			started <- struct{}{}
			<-ctx.Done()
			ended <- struct{}{}
			return 0, ctx.Err()
		})
	})
	parent := workflow.Define("held_orphan_parent", func(t *workflow.Task, _ int) (int, error) {
		workflow.Go(t, "stuck", stuck, 0)
		if err := t.Delay("let it start", time.Millisecond); err != nil {
			return 0, err
		}
		return workflow.Step(t, "finish", func(ctx context.Context) (int, error) {
			select {
			case <-finish:
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	})
	eng := startEngine(t, pool, testConfig(parent, stuck))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	var job int64
	if err := pool.QueryRow(ctx, `
		SELECT j.id FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND k.key = 'stuck' AND j.state = 'running'`, run.ID).Scan(&job); err != nil {
		t.Fatal(err)
	}
	holder := holdRow(t, pool, "river_job", job)
	close(finish)
	if _, err := run.Result(ctx); err != nil {
		t.Fatalf("Result = %v", err)
	}
	// The cancel of the child's turn waits for the row, then gives up on
	// it for the moment.
	waitFor(t, "the child's cancel to wait for its turn job", 20*time.Second, func() bool { return waitsForALock(t, pool) })
	waitFor(t, "the child's cancel to stop waiting", 20*time.Second, func() bool { return !waitsForALock(t, pool) })
	select {
	case <-ended:
		t.Fatal("the child's turn ended while its job row was held")
	default:
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled child's turn kept running after its job row was free")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND key = 'stuck' AND status = 'cancelled'`, run.ID); n != 1 {
		t.Fatal("the child is not cancelled")
	}
}
