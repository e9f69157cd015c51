package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

type sumIn struct {
	A, B int
}

type sumOut struct {
	Sum     int
	Doubled int
	Label   string
}

func recordStep(pool *pgxpool.Pool, t *workflow.Task, name string) error {
	_, err := pool.Exec(t.Context(), `INSERT INTO ledger (run_id, step) VALUES ($1, $2)`, t.RunID(), name)
	return err
}

func TestThreeStepsRunOnceWithTypedOutput(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	wf := workflow.Define("three_steps", func(t *workflow.Task, in sumIn) (sumOut, error) {
		sum, err := workflow.Step(t, "add", func(ctx context.Context) (int, error) {
			return in.A + in.B, recordStep(pool, t, "add")
		})
		if err != nil {
			return sumOut{}, err
		}
		doubled, err := workflow.Step(t, "double", func(ctx context.Context) (int, error) {
			return sum * 2, recordStep(pool, t, "double")
		})
		if err != nil {
			return sumOut{}, err
		}
		label, err := workflow.Step(t, "label", func(ctx context.Context) (string, error) {
			return fmt.Sprintf("%d+%d", in.A, in.B), recordStep(pool, t, "label")
		})
		return sumOut{Sum: sum, Doubled: doubled, Label: label}, err
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, sumIn{A: 2, B: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sumOut{Sum: 5, Doubled: 10, Label: "2+3"}, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	for _, step := range []string{"add", "double", "label"} {
		if n := count(t, pool, `SELECT count(*) FROM ledger WHERE run_id = $1 AND step = $2`, run.ID, step); n != 1 {
			t.Errorf("step %s ran %d times, want 1", step, n)
		}
	}
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "completed" || len(info.Tasks) != 1 || len(info.Tasks[0].Steps) != 3 {
		t.Errorf("run info = %+v", info)
	}
}

func TestRepeatedStepNamesInLoopGetSuffixes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("loop", func(t *workflow.Task, n int) ([]int, error) {
		var out []int
		for i := range n {
			v, err := workflow.Step(t, "square", func(ctx context.Context) (int, error) { return i * i, nil })
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		// A delay in the middle forces a second turn that replays the loop.
		if err := t.Delay("pause", 0); err != nil {
			return nil, err
		}
		return out, nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{0, 1, 4, 9}, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range info.Tasks[0].Steps {
		names = append(names, s.Name)
	}
	want := []string{"pause", "square", "square#2", "square#3", "square#4"}
	if diff := cmp.Diff(want, sortStrings(names)); diff != "" {
		t.Errorf("recorded names (-want +got):\n%s", diff)
	}
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestDelayWaitsByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("delay_2s", func(t *workflow.Task, _ struct{}) (time.Time, error) {
		if _, err := workflow.Step(t, "before", func(ctx context.Context) (bool, error) { return true, nil }); err != nil {
			return time.Time{}, err
		}
		if err := t.Delay("wait", 2*time.Second); err != nil {
			return time.Time{}, err
		}
		return workflow.Step(t, "after", func(ctx context.Context) (time.Time, error) {
			var now time.Time
			err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
			return now, err
		})
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The run shows as waiting, with a waiting delay step, during the delay.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'waiting'`, run.ID) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("run never showed as waiting")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'waiting'`); n != 1 {
		t.Fatalf("%d waiting delay steps, want 1", n)
	}
	resumed, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var created, resumeAt time.Time
	if err := pool.QueryRow(ctx, `SELECT s.created_at, s.resume_at FROM braid_steps s WHERE kind = 'delay'`).Scan(&created, &resumeAt); err != nil {
		t.Fatal(err)
	}
	if got := resumeAt.Sub(created); got < 2*time.Second-time.Millisecond || got > 2*time.Second+time.Second {
		t.Errorf("resume_at is %s after the delay was written, want 2s", got)
	}
	if resumed.Before(resumeAt) {
		t.Errorf("the task resumed at %s, before its resume_at %s", resumed, resumeAt)
	}
	if resumed.Sub(created) < 2*time.Second {
		t.Errorf("the task resumed %s after the delay began, want at least 2s", resumed.Sub(created))
	}
}

func TestIdempotencyKeyReturnsTheSameRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("idem", func(t *workflow.Task, n int) (int, error) { return n, nil })
	eng := newEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	a, err := wf.Start(ctx, eng, 1, &workflow.StartOpts{IdempotencyKey: "order:42"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := wf.Start(ctx, eng, 2, &workflow.StartOpts{IdempotencyKey: "order:42"})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID || a.Existing || !b.Existing {
		t.Fatalf("runs %s (existing %v) and %s (existing %v), want the same run, the second existing", a.ID, a.Existing, b.ID, b.Existing)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs`); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job`); n != 1 {
		t.Fatalf("%d turn jobs, want 1", n)
	}
	// Concurrent starts with one key still make one run.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := wf.Start(ctx, eng, i, &workflow.StartOpts{IdempotencyKey: "concurrent"})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = r.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent starts returned different runs: %v", ids)
		}
	}
	other := workflow.Define("other", func(t *workflow.Task, n int) (int, error) { return n, nil })
	eng2 := newEngine(t, pool, testConfig(wf, other))
	if _, err := other.Start(ctx, eng2, 1, &workflow.StartOpts{IdempotencyKey: "order:42"}); !errors.Is(err, workflow.ErrIdempotencyConflict) {
		t.Fatalf("reusing a key for another workflow: err = %v, want ErrIdempotencyConflict", err)
	}
}

func TestSwallowedSuspensionStillSuspends(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	var laterRan atomic.Int32
	wf := workflow.Define("swallow", func(t *workflow.Task, _ struct{}) (string, error) {
		err := t.Delay("nap", 300*time.Millisecond)
		// The code ignores err and carries on.
		_ = err
		if _, err := workflow.Step(t, "after", func(ctx context.Context) (int, error) {
			laterRan.Add(1)
			return 1, recordStep(pool, t, "after")
		}); err != nil && !errors.Is(err, workflow.ErrSuspended) {
			return "", err
		} else if errors.Is(err, workflow.ErrSuspended) {
			return "swallowed", nil // and returns a value: the engine must still suspend
		}
		return "done", nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != "done" {
		t.Fatalf("output %q, want done: the turn that swallowed the suspension must not complete the run", out)
	}
	if n := laterRan.Load(); n != 1 {
		t.Fatalf("the step after the delay ran %d times, want exactly once (after the delay)", n)
	}
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Tasks[0].Turns != 2 {
		t.Fatalf("root task had %d turns, want 2", info.Tasks[0].Turns)
	}
}

func TestStepRetryPolicySnoozesThenReturnsRecordedError(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var calls atomic.Int32
	wf := workflow.Define("step_retry", func(t *workflow.Task, failUntil int) (string, error) {
		v, err := workflow.Step(t, "flaky", func(ctx context.Context) (string, error) {
			n := int(calls.Add(1))
			if n <= failUntil {
				return "", fmt.Errorf("flake %d", n)
			}
			return "ok", nil
		}, workflow.Retry{MaxAttempts: 3, Backoff: fast})
		var se *workflow.StepError
		if errors.As(err, &se) {
			// Compensate: the error is returned to the code, and replay
			// returns the same error.
			if err := t.Delay("replay", 0); err != nil {
				return "", err
			}
			_, again := workflow.Step(t, "flaky", func(ctx context.Context) (string, error) {
				return "", errors.New("must not run")
			})
			_ = again
			return "compensated: " + se.Message, nil
		}
		return v, err
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)

	run, err := wf.Start(ctx, eng, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "ok" {
		t.Fatalf("two flakes under a 3-attempt policy: %q, %v; want ok", out, err)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("step body ran %d times, want 3", got)
	}
	// The task's single River attempt was not spent by the step's retries.
	if n := count(t, pool, `SELECT max(attempt) FROM river_job`); n != 1 {
		t.Fatalf("turn attempt %d, want 1: step retries must snooze, not retry", n)
	}

	calls.Store(0)
	run, err = wf.Start(ctx, eng, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != "compensated: flake 3" {
		t.Fatalf("exhausted step: output %q", out)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("exhausted step body ran %d times, want 3", got)
	}
}

func TestPanicFailsTheAttemptAndRecordsTheStack(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("panics", func(t *workflow.Task, _ struct{}) (int, error) {
		var m map[string]int
		m["boom"] = 1 // panics
		return 0, nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	var re *workflow.RunError
	if !errors.As(err, &re) || re.Status != "failed" {
		t.Fatalf("err = %v, want a failed RunError", err)
	}
	if !strings.Contains(re.Message, "assignment to entry in nil map") || !strings.Contains(re.Message, "workflow_test.go") {
		t.Fatalf("run error does not carry the panic and its stack: %q", re.Message)
	}
	// River records the discard just after the turn returns.
	waitFor(t, "the turn to be discarded after 2 attempts (a dead letter)", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE state = 'discarded' AND attempt = 2`) == 1
	})
}

func TestBadInputIsRejectedWithClearErrors(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 30*time.Second)

	ok := workflow.Define("ok", func(t *workflow.Task, in any) (any, error) { return in, nil })
	unregistered := workflow.Define("unregistered", func(t *workflow.Task, in int) (int, error) { return in, nil })
	eng := newEngine(t, pool, &workflow.Config{Workflows: []workflow.Definition{ok}, MaxPayloadBytes: 1024})

	// An unknown workflow at Start.
	if _, err := unregistered.Start(ctx, eng, 1, nil); !errors.Is(err, workflow.ErrUnknownWorkflow) || !strings.Contains(err.Error(), `"unregistered"`) {
		t.Errorf("unknown workflow: err = %v", err)
	}
	// Input that cannot be encoded as JSON.
	var ee *workflow.EncodeError
	if _, err := ok.Start(ctx, eng, math.Inf(1), nil); !errors.As(err, &ee) || !strings.Contains(err.Error(), `input of workflow "ok"`) {
		t.Errorf("unencodable input: err = %v", err)
	}
	if _, err := ok.Start(ctx, eng, make(chan int), nil); !errors.As(err, &ee) {
		t.Errorf("channel input: err = %v", err)
	}
	// A payload over the cap names the limit.
	var pe *workflow.PayloadTooLargeError
	if _, err := ok.Start(ctx, eng, strings.Repeat("x", 2000), nil); !errors.As(err, &pe) || pe.Limit != 1024 || !strings.Contains(err.Error(), "limit of 1024 bytes") {
		t.Errorf("oversized input: err = %v", err)
	}
	// Nothing was written by the failed starts.
	if n := count(t, pool, `SELECT count(*) FROM braid_runs`); n != 0 {
		t.Errorf("%d runs written by rejected starts", n)
	}
	// An empty name, and duplicates, at definition time.
	var de *workflow.DefinitionError
	empty := workflow.Define("", func(t *workflow.Task, in int) (int, error) { return in, nil })
	if _, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{empty}}); !errors.As(err, &de) || !strings.Contains(err.Error(), "name is empty") {
		t.Errorf("empty name: err = %v", err)
	}
	badQueue := workflow.Define("bad_queue", func(t *workflow.Task, in int) (int, error) { return in, nil }, workflow.WithQueue("Not A Queue"))
	if _, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{badQueue}}); !errors.As(err, &de) || !strings.Contains(err.Error(), `queue "Not A Queue" is invalid`) {
		t.Errorf("a queue name River refuses: err = %v", err)
	}
	dup := workflow.Define("ok", func(t *workflow.Task, in int) (int, error) { return in, nil })
	if _, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{ok, dup}}); !errors.As(err, &de) || !strings.Contains(err.Error(), `"ok"`) {
		t.Errorf("duplicate name: err = %v", err)
	}
	// A bad run ID.
	if _, err := ok.Start(ctx, eng, 1, &workflow.StartOpts{ID: "not-a-uuid"}); err == nil || !strings.Contains(err.Error(), `"not-a-uuid"`) {
		t.Errorf("bad run ID: err = %v", err)
	}
}

func TestMapOverLimitAndBadStepNamesFailTheTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	child := workflow.Define("child_noop", func(t *workflow.Task, n int) (int, error) { return n, nil })
	var mapErr, stepErr atomic.Value
	parent := workflow.Define("too_many", func(t *workflow.Task, n int) (int, error) {
		_, err := workflow.Map(t, "items", child, make([]int, n))
		mapErr.Store(err.Error())
		_, err = workflow.Step(t, "", func(ctx context.Context) (int, error) { return 0, nil })
		stepErr.Store(err.Error())
		return 0, err
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(parent, child)
	cfg.MaxMapItems = 5
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 6, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("run succeeded")
	}
	if got := mapErr.Load(); got != `workflow: Map "items" has 6 items, over the limit of 5` {
		t.Errorf("Map over the limit: %v", got)
	}
	if got := stepErr.Load(); got != "workflow: step name is empty" {
		t.Errorf("empty step name: %v", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE parent_task_id IS NOT NULL`); n != 0 {
		t.Errorf("%d children created by a rejected Map", n)
	}
}
