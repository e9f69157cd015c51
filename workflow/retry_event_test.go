package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A task's step fails and its code, on the failure path, publishes a
// refund itself and through a child it awaits. Retry forgets that path, and
// with it what the path published: once the run completes on its normal
// path, which publishes neither key, both read as unset.
func TestRetryTakesBackTheEventsOfTheForgottenPath(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	notify := workflow.Define("retry_event_notify", func(t *workflow.Task, _ struct{}) (int, error) {
		return 0, workflow.SetEvent(t, "notice", "sent")
	})
	wf := workflow.Define("retry_event_refund", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "charge", func(context.Context) (int, error) {
			if broken.Load() {
				return 0, errors.New("card declined")
			}
			return 1, nil
		}, workflow.Retry{MaxAttempts: 1, Backoff: fast})
		if err != nil {
			if serr := workflow.SetEvent(t, "refund", "issued"); serr != nil {
				return "", serr
			}
			if _, cerr := workflow.Go(t, "notify", notify, struct{}{}).Get(); cerr != nil {
				return "", cerr
			}
			return "", err
		}
		return "shipped", nil
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf, notify))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the first run completed")
	}
	for _, key := range []string{"refund", "notice"} {
		if _, err := workflow.GetEvent[string](ctx, eng, run.ID, key, 0); err != nil {
			t.Fatalf("before Retry, GetEvent(%q): %v", key, err)
		}
	}
	broken.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "shipped" {
		t.Fatalf("after Retry: %q, %v; want shipped", out, err)
	}
	for _, key := range []string{"refund", "notice"} {
		got, err := workflow.GetEvent[string](ctx, eng, run.ID, key, 0)
		if !errors.Is(err, workflow.ErrEventNotSet) {
			t.Errorf("after Retry, GetEvent(%q) = %q, %v; want ErrEventNotSet", key, got, err)
		}
	}
}

// An event set before the failure and set again on the failure path reads,
// after Retry, as the kept record set it, until the normal path sets it
// otherwise.
func TestRetryRestoresTheKeptValueOfAnEvent(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	gate := make(chan struct{})
	wf := workflow.Define("retry_event_stage", func(t *workflow.Task, _ struct{}) (string, error) {
		if err := workflow.SetEvent(t, "stage", "paid"); err != nil {
			return "", err
		}
		_, err := workflow.Step(t, "ship", func(context.Context) (int, error) {
			if broken.Load() {
				return 0, errors.New("no carrier")
			}
			<-gate
			return 1, nil
		}, workflow.Retry{MaxAttempts: 1, Backoff: fast})
		if err != nil {
			if serr := workflow.SetEvent(t, "stage", "refunding"); serr != nil {
				return "", serr
			}
			return "", err
		}
		if err := workflow.SetEvent(t, "stage", "shipped"); err != nil {
			return "", err
		}
		return "shipped", nil
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the first run completed")
	}
	if got, err := workflow.GetEvent[string](ctx, eng, run.ID, "stage", 0); err != nil || got != "refunding" {
		t.Fatalf("before Retry, stage = %q, %v; want refunding", got, err)
	}
	broken.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		close(gate)
		t.Fatal(err)
	}
	got, err := workflow.GetEvent[string](ctx, eng, run.ID, "stage", 0)
	close(gate)
	if err != nil || got != "paid" {
		t.Errorf("after Retry, stage = %q, %v; want paid", got, err)
	}
	if out, err := run.Result(ctx); err != nil || out != "shipped" {
		t.Fatalf("after Retry: %q, %v; want shipped", out, err)
	}
	if got, err := workflow.GetEvent[string](ctx, eng, run.ID, "stage", 0); err != nil || got != "shipped" {
		t.Errorf("after completion, stage = %q, %v; want shipped", got, err)
	}
}
