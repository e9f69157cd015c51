package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

type eventWaitIn struct {
	Topic  string `json:"topic"`
	Filter string `json:"filter"`
	Kind   string `json:"kind"`
	N      int    `json:"n"`
}

type eventPayload struct {
	Kind string `json:"kind"`
	N    int    `json:"n"`
}

// eventWaiter waits for an event on its topic that passes its filter, and
// returns the payload's n, or -1 when its timeout (in n milliseconds, when
// the input's n is negative) passed first.
var eventWaiter = workflow.Define("event_waiter", func(t *workflow.Task, in eventWaitIn) (int, error) {
	var timeout time.Duration
	if in.N < 0 {
		timeout = time.Duration(-in.N) * time.Millisecond
	}
	p, ok, err := workflow.WaitEvent[eventPayload](t, in.Topic, in.Filter, timeout)
	if err != nil {
		return 0, err
	}
	if !ok {
		return -1, nil
	}
	return p.N, nil
})

// TestPublishWakesExactlyTheMatchingWaits: among 10,000 waits on other
// topics, and waits on the same topic whose filter does not match, a
// publish wakes exactly the matching waits on its topic. The query that
// finds them reads the waits of that topic only, through the partial
// index on event waits, as EXPLAIN ANALYZE shows.
func TestPublishWakesExactlyTheMatchingWaits(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(eventWaiter))
	ctx := ctxTimeout(t, 180*time.Second)

	const others, target = 10_000, 40
	var params []workflow.StartManyParams[eventWaitIn]
	filter := `payload.kind == input.kind`
	for i := range others {
		// Other topics, some with the target's filter and kind.
		params = append(params, workflow.StartManyParams[eventWaitIn]{Input: eventWaitIn{
			Topic: fmt.Sprintf("other-%d", i%100), Filter: filter, Kind: "a"}})
	}
	for i := range target {
		// The target topic: half wait for kind a, half for kind b.
		params = append(params, workflow.StartManyParams[eventWaitIn]{Input: eventWaitIn{
			Topic: "orders", Filter: filter, Kind: []string{"a", "b"}[i%2]}})
	}
	var runs []*workflow.Run[int]
	for chunk := range slices.Chunk(params, 1000) {
		rs, err := eventWaiter.StartMany(ctx, eng, chunk)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, rs...)
	}
	waitFor(t, "every wait to be recorded", 150*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'event' AND status = 'waiting'`) == others+target
	})

	// The query that finds a topic's waits reads that topic's rows only.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var plan []map[string]any
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+workflow.TopicWaitsSQL, "orders").Scan(&plan); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	scan := findPlanNode(plan[0]["Plan"].(map[string]any), "braid_steps")
	if scan == nil {
		t.Fatalf("no scan of braid_steps in the plan: %v", plan)
	}
	// The planner may read the index through a bitmap, whose index scan is
	// the heap scan's one child; either way the index and its condition
	// are the same.
	index := scan
	if scan["Node Type"] == "Bitmap Heap Scan" {
		if kids, _ := scan["Plans"].([]any); len(kids) == 1 {
			index, _ = kids[0].(map[string]any)
		}
		if removed, ok := scan["Rows Removed by Index Recheck"]; ok && removed != float64(0) {
			t.Errorf("the bitmap scan of braid_steps removed %v rows on recheck, want none", removed)
		}
	}
	if index["Index Name"] != "braid_steps_event_waits" || !strings.Contains(fmt.Sprint(index["Index Cond"]), "wait_on") {
		t.Errorf("braid_steps is read by %v on %v (cond %v), want a scan of the index braid_steps_event_waits on wait_on",
			index["Node Type"], index["Index Name"], index["Index Cond"])
	}
	if rows := scan["Actual Rows"]; rows != float64(target) {
		t.Errorf("the scan of braid_steps read %v rows, want the %d waits on the topic", rows, target)
	}
	if removed, ok := scan["Rows Removed by Filter"]; ok && removed != float64(0) {
		t.Errorf("the scan of braid_steps removed %v rows by filter, want none", removed)
	}

	woken, err := eng.Publish(ctx, "orders", eventPayload{Kind: "a", N: 7})
	if err != nil {
		t.Fatal(err)
	}
	if woken != target/2 {
		t.Errorf("Publish woke %d waits, want %d", woken, target/2)
	}
	for i, run := range runs[others:] {
		if i%2 == 1 {
			continue
		}
		out, err := run.Result(ctx)
		if err != nil || out != 7 {
			t.Errorf("matching waiter %d: %d, %v; want 7", i, out, err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE status = 'completed'`); n != target/2 {
		t.Errorf("%d runs completed, want the %d matching ones", n, target/2)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'event' AND status = 'waiting'`); n != others+target/2 {
		t.Errorf("%d waits left, want %d", n, others+target/2)
	}
}

// findPlanNode returns the first node of an EXPLAIN (FORMAT JSON) plan
// that reads relation.
func findPlanNode(n map[string]any, relation string) map[string]any {
	if n["Relation Name"] == relation {
		return n
	}
	kids, _ := n["Plans"].([]any)
	for _, k := range kids {
		if m, ok := k.(map[string]any); ok {
			if f := findPlanNode(m, relation); f != nil {
				return f
			}
		}
	}
	return nil
}

// TestEventPublishedDuringTheTurnIsSeen: an event published while the
// turn that reaches the wait still runs is seen by the wait, and one
// published before that turn began is not.
func TestEventPublishedDuringTheTurnIsSeen(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	reached, release := make(chan struct{}), make(chan struct{})
	slow := workflow.Define("event_slow_turn", func(t *workflow.Task, _ struct{}) (int, error) {
		if _, err := workflow.Step(t, "hold", func(context.Context) (int, error) {
			close(reached)
			<-release
			return 0, nil
		}); err != nil {
			return 0, err
		}
		p, ok, err := workflow.WaitEvent[eventPayload](t, "ticks", "", 0)
		if err != nil || !ok {
			return 0, err
		}
		return p.N, nil
	})
	eng := startEngine(t, pool, testConfig(slow))
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := eng.Publish(ctx, "ticks", eventPayload{N: 1}); err != nil {
		t.Fatal(err)
	}
	run, err := slow.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-reached
	woken, err := eng.Publish(ctx, "ticks", eventPayload{N: 2})
	if err != nil || woken != 0 {
		t.Fatalf("Publish while no wait is recorded: woke %d, %v", woken, err)
	}
	close(release)
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != 2 {
		t.Errorf("the wait took the event with n %d, want 2: the one published during its turn, not the one before it", out)
	}
}

// TestEventWaitTimeoutAndBadFilter: a wait whose timeout passes reports
// it; a filter that does not compile, or is not boolean, fails the
// attempt with a *ConditionError naming the topic and the filter; a bad
// publish gets a clear error and publishes nothing.
func TestEventWaitTimeoutAndBadFilter(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	strict := workflow.Define("event_strict", func(t *workflow.Task, in eventWaitIn) (int, error) {
		_, _, err := workflow.WaitEvent[eventPayload](t, in.Topic, in.Filter, time.Second)
		return 0, err
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(eventWaiter, strict)
	cfg.MaxPayloadBytes = 512
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	run, err := eventWaiter.Start(ctx, eng, eventWaitIn{Topic: "quiet", N: -300}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != -1 {
		t.Errorf("a wait on a quiet topic: %d, %v; want its timeout (-1)", out, err)
	}

	for _, tc := range []struct{ filter, want string }{
		{`payload.kind ==`, `filter "payload.kind =="`},
		{`payload.n + 1`, "expected bool"},
		{`status.payload == "x"`, "a filter reads payload and input"},
		{`nosuch == 1`, "unknown name nosuch"},
	} {
		r, err := strict.Start(ctx, eng, eventWaitIn{Topic: "orders", Filter: tc.filter}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Result(ctx)
		if err == nil || !strings.Contains(err.Error(), `wait on topic "orders"`) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("filter %q: %v; want an error naming the topic and %q", tc.filter, err, tc.want)
		}
	}

	if _, err := eng.Publish(ctx, "", 1); err == nil || !strings.Contains(err.Error(), "topic is empty") {
		t.Errorf("publish without a topic: %v", err)
	}
	var tooLarge *workflow.PayloadTooLargeError
	if _, err := eng.Publish(ctx, "orders", strings.Repeat("x", 1000)); !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), `topic "orders"`) {
		t.Errorf("publish over the cap: %v, want a *PayloadTooLargeError naming the topic", err)
	}
	if _, err := eng.Publish(ctx, "orders", json.RawMessage(`{"a":"\u0000"}`)); err == nil {
		t.Errorf("publish with a NUL character: no error")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_events`); n != 0 {
		t.Errorf("%d events published by bad publishes", n)
	}
}

