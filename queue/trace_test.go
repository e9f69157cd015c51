package queue

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/internal/testdb"
)

type traceArgs struct{}

func (traceArgs) Kind() string { return "trace_args" }

// flakyArgs jobs fail their first attempt and succeed after.
type flakyArgs struct{}

func (flakyArgs) Kind() string { return "flaky" }

type flakyWorker struct {
	river.WorkerDefaults[flakyArgs]
}

func (w *flakyWorker) NextRetry(*river.Job[flakyArgs]) time.Time {
	return time.Now().Add(10 * time.Millisecond)
}

func (w *flakyWorker) Work(_ context.Context, job *river.Job[flakyArgs]) error {
	if job.Attempt == 1 {
		return errors.New("flaky: first attempt fails")
	}
	return nil
}

func newRecorder() (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	return sr, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
}

func spansNamed(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrMap(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// TestTracePropagation inserts from one process and works in another (two
// Queues on two pools of one database, with separate tracer providers):
// the attempt span's parent is the span that inserted the job.
func TestTracePropagation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)

	insertSR, insertTP := newRecorder()
	inserter := newQueue(t, testdb.Pool(t, url), &Config{TracerProvider: insertTP})

	workSR, workTP := newRecorder()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[traceArgs]) error { return nil }))
	worker := startQueue(t, testdb.Pool(t, url), &Config{Workers: workers, TracerProvider: workTP})

	ctx, parent := insertTP.Tracer("test").Start(ctx, "parent")
	res, err := inserter.Insert(ctx, traceArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	waitState(t, worker, res.Job.ID, rivertype.JobStateCompleted)

	if n := len(insertSR.Ended()); n != 1 {
		t.Errorf("inserting process recorded %d spans, want only the parent", n)
	}
	spans := spansNamed(workSR, "river.job trace_args")
	if len(spans) != 1 {
		t.Fatalf("got %d attempt spans, want 1; all: %v", len(spans), workSR.Ended())
	}
	s := spans[0]
	psc := parent.SpanContext()
	if s.Parent().SpanID() != psc.SpanID() || s.SpanContext().TraceID() != psc.TraceID() {
		t.Errorf("attempt span parent = %s/%s, want the inserting span %s/%s",
			s.Parent().TraceID(), s.Parent().SpanID(), psc.TraceID(), psc.SpanID())
	}
	if !s.Parent().IsRemote() {
		t.Error("attempt span's parent is not marked remote")
	}
	if s.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("span kind = %s, want consumer", s.SpanKind())
	}
	want := map[string]any{
		"job.id": res.Job.ID, "job.kind": "trace_args", "queue": "default",
		"attempt": int64(1), "priority": int64(PriorityNormal), "outcome": "completed",
	}
	if diff := cmp.Diff(want, attrMap(s)); diff != "" {
		t.Errorf("attempt span attributes (-want +got):\n%s", diff)
	}
	if s.Status().Code != codes.Unset {
		t.Errorf("successful attempt status = %v, want unset", s.Status())
	}
}

// TestJobWithoutTraceGetsRootSpan: a job inserted outside any span is still
// traced, as a root.
func TestJobWithoutTraceGetsRootSpan(t *testing.T) {
	t.Parallel()
	sr, tp := newRecorder()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[traceArgs]) error { return nil }))
	q := startQueue(t, testdb.DB(t), &Config{Workers: workers, TracerProvider: tp})
	res, err := q.Insert(context.Background(), traceArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Job.Metadata), MetadataTrace) {
		t.Errorf("metadata %s carries a trace though the insert had none", res.Job.Metadata)
	}
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	spans := spansNamed(sr, "river.job trace_args")
	if len(spans) != 1 || spans[0].Parent().IsValid() {
		t.Fatalf("want one root attempt span, got %v", spans)
	}
}

