package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

type greetIn struct {
	Name string `json:"name"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

// TestStartByName starts runs by name on an engine that has no definition
// of the workflow, and sees another engine that has it work them.
func TestStartByName(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)

	greet := workflow.Define("greet", func(t *workflow.Task, in greetIn) (greetOut, error) {
		return workflow.Step(t, "say", func(context.Context) (greetOut, error) {
			return greetOut{Greeting: "hello " + in.Name}, nil
		})
	}, workflow.WithQueue("greetings"), workflow.WithPriority(queue.PriorityHigh), workflow.WithMaxAttempts(7))

	workerCfg := testConfig(greet)
	workerCfg.Queue.Queues = map[string]river.QueueConfig{"greetings": {MaxWorkers: 5}}
	worker := startEngine(t, pool, workerCfg)
	// The dispatching engine registers nothing and works nothing.
	dispatcher := newEngine(t, pool, testConfig())

	// A name the database has never seen is refused, unless forced.
	_, err := dispatcher.StartByName(ctx, "greet", json.RawMessage(`{"name":"x"}`), nil)
	if !errors.Is(err, workflow.ErrUnknownWorkflow) {
		t.Fatalf("StartByName of a never-seen workflow: %v, want ErrUnknownWorkflow", err)
	}

	// One run started by the engine that has the definition makes it seen.
	first, err := greet.Start(ctx, worker, greetIn{Name: "first"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Result(ctx); err != nil {
		t.Fatal(err)
	}

	started, err := dispatcher.StartByName(ctx, "greet", json.RawMessage(`{"name":"by name"}`), &workflow.StartByNameOpts{IdempotencyKey: "greet:by-name"})
	if err != nil {
		t.Fatalf("StartByName: %v", err)
	}
	if started.Existing || started.Workflow != "greet" {
		t.Errorf("StartByName = %+v, want a new run of greet", started)
	}
	// The root task takes the turn options of the workflow's earlier runs,
	// so the process that works the "greetings" queue runs it.
	var (
		q           string
		prio        int
		maxAttempts int
	)
	if err := pool.QueryRow(ctx, `SELECT queue, priority, max_attempts FROM river_job WHERE kind = 'braid_task' AND braid_turn_task(unique_key, args) =
		(SELECT id FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL)`, started.ID).Scan(&q, &prio, &maxAttempts); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"greetings", int(queue.PriorityHigh), 7}, []any{q, prio, maxAttempts}); diff != "" {
		t.Errorf("turn options (-want +got):\n%s", diff)
	}
	raw, err := worker.Wait(ctx, started.ID)
	if err != nil {
		t.Fatalf("the run started by name: %v", err)
	}
	var out greetOut
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.Greeting != "hello by name" {
		t.Errorf("output %q, want %q", out.Greeting, "hello by name")
	}

	// The idempotency key returns the same run.
	again, err := dispatcher.StartByName(ctx, "greet", json.RawMessage(`{"name":"other"}`), &workflow.StartByNameOpts{IdempotencyKey: "greet:by-name"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&workflow.StartedRun{ID: started.ID, Workflow: "greet", Existing: true}, again); diff != "" {
		t.Errorf("StartByName again (-want +got):\n%s", diff)
	}
	// …but not for another workflow.
	if _, err := dispatcher.StartByName(ctx, "other", nil, &workflow.StartByNameOpts{IdempotencyKey: "greet:by-name", Force: true}); !errors.Is(err, workflow.ErrIdempotencyConflict) {
		t.Errorf("StartByName of another workflow with the same key: %v, want ErrIdempotencyConflict", err)
	}

	// Force starts a never-seen workflow with Define's defaults.
	forced, err := dispatcher.StartByName(ctx, "not_deployed_yet", nil, &workflow.StartByNameOpts{Force: true})
	if err != nil {
		t.Fatalf("StartByName with Force: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT queue, priority, max_attempts FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL`, forced.ID).Scan(&q, &prio, &maxAttempts); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"default", int(queue.PriorityNormal), workflow.MaxAttemptsDefault}, []any{q, prio, maxAttempts}); diff != "" {
		t.Errorf("forced turn options (-want +got):\n%s", diff)
	}

	// A registered workflow starts as StartWorkflowTx starts it, and the
	// options override the queue and priority.
	own := newEngine(t, pool, testConfig(greet))
	run, err := own.StartByName(ctx, "greet", json.RawMessage(`{"name":"own"}`), &workflow.StartByNameOpts{Priority: queue.PriorityLow})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT queue, priority FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL`, run.ID).Scan(&q, &prio); err != nil {
		t.Fatal(err)
	}
	if q != "greetings" || prio != int(queue.PriorityLow) {
		t.Errorf("registered workflow: queue %q priority %d, want greetings and %d", q, prio, queue.PriorityLow)
	}
	if _, err := worker.Wait(ctx, run.ID); err != nil {
		t.Fatalf("the registered run: %v", err)
	}
}

func TestStartByNameBadInput(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	eng := newEngine(t, pool, testConfig())
	for _, tc := range []struct {
		name, workflow string
		input          string
		want           func(error) bool
	}{
		{"invalid JSON", "w", `{"a":`, func(err error) bool { var e *workflow.EncodeError; return errors.As(err, &e) }},
		{"NUL character", "w", `"a\u0000b"`, func(err error) bool { var e *workflow.EncodeError; return errors.As(err, &e) }},
		{"empty name", "", `{}`, func(err error) bool { return errors.Is(err, workflow.ErrUnknownWorkflow) }},
		{"long name", string(make([]byte, 201)), `{}`, func(err error) bool { return errors.Is(err, workflow.ErrUnknownWorkflow) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := eng.StartByName(ctx, tc.workflow, json.RawMessage(tc.input), &workflow.StartByNameOpts{Force: true})
			if err == nil || !tc.want(err) {
				t.Fatalf("StartByName: %v", err)
			}
		})
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs`); n != 0 {
		t.Errorf("%d runs exist after bad input, want none", n)
	}
}
