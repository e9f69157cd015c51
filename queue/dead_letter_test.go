package queue

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/codes"

	"github.com/braidflow/braid/internal/testdb"
)

type poisonArgs struct{}

func (poisonArgs) Kind() string { return "poison" }

// poisonWorker panics on every attempt until healed.
type poisonWorker struct {
	river.WorkerDefaults[poisonArgs]
	healed atomic.Bool
}

func (w *poisonWorker) NextRetry(*river.Job[poisonArgs]) time.Time {
	return time.Now().Add(5 * time.Millisecond)
}

func (w *poisonWorker) Work(context.Context, *river.Job[poisonArgs]) error {
	if !w.healed.Load() {
		panic("poison pill")
	}
	return nil
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sr, tp := newRecorder()
	w := &poisonWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[traceArgs]) error { return nil }))
	q := startQueue(t, testdb.DB(t), &Config{Workers: workers, TracerProvider: tp, MaxAttempts: 3})

	res, err := q.Insert(ctx, poisonArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	healthy, err := q.Insert(ctx, traceArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := waitState(t, q, res.Job.ID, rivertype.JobStateDiscarded)
	waitState(t, q, healthy.Job.ID, rivertype.JobStateCompleted)

	// The process survived three panics; each attempt's error holds the
	// panic value and a stack through the worker.
	if job.Attempt != 3 || len(job.Errors) != 3 {
		t.Fatalf("discarded after %d attempts with %d errors, want 3 and 3", job.Attempt, len(job.Errors))
	}
	for i, e := range job.Errors {
		if e.Attempt != i+1 || !strings.Contains(e.Error, "poison pill") {
			t.Errorf("error %d = attempt %d %q, want attempt %d with the panic value", i, e.Attempt, e.Error, i+1)
		}
		if !strings.Contains(e.Trace, "poisonWorker).Work") {
			t.Errorf("error %d trace does not show the panicking worker:\n%s", i, e.Trace)
		}
	}
	for _, s := range spansNamed(sr, "river.job poison") {
		if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "panic: poison pill") {
			t.Errorf("panicked attempt status = %+v, want error naming the panic", s.Status())
		}
		if attrMap(s)["outcome"] != "panicked" {
			t.Errorf("panicked attempt outcome = %v", attrMap(s)["outcome"])
		}
	}

	dead, err := q.DeadLetters(ctx, DeadLetterFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != res.Job.ID {
		t.Fatalf("DeadLetters = %v, want only job %d", dead, res.Job.ID)
	}
	if dead[0].LastError.Attempt != 3 || !strings.Contains(dead[0].LastError.Error, "poison pill") {
		t.Errorf("LastError = %+v, want attempt 3's panic", dead[0].LastError)
	}
	for _, f := range []DeadLetterFilter{{Kind: "poison"}, {Queue: "default"}, {Limit: 1}} {
		if got, err := q.DeadLetters(ctx, f); err != nil || len(got) != 1 {
			t.Errorf("DeadLetters(%+v) = %d, %v; want the job", f, len(got), err)
		}
	}
	for _, f := range []DeadLetterFilter{{Kind: "trace_args"}, {Queue: "elsewhere"}} {
		if got, err := q.DeadLetters(ctx, f); err != nil || len(got) != 0 {
			t.Errorf("DeadLetters(%+v) = %d, %v; want none", f, len(got), err)
		}
	}

	w.healed.Store(true)
	retried, err := q.Retry(ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(retried) != 1 || retried[0].State != rivertype.JobStateAvailable {
		t.Fatalf("Retry returned %v, want the job available", retried)
	}
	job = waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if job.Attempt != 4 {
		t.Errorf("retried dead letter completed at attempt %d, want 4", job.Attempt)
	}
	if dead, err := q.DeadLetters(ctx, DeadLetterFilter{}); err != nil || len(dead) != 0 {
		t.Errorf("after the retry DeadLetters = %v, %v; want none", dead, err)
	}
}

func TestRetryAndCancelInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newQueue(t, testdb.DB(t), nil)
	res, err := q.Insert(ctx, traceArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	// All or none: one unknown ID fails the call and cancels nothing.
	if _, err := q.Cancel(ctx, res.Job.ID, 999_999); !errors.Is(err, rivertype.ErrNotFound) || !strings.Contains(err.Error(), "999999") {
		t.Errorf("Cancel with an unknown ID = %v, want ErrNotFound naming it", err)
	}
	if job, _ := q.River().JobGet(ctx, res.Job.ID); job.State != rivertype.JobStateScheduled {
		t.Errorf("a failed Cancel changed the job to %s", job.State)
	}
	if _, err := q.Retry(ctx, 999_999); !errors.Is(err, rivertype.ErrNotFound) {
		t.Errorf("Retry of an unknown ID = %v, want ErrNotFound", err)
	}
	if _, err := q.Retry(ctx); err == nil || !strings.Contains(err.Error(), "at least one job ID") {
		t.Errorf("Retry() = %v, want an error asking for IDs", err)
	}
	if _, err := q.Cancel(ctx, make([]int64, IDsMax+1)...); err == nil || !strings.Contains(err.Error(), "limit is 10000") {
		t.Errorf("Cancel with too many IDs = %v, want the limit named", err)
	}
	cancelled, err := q.Cancel(ctx, res.Job.ID)
	if err != nil || cancelled[0].State != rivertype.JobStateCancelled {
		t.Fatalf("Cancel = %v, %v; want the job cancelled", cancelled, err)
	}
	if _, err := q.DeadLetters(ctx, DeadLetterFilter{Limit: ListLimitMax + 1}); err == nil || !strings.Contains(err.Error(), "1 to 10000") {
		t.Errorf("DeadLetters over the limit = %v, want the limit named", err)
	}
}
