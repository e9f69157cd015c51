package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// The records of steps that concurrent turns finish together go in one
// statement. When that statement fails (a trigger rejects one record),
// each record is written alone: only the bad step fails, and the other
// turns complete on their first attempt.
func TestStepRecordFailureFailsOnlyItsStep(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	// While the test holds advisory lock 4242, every step record waits
	// in the trigger, so that the records handed in meanwhile queue up
	// and go in one statement once it is released. The second plug's
	// record waits on lock 4243 instead, so that the plugs' statements
	// end one after the other.
	execSQL(t, pool, `
		CREATE FUNCTION poison_step() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM pg_advisory_xact_lock_shared(CASE WHEN NEW.output::text LIKE '%second plug%' THEN 4243 ELSE 4242 END);
		    IF NEW.output::text LIKE '%poison%' THEN
		        RAISE EXCEPTION 'poisoned step of task %', NEW.task_id;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER poison_step BEFORE INSERT ON braid_steps FOR EACH ROW EXECUTE FUNCTION poison_step();`)
	ctx := ctxTimeout(t, 60*time.Second)
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(4242), pg_advisory_lock(4243)`); err != nil {
		t.Fatal(err)
	}
	waiting := func(lock, n int) func() bool {
		return func() bool {
			return count(t, pool, `
				SELECT count(*) FROM pg_locks
				 WHERE locktype = 'advisory' AND objid = $1 AND NOT granted
				   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, lock) == n
		}
	}

	echo := workflow.Define("echo", func(t *workflow.Task, in string) (string, error) {
		return workflow.Step(t, "echo", func(context.Context) (string, error) { return in, nil })
	}, workflow.WithMaxAttempts(1))
	rec := &logRecorder{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	cfg := testConfig(echo)
	cfg.Logger = slog.New(rec)
	eng := startEngine(t, pool, cfg)

	start := func(in string) *workflow.Run[string] {
		r, err := echo.Start(ctx, eng, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Two plugs keep both statements that write step records busy, one
	// each: the second starts once the first one's statement waits.
	plugs := []*workflow.Run[string]{start("plug")}
	waitFor(t, "the first plug's record to wait on its lock", 20*time.Second, waiting(4242, 1))
	plugs = append(plugs, start("second plug"))
	waitFor(t, "the second plug's record to wait on its lock", 20*time.Second, waiting(4243, 1))
	const n = 8
	runs := make([]*workflow.Run[string], n)
	for i := range runs {
		in := fmt.Sprintf("good %d", i)
		if i == 3 {
			in = "poison"
		}
		runs[i] = start(in)
	}
	waitFor(t, "eight records queued", 20*time.Second, func() bool { return workflow.StepsQueued(eng) == n })
	// The second plug's statement ends first: its statement slot takes
	// the eight records at once, and their statement waits on the first
	// lock beside the first plug's.
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock(4243)`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the eight records' statement to wait on the lock", 20*time.Second, waiting(4242, 2))
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}

	for i, r := range plugs {
		want := []string{"plug", "second plug"}[i]
		if out, err := r.Result(ctx); err != nil || out != want {
			t.Fatalf("plug %d: %q, %v; want it completed", i, out, err)
		}
	}
	for i, r := range runs {
		out, err := r.Result(ctx)
		if i == 3 {
			var re *workflow.RunError
			if !errors.As(err, &re) || re.Status != "failed" || !strings.Contains(re.Message, "poisoned step") {
				t.Fatalf("poisoned run: %v; want it failed with the trigger's error", err)
			}
			continue
		}
		if want := fmt.Sprintf("good %d", i); err != nil || out != want {
			t.Fatalf("run %d: %q, %v; want %q", i, out, err, want)
		}
	}
	if !rec.has("workflow: a statement recording steps failed; recording them one at a time steps=8") {
		t.Fatal("the eight records were not written by one statement that failed")
	}
	if got := count(t, pool, `
		SELECT count(*) FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
		 WHERE s.status = 'completed' AND t.status = 'completed' AND t.attempt = 1`); got != n-1+len(plugs) {
		t.Fatalf("%d steps of completed first attempts, want %d", got, n-1+len(plugs))
	}
}

// A task whose row another transaction holds locked does not hold up the
// steps of other tasks: their records are written while its own waits
// for the lock, and it is written once the lock is released. Two locked
// tasks, whose records wait one after the other, would otherwise hold
// every statement that writes step records.
func TestStepOfALockedTaskHoldsUpNoOtherStep(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	ctx := ctxTimeout(t, 60*time.Second)
	gates := map[int]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}
	blocked := workflow.Define("blocked", func(t *workflow.Task, i int) (int, error) {
		return workflow.Step(t, "one", func(context.Context) (int, error) {
			<-gates[i]
			return i, nil
		})
	})
	free := workflow.Define("free", func(t *workflow.Task, i int) (int, error) {
		for k := range 3 {
			if _, err := workflow.Step(t, "step", func(context.Context) (int, error) { return k, nil }); err != nil {
				return 0, err
			}
		}
		return i, nil
	})
	cfg := testConfig(blocked, free)
	cfg.OutcomeTimeout = 10 * time.Minute // no statement gives up on a lock
	eng := startEngine(t, pool, cfg)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var locked []*workflow.Run[int]
	for i := range 2 {
		run, err := blocked.Start(ctx, eng, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		locked = append(locked, run)
		waitFor(t, "a blocked run's turn to start", 20*time.Second, func() bool {
			info, err := eng.Run(ctx, run.ID)
			return err == nil && info.Status == "running"
		})
		if _, err := tx.Exec(ctx, `SELECT 1 FROM braid_tasks WHERE run_id = $1 FOR UPDATE`, run.ID); err != nil {
			t.Fatal(err)
		}
		close(gates[i]) // its record now waits for the lock
		waitFor(t, "the blocked step's record to wait on the task's row", 20*time.Second, func() bool {
			return count(t, pool, `
				SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				 WHERE a.datname = current_database() AND l.locktype = 'transactionid' AND NOT l.granted`) == i+1
		})
	}

	for i := range 10 {
		r, err := free.Start(ctx, eng, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := r.Result(ctx); err != nil || out != i {
			t.Fatalf("free run %d: %d, %v; want it completed while the other tasks are locked", i, out, err)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id WHERE t.workflow = 'blocked'`); got != 0 {
		t.Fatalf("%d steps of the locked tasks recorded while their rows were locked", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, run := range locked {
		if out, err := run.Result(ctx); err != nil || out != i {
			t.Fatalf("blocked run %d: %d, %v; want it completed once the lock was released", i, out, err)
		}
	}
}
