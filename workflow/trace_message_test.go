package workflow_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestTraceMessageWakeLinksToItsSender: a turn woken by a signal links to
// the braid.signal span that sent it, and one woken by an event to the
// braid.publish span, though the sender is another engine, with a tracer
// of its own, than the worker that runs the turn: the link travels with
// the turn's job.
func TestTraceMessageWakeLinksToItsSender(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	newRecorder := func() (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return rec, tp
	}
	waiter := workflow.Define("trace_message_waiter", func(t *workflow.Task, _ struct{}) (string, error) {
		s, ok, err := workflow.WaitSignal[string](t, "go", time.Hour)
		if err != nil || !ok {
			return "", err
		}
		e, ok, err := workflow.WaitEvent[string](t, "news", "", time.Hour)
		if err != nil || !ok {
			return "", err
		}
		return s + " " + e, nil
	})
	workerRec, workerTP := newRecorder()
	senderRec, senderTP := newRecorder()
	cfg := testConfig(waiter)
	cfg.TracerProvider = workerTP
	worker := startEngine(t, pool, cfg)
	scfg := testConfig(waiter)
	scfg.TracerProvider = senderTP
	sender := newEngine(t, pool, scfg)

	run, err := waiter.Start(ctx, worker, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(kind string) func() bool {
		return func() bool {
			return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = $1 AND status = 'waiting'`, kind) == 1
		}
	}
	waitFor(t, "the signal wait", 30*time.Second, waiting("signal"))
	if err := sender.Signal(ctx, run.ID, "go", "ready", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event wait", 30*time.Second, waiting("event"))
	if n, err := sender.Publish(ctx, "news", "set"); err != nil || n != 1 {
		t.Fatalf("Publish: woke %d, %v", n, err)
	}
	if out, err := run.Result(ctx); err != nil || out != "ready set" {
		t.Fatalf("result %q, %v", out, err)
	}

	var signalSpan, publishSpan sdktrace.ReadOnlySpan
	for _, s := range senderRec.Ended() {
		switch s.Name() {
		case "braid.signal go":
			signalSpan = s
		case "braid.publish news":
			publishSpan = s
		}
	}
	if signalSpan == nil || publishSpan == nil {
		t.Fatalf("the sender recorded no braid.signal or braid.publish span")
	}
	var turns []sdktrace.ReadOnlySpan
	waitFor(t, "three turn spans", 20*time.Second, func() bool {
		turns = turns[:0]
		for _, s := range workerRec.Ended() {
			if s.Name() == "braid.task trace_message_waiter" {
				turns = append(turns, s)
			}
		}
		return len(turns) == 3
	})
	linked := map[string]bool{}
	for _, s := range turns {
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				if kv.Key != workflow.LinkAttribute {
					continue
				}
				switch kind := kv.Value.AsString(); {
				case kind == "sending signal" && l.SpanContext.SpanID() == signalSpan.SpanContext().SpanID():
					linked[kind] = true
				case kind == "publishing event" && l.SpanContext.SpanID() == publishSpan.SpanContext().SpanID():
					linked[kind] = true
				}
			}
		}
	}
	for _, kind := range []string{"sending signal", "publishing event"} {
		if !linked[kind] {
			t.Errorf("no turn links to its sender's span as %q", kind)
		}
	}
	// The waits are spans too, recorded by the engine whose send or
	// publish ended them.
	waits := map[string]bool{}
	for _, s := range senderRec.Ended() {
		waits[s.Name()] = true
	}
	for _, name := range []string{"braid.wait signal signal:go", "braid.wait event event:news"} {
		if !waits[name] {
			t.Errorf("no %s span", name)
		}
	}
}
