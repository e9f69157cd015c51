package workflow_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// barrier lets n callers through together, once all n have arrived, or
// when it times out.
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	all     chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, all: make(chan struct{})} }

func (b *barrier) wait(d time.Duration) {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(d):
	}
}

// logRecorder keeps the messages logged at warn level and above.
type logRecorder struct {
	slog.Handler
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	r.mu.Lock()
	msg := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		msg += " " + a.Key + "=" + a.Value.String()
		return true
	})
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	return r.Handler.Handle(ctx, rec)
}

func (r *logRecorder) has(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

// One turn's outcome fails inside a batch (a trigger rejects its output):
// the batch is recorded again one outcome at a time, the other turns of
// the batch complete on their first attempt, and only the bad turn fails.
func TestBatchFailureFailsOnlyTheBadTurn(t *testing.T) {
	t.Parallel()
	badTurnInBatch(t, "braid_tasks")
}

// As TestBatchFailureFailsOnlyTheBadTurn, but the statement that fails is
// a run's finish, which goes in the batch's last round trip with its
// COMMIT: nothing of the batch commits, and it is recorded again one
// outcome at a time.
func TestBatchFailureInItsLastRoundTripFailsOnlyTheBadTurn(t *testing.T) {
	t.Parallel()
	badTurnInBatch(t, "braid_runs")
}

// badTurnInBatch ends eight turns in one batch, one of whose outputs a
// trigger on table rejects.
func badTurnInBatch(t *testing.T, table string) {
	pool := testutil.Pool(t, testutil.URL(t))
	execSQL(t, pool, `
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.output::text LIKE '%poison%' THEN
		        RAISE EXCEPTION 'poisoned output of %', NEW.id;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER poison BEFORE UPDATE ON `+table+` FOR EACH ROW EXECUTE FUNCTION poison();`)

	const n = 8
	gate := newBarrier(n)
	echo := workflow.Define("echo", func(t *workflow.Task, in string) (string, error) {
		if t.Attempt() == 1 {
			gate.wait(20 * time.Second) // every first turn ends at once
		}
		return in, nil
	}, workflow.WithMaxAttempts(2))

	rec := &logRecorder{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg := testConfig(echo)
	cfg.Logger = slog.New(rec)
	cfg.MeterProvider = mp
	cfg.OutcomeLinger = 10 * time.Second // the batch waits for every turn
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	runs := make([]*workflow.Run[string], n)
	for i := range runs {
		in := "good"
		if i == 3 {
			in = "poison"
		}
		r, err := echo.Start(ctx, eng, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = r
	}
	for i, r := range runs {
		out, err := r.Result(ctx)
		if i == 3 {
			var re *workflow.RunError
			if !errors.As(err, &re) || re.Status != "failed" || !strings.Contains(re.Message, "poisoned output") {
				t.Fatalf("poisoned run: %v; want it failed with the trigger's error", err)
			}
			continue
		}
		if err != nil || out != "good" {
			t.Fatalf("run %d: %q, %v; want it completed", i, out, err)
		}
	}
	if !rec.has("workflow: a batch of turn outcomes failed; recording them one at a time outcomes=8") {
		t.Fatal("the eight outcomes were not committed as one batch that failed")
	}
	if got := count(t, pool, `
		SELECT count(*) FROM braid_tasks t JOIN river_job j ON braid_turn_task(j.unique_key, j.args) = t.id
		 WHERE t.status = 'completed' AND t.attempt = 1 AND j.state = 'completed' AND j.attempt = 1`); got != n-1 {
		t.Fatalf("%d good turns completed on their first attempt, want %d", got, n-1)
	}
	// The metrics show the failed batch of eight, and the good outcomes
	// committed again one at a time.
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	m := collectEngineMetrics(t, reader)
	failed := m.sizes[workflow.MetricBatchSize+"{failed}"]
	if largest, ok := failed.Max.Value(); !ok || largest != n {
		t.Errorf("the largest failed batch held %d outcomes (recorded: %v), want %d", largest, ok, n)
	}
	if committed := m.sizes[workflow.MetricBatchSize+"{committed}"]; committed.Sum < n-1 {
		t.Errorf("committed batches held %d outcomes, want at least %d", committed.Sum, n-1)
	}
	// The runs are counted once each, when their finish commits: the
	// failed batch counted none of them.
	if got := m.counters[workflow.MetricRunsCompleted]; got != n-1 {
		t.Errorf("%s counted %d runs, want %d", workflow.MetricRunsCompleted, got, n-1)
	}
	if got := m.counters[workflow.MetricRunsFailed]; got != 1 {
		t.Errorf("%s counted %d runs, want 1", workflow.MetricRunsFailed, got)
	}
}

// A turn writes nothing as it starts; while it runs, the inspection shows
// its task and its run running, read from its turn job.
func TestTaskShowsRunningWhileItsTurnRuns(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := workflow.Define("slow", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			once.Do(func() { close(started) })
			<-release
			return 1, nil
		})
	})
	eng := startEngine(t, pool, testConfig(slow))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := slow.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "pending" && info.Status != "running" {
		t.Fatalf("a new run is %s", info.Status)
	}
	<-started
	info, err = eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "running" || info.Tasks[0].Status != "running" || info.Tasks[0].Attempt != 1 || info.Tasks[0].StartedAt == nil {
		t.Fatalf("while its turn runs: run %s, task %s at attempt %d (started %v); want both running at attempt 1",
			info.Status, info.Tasks[0].Status, info.Tasks[0].Attempt, info.Tasks[0].StartedAt)
	}
	list, err := eng.ListRuns(ctx, workflow.RunFilter{Status: "running"})
	if err != nil || len(list) != 1 || list[0].ID != run.ID {
		t.Fatalf("listing running runs: %v, %v; want the one run", list, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE status = 'running'`); got != 0 {
		t.Fatalf("%d tasks stored as running; a turn writes nothing as it starts", got)
	}
	close(release)
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	info, err = eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "completed" || info.Tasks[0].Status != "completed" || info.Tasks[0].Turns != 1 {
		t.Fatalf("after the turn: run %s, task %s after %d turns; want completed after 1", info.Status, info.Tasks[0].Status, info.Tasks[0].Turns)
	}
}

// Children that finish in the same batches count off their parent's join
// together; whoever brings the count to zero inserts the parent's
// continuation, exactly once.
func TestFanInInsertsOneContinuation(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	leaf := workflow.Define("leaf", func(t *workflow.Task, i int) (int, error) { return i, nil })
	sum := workflow.Define("sum", func(t *workflow.Task, n int) (int, error) {
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		outs, err := workflow.Map(t, "leaves", leaf, items)
		if err != nil {
			return 0, err
		}
		total := 0
		for _, o := range outs {
			total += o
		}
		return total, nil
	})
	eng := startEngine(t, pool, testConfig(leaf, sum))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := sum.Start(ctx, eng, 500, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != 500*499/2 {
		t.Fatalf("sum: %d, %v", out, err)
	}
	if got := count(t, pool, `
		SELECT count(*) FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
		 WHERE t.key = 'root'`); got != 2 {
		t.Fatalf("the parent had %d turns, want 2 (its first and one continuation)", got)
	}
	if got := count(t, pool, `SELECT turns FROM braid_tasks WHERE key = 'root'`); got != 2 {
		t.Fatalf("the parent counts %d turns, want 2", got)
	}
	// Turns that batches claimed were inserted pending: none is left so,
	// nor left behind in any state but completed.
	if got := count(t, pool, `SELECT count(*) FROM river_job WHERE state <> 'completed'`); got != 0 {
		t.Fatalf("%d turn jobs are not completed once the run is", got)
	}
}

// StartMany starts many runs in one transaction; a run whose idempotency
// key exists, before or earlier in the same call, is returned as existing.
func TestStartManyStartsEachRunOnce(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	double := workflow.Define("double", func(t *workflow.Task, i int) (int, error) { return 2 * i, nil })
	eng := startEngine(t, pool, testConfig(double))
	ctx := ctxTimeout(t, 30*time.Second)
	first, err := double.Start(ctx, eng, 100, &workflow.StartOpts{IdempotencyKey: "k-100"})
	if err != nil {
		t.Fatal(err)
	}
	params := []workflow.StartManyParams[int]{
		{Input: 1}, {Input: 2}, {Input: 3, Opts: &workflow.StartOpts{IdempotencyKey: "k-3"}},
		{Input: 4, Opts: &workflow.StartOpts{IdempotencyKey: "k-3"}},
		{Input: 5, Opts: &workflow.StartOpts{IdempotencyKey: "k-100"}},
	}
	runs, err := double.StartMany(ctx, eng, params)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		existing bool
		out      int
	}{{false, 2}, {false, 4}, {false, 6}, {true, 6}, {true, 200}}
	for i, r := range runs {
		out, err := r.Result(ctx)
		if err != nil || out != want[i].out || r.Existing != want[i].existing {
			t.Errorf("run %d: output %d, existing %v, %v; want %d, existing %v", i, out, r.Existing, err, want[i].out, want[i].existing)
		}
	}
	if runs[3].ID != runs[2].ID || runs[4].ID != first.ID {
		t.Fatal("a run with an existing idempotency key was not the existing run")
	}
	if got := count(t, pool, `SELECT count(*) FROM braid_runs`); got != 4 {
		t.Fatalf("%d runs, want 4", got)
	}
	if _, err := double.StartMany(ctx, eng, []workflow.StartManyParams[int]{{Input: 1, Opts: &workflow.StartOpts{ID: "not-a-uuid"}}}); err == nil {
		t.Fatal("a bad run ID was accepted")
	}
}

// Two batches commit at once (Config.OutcomeFlushes, 2 by default): while
// one batch waits on a lock that another transaction holds, the next batch
// of the same process commits beside it.
func TestBatchCommitsBesideABlockedOne(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	const gate = 4242
	execSQL(t, pool, `
		CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM pg_advisory_xact_lock_shared(4242);
		    RETURN NEW;
		END $$;
		CREATE TRIGGER gate BEFORE UPDATE ON braid_tasks FOR EACH ROW
		  WHEN (NEW.output::text LIKE '%slow%') EXECUTE FUNCTION gate();`)
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, gate); err != nil {
		t.Fatal(err)
	}

	echo := workflow.Define("echo", func(t *workflow.Task, in string) (string, error) { return in, nil })
	eng := startEngine(t, pool, testConfig(echo))
	slow, err := echo.Start(ctx, eng, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The slow run's batch has recorded nothing yet: it waits on the gate.
	// (pg_locks shows every database's locks: other tests wait on 4242 in
	// theirs.)
	for count(t, pool, `
		SELECT count(*) FROM pg_locks
		 WHERE locktype = 'advisory' AND objid = $1 AND NOT granted
		   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, gate) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the slow run's batch never reached the gate")
		}
		time.Sleep(10 * time.Millisecond)
	}

	fast, err := echo.Start(ctx, eng, "fast", nil)
	if err != nil {
		t.Fatal(err)
	}
	fastCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if out, err := fast.Result(fastCtx); err != nil || out != "fast" {
		t.Fatalf("fast run: %q, %v; want it completed while the other batch waits", out, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'completed'`, slow.ID); n != 0 {
		t.Fatal("the slow run completed before its gate opened")
	}

	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gate); err != nil {
		t.Fatal(err)
	}
	if out, err := slow.Result(ctx); err != nil || out != "slow" {
		t.Fatalf("slow run: %q, %v; want it completed once the gate opened", out, err)
	}
}

// NewEngine refuses negative batch knobs, naming the knob.
func TestBatchKnobsMustNotBeNegative(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	for _, tc := range []struct {
		set  func(*workflow.Config)
		want string
	}{
		{func(c *workflow.Config) { c.OutcomeBatchSize = -1 }, "OutcomeBatchSize -1"},
		{func(c *workflow.Config) { c.OutcomeLinger = -time.Millisecond }, "OutcomeLinger -1ms"},
		{func(c *workflow.Config) { c.OutcomeFlushes = -1 }, "OutcomeFlushes -1 is negative"},
		{func(c *workflow.Config) { c.OutcomeTimeout = -time.Second }, "OutcomeTimeout -1s is negative"},
	} {
		cfg := testConfig()
		tc.set(cfg)
		if _, err := workflow.NewEngine(pool, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewEngine: %v; want an error naming %q", err, tc.want)
		}
	}
}

// Two batches, each holding a task and settling the child of the other's
// task, lock the parents they settle in the one lock order, and so never
// deadlock: one batch ends P's turn and Q's child, the other Q's turn and
// P's child, at the same moment, in two engines. Each engine works the
// queue of its own batch's workflows, so that each batch holds just those
// two outcomes.
func TestCrossedBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	gate := newBarrier(4)
	child := func(name, queue string) *workflow.Workflow[int, int] {
		return workflow.Define(name, func(t *workflow.Task, n int) (int, error) {
			gate.wait(20 * time.Second)
			return n, nil
		}, workflow.WithQueue(queue))
	}
	// A parent starts its child, pauses, and then, as its child ends,
	// waits for it: its turn after the pause ends with the child's turn.
	parent := func(name, queue string, c *workflow.Workflow[int, int]) *workflow.Workflow[int, int] {
		return workflow.Define(name, func(t *workflow.Task, n int) (int, error) {
			f := workflow.Go(t, "child", c, n)
			if err := t.Delay("pause", 200*time.Millisecond); err != nil {
				return 0, err
			}
			gate.wait(20 * time.Second)
			return f.Get()
		}, workflow.WithQueue(queue))
	}
	pc, qc := child("cross_pc", "two"), child("cross_qc", "one")
	p, q := parent("cross_p", "one", pc), parent("cross_q", "two", qc)
	root := workflow.Define("cross_root", func(t *workflow.Task, _ struct{}) (int, error) {
		fp, fq := workflow.Go(t, "p", p, 1), workflow.Go(t, "q", q, 2)
		a, err := fp.Get()
		if err != nil {
			return 0, err
		}
		b, err := fq.Get()
		return a + b, err
	}, workflow.WithQueue("one"))

	var recs []*logRecorder
	engine := func(queue string) *workflow.Engine {
		rec := &logRecorder{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
		recs = append(recs, rec)
		cfg := testConfig(root, p, q, pc, qc)
		cfg.Queue.Queues = map[string]river.QueueConfig{queue: {MaxWorkers: 10}}
		cfg.Logger = slog.New(rec)
		cfg.OutcomeLinger = 10 * time.Second // a batch waits for both its turns
		return startEngine(t, pool, cfg)
	}
	one := engine("one")
	engine("two")

	run, err := root.Start(ctx, one, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := run.Result(ctx); err != nil || got != 3 {
		t.Fatalf("root: %d, %v; want 3", got, err)
	}
	for i, rec := range recs {
		if rec.has("workflow: a batch of turn outcomes failed") {
			t.Errorf("engine %d: a batch failed (deadlock?)", i+1)
		}
	}
}

// A turn that an outcome makes runnable starts in the outcome's process
// only when that process works the turn's queue: a child on a queue that
// only another process works runs there, as River's fetch would route it.
func TestContinuationsKeepToTheirQueue(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	leaf := workflow.Define("routed_leaf", func(t *workflow.Task, n int) (int, error) { return n + 1, nil },
		workflow.WithQueue("two"))
	top := workflow.Define("routed_top", func(t *workflow.Task, n int) (int, error) {
		return workflow.Go(t, "leaf", leaf, n).Get()
	}, workflow.WithQueue("one"))
	engine := func(queue string) *workflow.Engine {
		cfg := testConfig(top, leaf)
		cfg.Queue.Queues = map[string]river.QueueConfig{queue: {MaxWorkers: 5}}
		cfg.Queue.ID = "engine-" + queue
		return startEngine(t, pool, cfg)
	}
	one := engine("one")
	engine("two")

	run, err := top.Start(ctx, one, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := run.Result(ctx); err != nil || got != 2 {
		t.Fatalf("run: %d, %v; want 2", got, err)
	}
	rows, err := pool.Query(ctx, `
		SELECT t.workflow, j.queue, j.attempted_by FROM river_job j
		  JOIN braid_tasks t ON t.id = braid_turn_task(j.unique_key, j.args)
		 ORDER BY j.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var workflow, queue string
		var by []string
		if err := rows.Scan(&workflow, &queue, &by); err != nil {
			t.Fatal(err)
		}
		for _, b := range by {
			if b != "engine-"+queue {
				t.Errorf("a turn of %s on queue %s was attempted by %s", workflow, queue, b)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// A worker slot of one queue never runs a turn of another, so that each
// queue runs at most its MaxWorkers turns at once: the children of a
// parent on queue "one", on queue "limited" (one worker), run one at a
// time, though the parent's worker could have run one of them next.
func TestContinuationsKeepToEachQueuesMaxWorkers(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	var mu sync.Mutex
	inFlight, peak := 0, 0
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	child := workflow.Define("limited_child", func(t *workflow.Task, n int) (int, error) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		started <- struct{}{}
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return n, nil
	}, workflow.WithQueue("limited"))
	parent := workflow.Define("limited_parent", func(t *workflow.Task, _ int) (int, error) {
		outs, err := workflow.Map(t, "child", child, []int{1, 2, 3})
		return len(outs), err
	}, workflow.WithQueue("one"))
	cfg := testConfig(parent, child)
	cfg.Queue.Queues = map[string]river.QueueConfig{"one": {MaxWorkers: 5}, "limited": {MaxWorkers: 1}}
	eng := startEngine(t, pool, cfg)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	// A second child would start within River's fetch cooldown of the
	// first; give it ten times as long.
	time.Sleep(500 * time.Millisecond)
	close(release)
	if got, err := run.Result(ctx); err != nil || got != 3 {
		t.Fatalf("run: %d, %v; want 3", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if peak != 1 {
		t.Fatalf("%d turns of queue \"limited\" ran at once; want at most its MaxWorkers, 1", peak)
	}
}

// A queue that River has paused runs no new turn: neither a continuation
// nor a turn waiting in it is claimed by a worker that finishes a turn,
// as River's fetch takes none. Once resumed, they all run.
func TestPausedQueueRunsNoNextTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	gateStarted, gate := make(chan struct{}), make(chan struct{})
	gated := workflow.Define("paused_gated", func(t *workflow.Task, _ int) (int, error) {
		close(gateStarted)
		<-gate
		return 1, nil
	})
	chained := workflow.Define("paused_chain", func(t *workflow.Task, n int) (int, error) {
		return workflow.Go(t, "next", gated, n).Get()
	})
	noop := workflow.Define("paused_noop", func(t *workflow.Task, n int) (int, error) { return n, nil })
	cfg := testConfig(gated, chained, noop)
	cfg.Queue.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}
	eng := startEngine(t, pool, cfg)
	client := eng.Queue().River()
	paused, cancelSub := client.Subscribe(river.EventKindQueuePaused)
	defer cancelSub()

	chain, err := chained.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-gateStarted
	if err := client.QueuePause(ctx, river.QueueDefault, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("River's producer never reported the queue paused")
	}
	var waiting []*workflow.Run[int]
	for i := range 3 {
		r, err := noop.Start(ctx, eng, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, r)
	}
	close(gate)
	// The gated child completes; its parent's continuation and the waiting
	// runs would be the next turns of its worker.
	waitFor(t, "the gated child's turn to finish", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_tasks WHERE workflow = 'paused_gated' AND status = 'completed'`) == 1
	})
	time.Sleep(500 * time.Millisecond)
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE state IN ('running', 'completed') AND attempted_at > (
		SELECT finished_at FROM braid_tasks WHERE workflow = 'paused_gated')`); n != 0 {
		t.Fatalf("%d turns started in the paused queue after its last turn ended; want none", n)
	}
	if err := client.QueueResume(ctx, river.QueueDefault, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := chain.Result(ctx); err != nil || got != 1 {
		t.Fatalf("the chain after resume: %d, %v; want 1", got, err)
	}
	for i, r := range waiting {
		if got, err := r.Result(ctx); err != nil || got != i {
			t.Fatalf("a waiting run after resume: %d, %v; want %d", got, err, i)
		}
	}
}

// A worker whose turn failed, or snoozed a step, goes on to a next turn
// only once River has recorded that outcome: River records it as the
// fetched turn's worker returns, so a next turn run first would leave the
// job running, with no heartbeat, for as long as that turn ran (and the
// rescuer would then spend an attempt on it).
func TestAFailedTurnIsRecordedBeforeItsWorkerTakesAnotherTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	failing := make(chan struct{})
	otherStarted := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	other := workflow.Define("held_other", func(t *workflow.Task, _ int) (int, error) {
		once.Do(func() { close(otherStarted) })
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		return 1, nil
	})
	flaky := workflow.Define("flaky_first", func(t *workflow.Task, _ int) (int, error) {
		if t.Attempt() == 1 {
			<-failing
			return 0, errors.New("first attempt fails")
		}
		return 2, nil
	})
	cfg := testConfig(flaky, other)
	cfg.Queue.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}
	eng := startEngine(t, pool, cfg)

	first, err := flaky.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Once the failing turn runs, the other run's turn waits in the queue,
	// available to the worker as soon as it is free.
	waitFor(t, "the failing turn to run", 10*time.Second, func() bool {
		var running bool
		err := pool.QueryRow(ctx, `SELECT count(*) = 1 FROM river_job WHERE state = 'running'`).Scan(&running)
		return err == nil && running
	})
	second, err := other.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	close(failing)
	select {
	case <-otherStarted:
	case <-ctx.Done():
		t.Fatal("the other turn never started")
	}
	// The other turn holds the only worker. The failed attempt must be on
	// record meanwhile: its job is no longer running.
	var state string
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := pool.QueryRow(ctx, `
			SELECT j.state FROM river_job j JOIN braid_tasks t ON t.id = braid_turn_task(j.unique_key, j.args)
			 WHERE t.run_id = $1 ORDER BY j.id LIMIT 1`, first.ID).Scan(&state)
		if err != nil {
			t.Fatal(err)
		}
		if state != "running" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	if state == "running" {
		t.Fatalf("the failed attempt's job was still running while its worker ran another turn")
	}
	if got, err := first.Result(ctx); err != nil || got != 2 {
		t.Fatalf("the flaky run: %d, %v; want 2 on its second attempt", got, err)
	}
	if got, err := second.Result(ctx); err != nil || got != 1 {
		t.Fatalf("the other run: %d, %v; want 1", got, err)
	}
}

// A claimed turn that Stop cancels before it has read its task is put
// back without spending its attempt, as one cancelled while it runs is:
// Stop's cancel is not the task's failure.
func TestAClaimedTurnStoppedBeforeItsReadKeepsItsAttempt(t *testing.T) {
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	noop := workflow.Define("stopped_noop", func(t *workflow.Task, _ int) (int, error) { return 1, nil })
	cfg := testConfig(noop)
	cfg.Queue.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}
	// The first run's turn is held until the second's waits in the queue,
	// so that its batch claims the second's turn for its worker.
	eng := newEngine(t, pool, cfg)
	first, err := noop.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := noop.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	claimed := make(chan int64, 1)
	var once sync.Once
	workflow.SetHookBeforeContinuation(func(row *rivertype.JobRow) {
		if !strings.Contains(string(row.EncodedArgs), "stopped_noop") {
			return
		}
		once.Do(func() {
			workflow.HardStopTurns(eng)
			claimed <- row.ID
		})
	})
	t.Cleanup(func() { workflow.SetHookBeforeContinuation(nil) })
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Result(ctx); err != nil {
		t.Fatal(err)
	}
	var secondJob int64
	select {
	case secondJob = <-claimed:
	case <-ctx.Done():
		t.Fatal("the first turn's worker claimed no next turn")
	}
	waitFor(t, "the claimed turn to end", 20*time.Second, func() bool {
		var state string
		err := pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, secondJob).Scan(&state)
		return err == nil && state != "running"
	})
	var state string
	var errs int
	if err := pool.QueryRow(ctx, `SELECT state, coalesce(array_length(errors, 1), 0) FROM river_job WHERE id = $1`, secondJob).Scan(&state, &errs); err != nil {
		t.Fatal(err)
	}
	if errs != 0 || (state != "scheduled" && state != "available") {
		t.Fatalf("the stopped turn's job is %s with %d errors; want it put back without an error", state, errs)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM braid_runs WHERE id = $1`, second.ID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status == "failed" || status == "cancelled" {
		t.Fatalf("the stopped turn's run is %s; want it left to run", status)
	}
}

// A turn whose outcome deadline passes while the batch that gave it a next
// turn has yet to commit still runs that turn: once a batch has given the
// worker its next turn, the worker waits for the batch, so the claimed turn
// is never left running with no worker (for the rescuer to take, on
// another attempt).
func TestATurnWaitsForTheBatchThatGaveItANextTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 90*time.Second)
	// y's run, once finished, holds its batch's commit until the test
	// lets it go.
	execSQL(t, pool, `
		CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM pg_advisory_xact_lock_shared(4242);
		    RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER hold_commit AFTER UPDATE ON braid_runs DEFERRABLE INITIALLY DEFERRED
		    FOR EACH ROW WHEN (NEW.input::text = '"y"' AND NEW.status = 'completed') EXECUTE FUNCTION hold_commit();`)
	gateX, gateY, gateW := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(gateW)
	gated := workflow.Define("gated", func(t *workflow.Task, which string) (string, error) {
		gate := map[string]chan struct{}{"x": gateX, "y": gateY, "w": gateW}[which]
		select {
		case <-gate:
		case <-time.After(30 * time.Second):
		}
		return which, nil
	})
	later := workflow.Define("later", func(t *workflow.Task, _ int) (int, error) { return 1, nil })
	const deadline = 4 * time.Second
	cfg := testConfig(gated, later)
	cfg.Queue.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}
	cfg.OutcomeTimeout = deadline
	cfg.OutcomeFlushes = 1
	eng := startEngine(t, pool, cfg)

	x, err := gated.Start(ctx, eng, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	y, err := gated.Start(ctx, eng, "y", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both turns to run", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE state = 'running'`) == 2
	})
	blocked := func(what string, pid int) {
		waitFor(t, what, 20*time.Second, func() bool {
			return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid) > 0
		})
	}
	// x's batch waits on x's run row; y's commit, on the lock.
	holdX, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holdX.Rollback(context.Background()) })
	var pidX int
	if err := holdX.QueryRow(ctx, `SELECT pg_backend_pid() FROM braid_runs WHERE id = $1 FOR UPDATE`, x.ID).Scan(&pidX); err != nil {
		t.Fatal(err)
	}
	holdY, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holdY.Release()
	var pidY int
	if err := holdY.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(4242)) l`).Scan(&pidY); err != nil {
		t.Fatal(err)
	}
	// Two turns wait in the queue, while both workers are busy: x's batch
	// claims the first for x's worker (which it keeps busy), y's batch the
	// second for y's.
	if _, err := gated.Start(ctx, eng, "w", nil); err != nil {
		t.Fatal(err)
	}
	next, err := later.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	close(gateX)
	blocked("x's batch to wait for x's run", pidX)
	// y hands in its outcome now; the only flush is x's, so y's batch
	// begins when x's commits, and its deadline comes after y's.
	close(gateY)
	handedIn := time.Now()
	time.Sleep(deadline / 2)
	if err := holdX.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	blocked("y's batch to wait to commit", pidY)
	// y's outcome deadline passes; its batch's does not.
	time.Sleep(time.Until(handedIn.Add(deadline + deadline/4)))
	if _, err := holdY.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	if got, err := next.Result(ctx); err != nil || got != 1 {
		t.Fatalf("the next run: %d, %v", got, err)
	}
	var attempt int
	if err := pool.QueryRow(ctx, `
		SELECT j.attempt FROM river_job j JOIN braid_tasks t ON t.id = braid_turn_task(j.unique_key, j.args)
		 WHERE t.run_id = $1`, next.ID).Scan(&attempt); err != nil {
		t.Fatal(err)
	}
	if attempt != 1 {
		t.Fatalf("the next run's turn completed on attempt %d; want 1: it was left running and rescued", attempt)
	}
	for _, r := range []*workflow.Run[string]{x, y} {
		if _, err := r.Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