// TestFailedAttemptSpans: a failed attempt's span has the error status, and
// the retry is a second attempt span under the same parent and trace.
func TestFailedAttemptSpans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sr, tp := newRecorder()
	workers := river.NewWorkers()
	river.AddWorker(workers, &flakyWorker{})
	q := startQueue(t, testdb.DB(t), &Config{Workers: workers, TracerProvider: tp})

	ctx, parent := tp.Tracer("test").Start(ctx, "parent")
	// Through River directly: the middleware stores the trace there too.
	res, err := q.River().Insert(ctx, flakyArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	job := waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if job.Attempt != 2 {
		t.Fatalf("job completed at attempt %d, want 2", job.Attempt)
	}

	spans := spansNamed(sr, "river.job flaky")
	if len(spans) != 2 {
		t.Fatalf("got %d attempt spans, want 2", len(spans))
	}
	byAttempt := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byAttempt[attrMap(s)["attempt"].(int64)] = s
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("attempt %v is not under the inserting span", attrMap(s)["attempt"])
		}
	}
	first, second := byAttempt[1], byAttempt[2]
	if first == nil || second == nil {
		t.Fatalf("attempt spans by attempt: %v", byAttempt)
	}
	if first.Status().Code != codes.Error || first.Status().Description != "flaky: first attempt fails" {
		t.Errorf("failed attempt status = %+v, want error with the message", first.Status())
	}
	if len(first.Events()) == 0 || first.Events()[0].Name != "exception" {
		t.Errorf("failed attempt events = %v, want the recorded exception", first.Events())
	}
	if got := attrMap(first)["outcome"]; got != "failed" {
		t.Errorf("failed attempt outcome = %v", got)
	}
	if second.Status().Code != codes.Unset {
		t.Errorf("second attempt status = %+v, want unset", second.Status())
	}
	if first.SpanContext().SpanID() == second.SpanContext().SpanID() {
		t.Error("the two attempts share one span")
	}
}

type selfTracedArgs struct{}

func (selfTracedArgs) Kind() string { return "self_traced" }

// TestUntracedKinds: the middleware starts no span for an untraced kind,
// yet the worker finds the job, its queue and the insert's trace context.
func TestUntracedKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sr, tp := newRecorder()
	var sawJob, sawQueue atomic.Bool
	var q *Queue
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[selfTracedArgs]) error {
		if trace.SpanFromContext(ctx).SpanContext().IsValid() {
			return errors.New("an untraced kind got a span from the middleware")
		}
		row, ok := JobFromContext(ctx)
		sawJob.Store(ok && row.ID == job.ID)
		got, ok := FromContext(ctx)
		sawQueue.Store(ok && got == q)
		_, span := tp.Tracer("worker").Start(TraceContext(ctx, job.JobRow), "own span")
		span.End()
		return Heartbeat(ctx)
	}))
	q = startQueue(t, testdb.DB(t), &Config{Workers: workers, TracerProvider: tp, UntracedKinds: []string{"self_traced"}})

	ctx, parent := tp.Tracer("test").Start(ctx, "parent")
	res, err := q.Insert(ctx, selfTracedArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if n := len(spansNamed(sr, "river.job self_traced")); n != 0 {
		t.Errorf("got %d river.job spans for an untraced kind", n)
	}
	own := spansNamed(sr, "own span")
	if len(own) != 1 || own[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("the worker's own span is not under the inserting span: %v", own)
	}
	if !sawJob.Load() || !sawQueue.Load() {
		t.Errorf("JobFromContext ok = %v, FromContext ok = %v; want both", sawJob.Load(), sawQueue.Load())
	}
}

func TestTraceContextWithoutTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, md := range []string{`{}`, `not json`, `{"braid_trace": 5}`} {
		got := TraceContext(ctx, &rivertype.JobRow{Metadata: []byte(md)})
		if trace.SpanContextFromContext(got).IsValid() {
			t.Errorf("TraceContext with metadata %s produced a span context", md)
		}
	}
	if TraceContext(ctx, nil) != ctx {
		t.Error("TraceContext(ctx, nil) changed ctx")
	}
}
