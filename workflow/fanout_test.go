package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestMapOverAThousandItems(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	square := workflow.Define("square", func(t *workflow.Task, n int) (int, error) {
		if n == -1 {
			return 0, errors.New("negative one is not welcome")
		}
		return n * n, nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	parent := workflow.Define("squares", func(t *workflow.Task, items []int) ([]int, error) {
		return workflow.Map(t, "square", square, items)
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(parent, square)
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 2*time.Minute)

	items := make([]int, 1000)
	for i := range items {
		items[i] = 1000 - i
	}
	run, err := parent.Start(ctx, eng, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(items) {
		t.Fatalf("%d outputs, want %d", len(out), len(items))
	}
	for i, v := range out {
		if v != items[i]*items[i] {
			t.Fatalf("output %d = %d, want %d: outputs must be in input order", i, v, items[i]*items[i])
		}
	}
	// The parent continued exactly once: two turns in all.
	if n := count(t, pool, `SELECT turns FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL`, run.ID); n != 2 {
		t.Fatalf("parent had %d turns, want 2 (start and one continuation)", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NOT NULL AND status = 'completed'`, run.ID); n != 1000 {
		t.Fatalf("%d completed children, want 1000", n)
	}

	// A permanently failing child makes Map return an error naming it.
	run, err = parent.Start(ctx, eng, []int{1, 2, -1, 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	var re *workflow.RunError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a RunError", err)
	}
	want := `child "square/2" (workflow "square") failed: negative one is not welcome`
	if re.Message != want {
		t.Fatalf("run error %q, want %q", re.Message, want)
	}
}

func TestGoAndGet(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	greet := workflow.Define("greet", func(t *workflow.Task, name string) (string, error) { return "hello " + name, nil })
	parent := workflow.Define("greet_two", func(t *workflow.Task, _ struct{}) ([]string, error) {
		a := workflow.Go(t, "ann", greet, "ann")
		b := workflow.Go(t, "bob", greet, "bob")
		x, err := a.Get()
		if err != nil {
			return nil, err
		}
		y, err := b.Get()
		if err != nil {
			return nil, err
		}
		return []string{x, y}, nil
	})
	eng := startEngine(t, pool, testConfig(parent, greet))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != "[hello ann hello bob]" {
		t.Fatalf("output %v", out)
	}
}

// TestJoinRace finishes 200 children at the same instant, 20 times, and
// checks that the parent gets exactly one continuation each time.
func TestJoinRace(t *testing.T) {
	t.Parallel()
	const children, rounds = 200, 20
	pool := testutil.Pool(t, testutil.URL(t))
	var (
		mu      sync.Mutex
		arrived int
		release = make(chan struct{})
	)
	reset := func() {
		mu.Lock()
		arrived = 0
		release = make(chan struct{})
		mu.Unlock()
	}
	child := workflow.Define("racer", func(t *workflow.Task, i int) (int, error) {
		mu.Lock()
		arrived++
		ch := release
		if arrived == children {
			close(release)
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-t.Context().Done():
			return 0, t.Context().Err()
		}
		return i, nil
	})
	parent := workflow.Define("race", func(t *workflow.Task, n int) (int, error) {
		out, err := workflow.Map(t, "racer", child, make([]int, n))
		return len(out), err
	})
	cfg := testConfig(parent, child)
	cfg.Queue.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: children + 10}}
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 5*time.Minute)
	for round := range rounds {
		reset()
		run, err := parent.Start(ctx, eng, children, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := run.Result(ctx); err != nil || n != children {
			t.Fatalf("round %d: %d, %v", round, n, err)
		}
		if n := count(t, pool, `SELECT turns FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL`, run.ID); n != 2 {
			t.Fatalf("round %d: parent had %d turns, want exactly 2", round, n)
		}
		if n := count(t, pool, `SELECT count(*) FROM river_job WHERE braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL)`, run.ID); n != 2 {
			t.Fatalf("round %d: parent had %d turn jobs, want exactly 2", round, n)
		}
	}
}

func TestCancelStopsPendingDelaysAndChildren(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	sleeper := workflow.Define("sleeper", func(t *workflow.Task, i int) (int, error) {
		if err := t.Delay("nap", 2*time.Second); err != nil {
			return 0, err
		}
		_, err := workflow.Step(t, "woke", func(ctx context.Context) (int, error) { return 0, recordStep(pool, t, "child woke") })
		return i, err
	})
	parent := workflow.Define("sleepers", func(t *workflow.Task, n int) (int, error) {
		done := workflow.Go(t, "one", sleeper, 1)
		if err := t.Delay("own nap", 2*time.Second); err != nil {
			return 0, err
		}
		_, err := workflow.Step(t, "woke", func(ctx context.Context) (int, error) { return 0, recordStep(pool, t, "parent woke") })
		if err != nil {
			return 0, err
		}
		return done.Get()
	})
	eng := startEngine(t, pool, testConfig(parent, sleeper))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until both the parent and the child sleep.
	deadline := time.Now().Add(10 * time.Second)
	for count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'waiting'`) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the delays never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Fatalf("Result after Cancel: %v, want ErrCancelled", err)
	}
	if err := eng.Cancel(ctx, run.ID); !errors.Is(err, workflow.ErrRunFinished) {
		t.Fatalf("second Cancel: %v, want ErrRunFinished", err)
	}
	time.Sleep(3 * time.Second) // past both delays
	if n := count(t, pool, `SELECT count(*) FROM ledger`); n != 0 {
		t.Fatalf("%d steps ran after Cancel", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE status <> 'cancelled'`); n != 0 {
		t.Fatalf("%d tasks not cancelled", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status <> 'cancelled'`); n != 0 {
		t.Fatalf("%d delays not cancelled", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled')`); n != 0 {
		t.Fatalf("%d live jobs after Cancel", n)
	}
}

func TestRetryResumesAtTheFailedStep(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	var (
		mu    sync.Mutex
		fault = true
	)
	wf := workflow.Define("fragile", func(t *workflow.Task, _ struct{}) (string, error) {
		for _, name := range []string{"one", "two", "three"} {
			_, err := workflow.Step(t, name, func(ctx context.Context) (int, error) {
				if err := recordStep(pool, t, name); err != nil {
					return 0, err
				}
				mu.Lock()
				defer mu.Unlock()
				if name == "three" && fault {
					return 0, errors.New("step three is broken")
				}
				return 1, nil
			})
			if err != nil {
				return "", err
			}
		}
		return "done", nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("run with a broken step succeeded")
	}
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err) // fault still on: a retry is allowed on a failed run
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("retried run with a broken step succeeded")
	}
	mu.Lock()
	fault = false
	mu.Unlock()
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "done" {
		t.Fatalf("after Retry: %q, %v", out, err)
	}
	for step, want := range map[string]int{"one": 1, "two": 1, "three": 5} {
		if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step = $1`, step); n != want {
			t.Errorf("step %s ran %d times, want %d", step, n, want)
		}
	}
	if err := eng.Retry(ctx, run.ID); !errors.Is(err, workflow.ErrRunNotRetryable) {
		t.Fatalf("Retry of a completed run: %v", err)
	}
}

// TestOnlyANewTasksFirstTurnIsMarkedFirst checks the tag by which a
// turn's load skips reading children: the first turn of each new task
// (the run's root, a child) carries it, and the parent's turn after its
// children finished does not, so that it reads them and returns their
// outputs.
func TestOnlyANewTasksFirstTurnIsMarkedFirst(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	double := workflow.Define("marked_double", func(t *workflow.Task, n int) (int, error) { return 2 * n, nil })
	parent := workflow.Define("marked_parent", func(t *workflow.Task, n int) (int, error) {
		a, err := workflow.Go(t, "a", double, n).Get()
		if err != nil {
			return 0, err
		}
		b, err := workflow.Go(t, "b", double, a).Get()
		return a + b, err
	})
	eng := startEngine(t, pool, testConfig(parent, double))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 30 {
		t.Fatalf("Result = %v, %v; want 30", out, err)
	}
	rows, err := pool.Query(ctx, `
		SELECT k.key, 'first_turn' = ANY(j.tags)
		  FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 ORDER BY j.id`, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var key string
		var first bool
		if err := rows.Scan(&key, &first); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%v", key, first))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"root:true", "a:true", "root:false", "b:true", "root:false"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("turn jobs (task key: marked first) = %v, want %v", got, want)
	}
}

// A child whose failure its parent handled (the parent saw the ChildError,
// made amends and completed) stays failed when Retry restarts the run: its
// parent's code has gone on without it, and nothing would await it again.
func TestRetryLeavesAFailureThatACompletedParentHandled(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var charged, amended atomic.Int32
	var rootFails atomic.Bool
	rootFails.Store(true)
	charge := workflow.Define("retry_charge", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "charge", func(context.Context) (int, error) {
			charged.Add(1)
			return 0, errors.New("card declined")
		})
	}, workflow.WithMaxAttempts(1))
	order := workflow.Define("retry_order", func(t *workflow.Task, _ int) (string, error) {
		if _, err := workflow.Go(t, "charge", charge, 0).Get(); err != nil {
			var ce *workflow.ChildError
			if !errors.As(err, &ce) {
				return "", err
			}
			return workflow.Step(t, "amend", func(context.Context) (string, error) {
				amended.Add(1)
				return "amended", nil
			})
		}
		return "charged", nil
	})
	top := workflow.Define("retry_top", func(t *workflow.Task, _ int) (string, error) {
		out, err := workflow.Go(t, "order", order, 0).Get()
		if err != nil {
			return "", err
		}
		if _, err := workflow.Step(t, "ship", func(context.Context) (int, error) {
			if rootFails.Load() {
				return 0, errors.New("no courier")
			}
			return 1, nil
		}); err != nil {
			return "", err
		}
		return out, nil
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(top, order, charge))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := top.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the run succeeded; want it failed at its last step")
	}
	rootFails.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "amended" {
		t.Fatalf("after Retry: %q, %v; want the order's recorded output", out, err)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM braid_tasks WHERE run_id = $1 AND workflow = 'retry_charge'`, run.ID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "failed" {
		t.Errorf("the handled child is %s after the retried run completed; want it left failed", status)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status NOT IN ('completed', 'failed', 'cancelled', 'skipped')`, run.ID); n != 0 {
		t.Errorf("%d tasks of the completed run are unfinished", n)
	}
	if c, a := charged.Load(), amended.Load(); c != 1 || a != 1 {
		t.Errorf("the charge ran %d times and the amends %d; want each once", c, a)
	}
}

// A Map that returns an error (here its third item's input is over the
// payload cap) starts none of its children, though the code handles the
// error and the turn goes on: the two items before the bad one do not run,
// and the parent does not wait for them.
func TestMapThatFailsStartsNoChild(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	item := workflow.Define("map_fail_item", func(t *workflow.Task, s string) (int, error) {
		return len(s), recordStep(pool, t, "item "+s[:1])
	})
	parent := workflow.Define("map_fail_parent", func(t *workflow.Task, _ int) (int, error) {
		outs, err := workflow.Map(t, "all", item, []string{"a", "b", strings.Repeat("z", 2048)})
		var pe *workflow.PayloadTooLargeError
		if errors.As(err, &pe) {
			outs, err = workflow.Map(t, "small", item, []string{"c"})
		}
		if err != nil {
			return 0, err
		}
		return len(outs), nil
	})
	cfg := testConfig(parent, item)
	cfg.MaxPayloadBytes = 1024
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 1 {
		t.Fatalf("the parent: %d, %v; want the small Map's one output", out, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE key LIKE 'all/%'`); n != 0 {
		t.Errorf("the Map that returned an error created %d children", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step IN ('item a', 'item b')`); n != 0 {
		t.Errorf("the Map that returned an error started %d children that ran", n)
	}
}

// Map names its children "m/0", "m/1", …; a Go whose name is one of those,
// in a later turn, starts a child of its own with its own input, rather
// than take the Map's child and its output.
func TestGoNamedLikeAMapChildIsAChildOfItsOwn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	double := workflow.Define("key_double", func(t *workflow.Task, n int) (int, error) { return 2 * n, nil })
	parent := workflow.Define("key_parent", func(t *workflow.Task, _ int) (int, error) {
		if _, err := workflow.Map(t, "m", double, []int{1, 2}); err != nil {
			return 0, err
		}
		return workflow.Go(t, "m/0", double, 100).Get()
	})
	eng := startEngine(t, pool, testConfig(parent, double))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 200 {
		t.Fatalf("Go(\"m/0\", double, 100).Get() after Map \"m\": %d, %v; want 200 (2 is the Map child's output)", out, err)
	}
}
