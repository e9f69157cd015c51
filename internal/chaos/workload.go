package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// Names of the workload's workflows.
const (
	flowName        = "chaos_flow"
	leafName        = "chaos_leaf"
	failKillName    = "chaos_fail_kill"
	failTimeoutName = "chaos_fail_timeout"
	failErrorName   = "chaos_fail_error"
)

// failAttempts is MaxAttempts of the workflows made to fail: small, so the
// last attempt comes quickly.
const failAttempts = 2

// failTimeout is the timeout of chaos_fail_timeout's attempts.
const failTimeout = time.Second

// Modes of the chaos_fail_* workflows: how their "trouble" step misbehaves
// until the run is released.
const (
	modeHang          = "hang"           // block until the process is killed
	modeTimeout       = "timeout"        // block until the attempt's context ends, then return its error
	modeIgnoreTimeout = "ignore_timeout" // block past the timeout without looking at the context
	modeNUL           = "nul"            // return an error holding a NUL byte
	modeHuge          = "huge"           // return an error of 1 MiB of text
)

// retry is the workload's retry policy: a short fixed pause.
var retry = queue.Backoff{Strategy: queue.Fixed, Base: 100 * time.Millisecond}

// FlowIn is chaos_flow's input.
type FlowIn struct {
	Children int `json:"children"`
	WorkMs   int `json:"work_ms"`  // how long each child's step body works
	DelayMs  int `json:"delay_ms"` // the durable delay after the join of the children
}

// expectedSum is the Sum a chaos_flow run with input in returns.
func (in FlowIn) expectedSum() int {
	sum := 1 // prepare
	for i := range in.Children {
		sum += 2 * (i + 1)
	}
	return sum
}

// LeafIn is chaos_leaf's input.
type LeafIn struct {
	N      int `json:"n"`
	WorkMs int `json:"work_ms"`
}

// Result is what every step returns: the token of the execution that was
// recorded, the step's reference and a value.
type Result struct {
	Ref   string `json:"ref"`
	Token string `json:"token"`
	Value int    `json:"value"`
}

// Out is the output of the root workflows: a sum, and the results of its
// own steps as the run saw them.
type Out struct {
	Sum   int      `json:"sum"`
	Steps []Result `json:"steps"`
}

// FailIn is the input of the chaos_fail_* workflows.
type FailIn struct {
	Mode string `json:"mode"`
	// Child moves the trouble into a child task, so that the failure
	// reaches the root through the join.
	Child bool `json:"child,omitempty"`
}

// failSum is the Sum of a chaos_fail_* run once released.
const failSum = 1 + 7

var leaf = workflow.Define(leafName, func(t *workflow.Task, in LeafIn) (Result, error) {
	return workflow.Step(t, "work", func(ctx context.Context) (Result, error) {
		r, err := effect(ctx, t, "work", 2*in.N)
		if err != nil {
			return r, err
		}
		return r, sleep(ctx, time.Duration(in.WorkMs)*time.Millisecond)
	})
}, workflow.WithRetry(retry))

var flow = workflow.Define(flowName, func(t *workflow.Task, in FlowIn) (Out, error) {
	prep, err := workflow.Step(t, "prepare", func(ctx context.Context) (Result, error) {
		return effect(ctx, t, "prepare", 1)
	})
	if err != nil {
		return Out{}, err
	}
	items := make([]LeafIn, in.Children)
	for i := range items {
		items[i] = LeafIn{N: i + 1, WorkMs: in.WorkMs}
	}
	leaves, err := workflow.Map(t, "fan", leaf, items)
	if err != nil {
		return Out{}, err
	}
	if in.DelayMs > 0 {
		if err := t.Delay("pause", time.Duration(in.DelayMs)*time.Millisecond); err != nil {
			return Out{}, err
		}
	}
	join, err := workflow.Step(t, "join", func(ctx context.Context) (Result, error) {
		sum := prep.Value
		for _, l := range leaves {
			sum += l.Value
		}
		return effect(ctx, t, "join", sum, append([]Result{prep}, leaves...)...)
	})
	if err != nil {
		return Out{}, err
	}
	fin, err := workflow.Step(t, "finish", func(ctx context.Context) (Result, error) {
		return effect(ctx, t, "finish", 0, join)
	})
	if err != nil {
		return Out{}, err
	}
	return Out{Sum: join.Value, Steps: []Result{prep, join, fin}}, nil
}, workflow.WithRetry(retry))