// TestEventFilterReadsTheTaskInput: each wait's filter compares the
// payload with its own task's input, so one publish wakes the waits it
// is meant for.
func TestEventFilterReadsTheTaskInput(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, testConfig(eventWaiter))
	ctx := ctxTimeout(t, 60*time.Second)
	var runs []*workflow.Run[int]
	for i := range 4 {
		r, err := eventWaiter.Start(ctx, eng, eventWaitIn{Topic: "feeds", Filter: "payload.n == input.n", N: i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	waitFor(t, "the waits", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'event' AND status = 'waiting'`) == 4
	})
	var got []int
	for _, n := range []int{2, 0} {
		woken, err := eng.Publish(ctx, "feeds", eventPayload{N: n})
		if err != nil || woken != 1 {
			t.Fatalf("publish n=%d: woke %d, %v; want 1", n, woken, err)
		}
		out, err := runs[n].Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out)
	}
	if diff := cmp.Diff([]int{2, 0}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var waiting []string
	rows, err := pool.Query(ctx, `SELECT k.input->>'n' FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id WHERE s.status = 'waiting' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	waiting, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"1", "3"}, waiting); diff != "" {
		t.Errorf("waits left (-want +got):\n%s", diff)
	}
}

// TestEventPublishedDuringAFailedAttemptOfTheTurnIsSeen: an event published
// while the first attempt of a turn runs, an attempt that then fails, is
// seen by the wait that a later attempt of the same turn suspends on: it
// was published after the turn began. An event that a wait took is not
// taken again by the task's next wait on the topic, whether the batch that
// recorded the wait or a publish woke it.
func TestEventPublishedDuringAFailedAttemptOfTheTurnIsSeen(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var eng *workflow.Engine
	var replied atomic.Bool
	wf := workflow.Define("event_failed_attempt", func(t *workflow.Task, _ struct{}) ([]int, error) {
		if _, err := workflow.Step(t, "ask", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return nil, err
		}
		if replied.CompareAndSwap(false, true) {
			// The reply comes while the first attempt of the first turn
			// runs, and then the attempt fails.
			if _, err := eng.Publish(t.Context(), "replies", eventPayload{N: 7}); err != nil {
				return nil, err
			}
			return nil, errors.New("the attempt fails after the reply came")
		}
		var got []int
		for _, w := range []struct {
			filter  string
			timeout time.Duration
		}{{"", 5 * time.Second}, {"payload.n == 8", 0}, {"", time.Second}} {
			p, ok, err := workflow.WaitEvent[eventPayload](t, "replies", w.filter, w.timeout)
			if err != nil {
				return nil, err
			}
			if !ok {
				p.N = -1
			}
			got = append(got, p.N)
		}
		return got, nil
	}, workflow.WithMaxAttempts(3))
	eng = startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second wait", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'event:replies#2' AND status = 'waiting'`) == 1
	})
	if woken, err := eng.Publish(ctx, "replies", eventPayload{N: 8}); err != nil || woken != 1 {
		t.Fatalf("Publish: woke %d, %v; want the second wait", woken, err)
	}
	got, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{7, 8, -1}, got); diff != "" {
		t.Errorf("the waits took (-want +got; -1 is a timeout):\n%s", diff)
	}
}
