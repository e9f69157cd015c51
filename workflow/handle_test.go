package workflow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// envStartDouble, set to an idempotency key, makes a worker process start
// a run of handleDouble with that key.
const envStartDouble = "BRAID_TEST_START_DOUBLE"

// handleDouble doubles its input; a worker process starts it for
// TestGetARunStartedByAnotherProcess.
var handleDouble = workflow.Define("handle_double", func(t *workflow.Task, n int) (int, error) { return 2 * n, nil })

// TestGetARunStartedByAnotherProcess gets typed handles, by idempotency
// key and by ID, on a run that another process started and ran, and reads
// its typed output.
func TestGetARunStartedByAnotherProcess(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	eng := newEngine(t, pool, crashConfig())
	ctx := ctxTimeout(t, 60*time.Second)
	startWorker(t, url, false, envStartDouble+"=double-21")

	var run *workflow.Run[int]
	for {
		r, err := handleDouble.GetByKey(ctx, eng, "double-21")
		if err == nil {
			run = r
			break
		}
		if !errors.Is(err, workflow.ErrRunNotFound) {
			t.Fatalf("GetByKey: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the worker never started its run")
		case <-time.After(20 * time.Millisecond):
		}
	}
	out, err := run.Result(ctx)
	if err != nil || out != 42 {
		t.Fatalf("Result = %d, %v; want 42", out, err)
	}
	byID, err := handleDouble.Get(ctx, eng, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := byID.Result(ctx); err != nil || out != 42 {
		t.Fatalf("Result by ID = %d, %v; want 42", out, err)
	}
}

// TestGetRefusesWhatItCannotType checks Get's and GetByKey's errors: an
// unknown run, an ID that is not a UUID, and a run of another workflow.
func TestGetRefusesWhatItCannotType(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	other := workflow.Define("handle_other", func(t *workflow.Task, s string) (string, error) { return s, nil })
	eng := newEngine(t, pool, testConfig(handleDouble, other))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := other.Start(ctx, eng, "x", &workflow.StartOpts{IdempotencyKey: "other-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handleDouble.Get(ctx, eng, run.ID); !errors.Is(err, workflow.ErrWrongWorkflow) {
		t.Errorf("Get of another workflow's run = %v, want ErrWrongWorkflow", err)
	}
	if _, err := handleDouble.GetByKey(ctx, eng, "other-1"); !errors.Is(err, workflow.ErrWrongWorkflow) {
		t.Errorf("GetByKey of another workflow's run = %v, want ErrWrongWorkflow", err)
	}
	if _, err := handleDouble.Get(ctx, eng, "01a20a18-f747-7f1c-9277-183ffce9dd2e"); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("Get of an unknown run = %v, want ErrRunNotFound", err)
	}
	if _, err := handleDouble.Get(ctx, eng, "digest-42"); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("Get of a non-UUID = %v, want ErrRunNotFound", err)
	}
	if _, err := handleDouble.GetByKey(ctx, eng, "no-such-key"); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("GetByKey of an unknown key = %v, want ErrRunNotFound", err)
	}
	h, err := other.GetByKey(ctx, eng, "other-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Errorf("Result after the handle's Cancel = %v, want ErrCancelled", err)
	}
}