// failBody is the body of the chaos_fail_* workflows: a step, a step that
// misbehaves (itself or in a child) until the run is released, and a last
// step.
func failBody(self func() *workflow.Workflow[FailIn, Out]) func(t *workflow.Task, in FailIn) (Out, error) {
	return func(t *workflow.Task, in FailIn) (Out, error) {
		prep, err := workflow.Step(t, "prepare", func(ctx context.Context) (Result, error) {
			return effect(ctx, t, "prepare", 1)
		})
		if err != nil {
			return Out{}, err
		}
		var trouble Result
		if in.Child {
			child, err := workflow.Go(t, "inner", self(), FailIn{Mode: in.Mode}).Get()
			if err != nil {
				return Out{}, err
			}
			trouble = child.Steps[1]
		} else {
			trouble, err = workflow.Step(t, "trouble", func(ctx context.Context) (Result, error) {
				r, err := effect(ctx, t, "trouble", 7, prep)
				if err != nil {
					return r, err
				}
				released, err := isReleased(ctx, t.RunID())
				if err != nil || released {
					return r, err
				}
				return r, misbehave(ctx, in.Mode)
			})
			if err != nil {
				return Out{}, err
			}
		}
		fin, err := workflow.Step(t, "finish", func(ctx context.Context) (Result, error) {
			return effect(ctx, t, "finish", 0, trouble)
		})
		if err != nil {
			return Out{}, err
		}
		return Out{Sum: prep.Value + trouble.Value, Steps: []Result{prep, trouble, fin}}, nil
	}
}

// misbehave is what the trouble step does until its run is released.
func misbehave(ctx context.Context, mode string) error {
	switch mode {
	case modeHang:
		<-ctx.Done() // the coordinator kills the process first
		return ctx.Err()
	case modeTimeout:
		<-ctx.Done()
		return fmt.Errorf("trouble: %w", ctx.Err())
	case modeIgnoreTimeout:
		time.Sleep(3 * failTimeout)
		return errors.New("trouble: blocked past the timeout")
	case modeNUL:
		return errors.New("trouble: a NUL byte \x00 in the middle of this error")
	case modeHuge:
		return errors.New("trouble: " + strings.Repeat("x", 1<<20))
	}
	return fmt.Errorf("trouble: unknown mode %q", mode)
}

var (
	wfFailKill, wfFailTimeout, wfFailError *workflow.Workflow[FailIn, Out]
)

func init() {
	wfFailKill = workflow.Define(failKillName, failBody(func() *workflow.Workflow[FailIn, Out] { return wfFailKill }),
		workflow.WithRetry(retry), workflow.WithMaxAttempts(failAttempts))
	wfFailTimeout = workflow.Define(failTimeoutName, failBody(func() *workflow.Workflow[FailIn, Out] { return wfFailTimeout }),
		workflow.WithRetry(retry), workflow.WithMaxAttempts(failAttempts), workflow.WithTimeout(failTimeout))
	wfFailError = workflow.Define(failErrorName, failBody(func() *workflow.Workflow[FailIn, Out] { return wfFailError }),
		workflow.WithRetry(retry), workflow.WithMaxAttempts(failAttempts))
}

// definitions lists every workflow of the workload, for the engines of the
// workers and of the coordinator.
func definitions() []workflow.Definition {
	return []workflow.Definition{flow, leaf, wfFailKill, wfFailTimeout, wfFailError}
}

// effects is the worker process's pool for the ledger and the side
// effects: connections of their own, outside the engine's transactions.
var effects *pgxpool.Pool

// effect records one execution of a step body in chaos_ledger, with the
// results it consumed, and applies the step's side effect once per
// idempotency key. It returns the step's result with a fresh token.
func effect(ctx context.Context, t *workflow.Task, step string, value int, seen ...Result) (Result, error) {
	r := Result{Ref: t.IdempotencyKey(step), Token: token(), Value: value}
	refs := make([]string, len(seen))
	tokens := make([]string, len(seen))
	for i, s := range seen {
		refs[i], tokens[i] = s.Ref, s.Token
	}
	if _, err := effects.Exec(ctx, `
		INSERT INTO chaos_ledger (run_id, ref, task_key, step, attempt, pid, token, seen_refs, seen_tokens)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		t.RunID(), r.Ref, t.Key(), step, t.Attempt(), os.Getpid(), r.Token, refs, tokens); err != nil {
		return r, fmt.Errorf("ledger: %w", err)
	}
	if _, err := effects.Exec(ctx, `
		INSERT INTO chaos_effects (key, run_id, task_key, step) VALUES ($1, $2, $3, $4)
		ON CONFLICT (key) DO UPDATE SET refused = chaos_effects.refused + 1`,
		r.Ref, t.RunID(), t.Key(), step); err != nil {
		return r, fmt.Errorf("side effect: %w", err)
	}
	return r, nil
}

// isReleased reports whether the coordinator has released the run from
// its trouble.
func isReleased(ctx context.Context, runID string) (bool, error) {
	var ok bool
	err := effects.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM chaos_released WHERE run_id = $1)`, runID).Scan(&ok)
	return ok, err
}

func token() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
