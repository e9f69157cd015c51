package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

type runEventProgress struct {
	Done, Total int
}

// TestSetEventThenGetEventReturnsTheTypedValue sets events in a run and
// reads them from outside it, typed, through GetEvent, the run's handle
// and Inspect.
func TestSetEventThenGetEventReturnsTheTypedValue(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("run_event_set", func(t *workflow.Task, total int) (string, error) {
		if err := workflow.SetEvent(t, "progress", runEventProgress{Done: total - 1, Total: total}); err != nil {
			return "", err
		}
		if err := workflow.SetEvent(t, "phase", "sending"); err != nil {
			return "", err
		}
		return "done", nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "done" {
		t.Fatalf("Result = %q, %v", out, err)
	}
	got, err := workflow.GetEvent[runEventProgress](ctx, eng, run.ID, "progress", 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(runEventProgress{Done: 2, Total: 3}, got); diff != "" {
		t.Errorf("GetEvent (-want +got):\n%s", diff)
	}
	var phase string
	if err := run.GetEvent(ctx, "phase", time.Second, &phase); err != nil || phase != "sending" {
		t.Errorf("Run.GetEvent = %q, %v; want sending", phase, err)
	}
	if err := run.GetEvent(ctx, "phase", 0, phase); err == nil || !strings.Contains(err.Error(), "non-nil pointer") {
		t.Errorf("Run.GetEvent into a string = %v, want an error asking for a pointer", err)
	}
	if err := run.GetEvent(ctx, "phase", 0, nil); err == nil || !strings.Contains(err.Error(), "non-nil pointer") {
		t.Errorf("Run.GetEvent into nil = %v, want an error asking for a pointer", err)
	}
	var wrongType int
	var encErr *workflow.EncodeError
	if err := run.GetEvent(ctx, "phase", 0, &wrongType); !errors.As(err, &encErr) {
		t.Errorf("Run.GetEvent of a string into an int = %v, want an *EncodeError", err)
	}

	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, ev := range info.Events {
		keys = append(keys, ev.Key+"="+string(ev.Value))
		if ev.TaskID != info.Tasks[0].ID || ev.UpdatedAt.IsZero() {
			t.Errorf("event %s: task %s, updated %s; want task %s and a time", ev.Key, ev.TaskID, ev.UpdatedAt, info.Tasks[0].ID)
		}
	}
	if diff := cmp.Diff([]string{`phase="sending"`, `progress={"Done": 2, "Total": 3}`}, keys); diff != "" {
		t.Errorf("RunInfo.Events, sorted by key (-want +got):\n%s", diff)
	}
	var kinds []string
	for _, s := range info.Tasks[0].Steps {
		kinds = append(kinds, s.Name+":"+s.Kind+":"+s.Status)
	}
	if diff := cmp.Diff([]string{"set-event:phase:set_event:completed", "set-event:progress:set_event:completed"}, slices.Sorted(slices.Values(kinds))); diff != "" {
		t.Errorf("recorded steps (-want +got):\n%s", diff)
	}
}

// listening reports whether the engine's notifier LISTENs for run events.
func listening(t *testing.T, pool *pgxpool.Pool) bool {
	return count(t, pool, `SELECT count(*) FROM pg_stat_activity
		 WHERE datname = current_database() AND query LIKE 'LISTEN %`+workflow.RunEventChannel+`%'`) > 0
}

// TestGetEventWaitsUntilTheRunSetsIt waits for an event that the run sets
// later. The fallback poll is longer than the test's deadline, so the
// value can only arrive through the notification.
func TestGetEventWaitsUntilTheRunSetsIt(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	release := make(chan struct{})
	wf := workflow.Define("run_event_wait", func(t *workflow.Task, _ struct{}) (int, error) {
		select {
		case <-release:
		case <-t.Context().Done():
			return 0, t.Context().Err()
		}
		if err := workflow.SetEvent(t, "answer", 42); err != nil {
			return 0, err
		}
		// The run goes on: the end of the run does not wake GetEvent.
		return 0, t.Delay("after", time.Hour)
	})
	cfg := testConfig(wf)
	cfg.ResultPollInterval = time.Hour
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workflow.GetEvent[int](ctx, eng, run.ID, "answer", 0); !errors.Is(err, workflow.ErrEventNotSet) {
		t.Fatalf("GetEvent before the set = %v, want ErrEventNotSet", err)
	}
	type result struct {
		v   int
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := workflow.GetEvent[int](ctx, eng, run.ID, "answer", time.Hour)
		got <- result{v, err}
	}()
	waitFor(t, "GetEvent to listen", 20*time.Second, func() bool { return listening(t, pool) })
	close(release)
	r := <-got
	if r.err != nil || r.v != 42 {
		t.Fatalf("GetEvent = %d, %v; want 42", r.v, r.err)
	}
}

// TestSetEventSurvivesReplay sets a key, suspends, and sets it again on a
// later turn: the second value wins, and the replayed first SetEvent
// writes nothing.
func TestSetEventSurvivesReplay(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	// Every write of braid_run_events, in order.
	execSQL(t, pool, `CREATE TABLE run_event_writes (id bigint GENERATED ALWAYS AS IDENTITY, key text, value jsonb)`)
	execSQL(t, pool, `CREATE FUNCTION run_event_write() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO run_event_writes (key, value) VALUES (NEW.key, NEW.value); RETURN NEW; END $$`)
	execSQL(t, pool, `CREATE TRIGGER run_event_write AFTER INSERT OR UPDATE ON braid_run_events
		FOR EACH ROW EXECUTE FUNCTION run_event_write()`)
	var turns atomic.Int64
	wf := workflow.Define("run_event_replay", func(t *workflow.Task, _ struct{}) (int64, error) {
		turns.Add(1)
		if err := workflow.SetEvent(t, "phase", "one"); err != nil {
			return 0, err
		}
		if err := t.Delay("nap", 10*time.Millisecond); err != nil {
			return 0, err
		}
		if err := workflow.SetEvent(t, "phase", "two"); err != nil {
			return 0, err
		}
		if err := t.Delay("nap", 10*time.Millisecond); err != nil {
			return 0, err
		}
		return turns.Load(), nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("the workflow ran %d turns, want 3", n)
	}
	if v, err := workflow.GetEvent[string](ctx, eng, run.ID, "phase", 0); err != nil || v != "two" {
		t.Fatalf("GetEvent = %q, %v; want two", v, err)
	}
	var writes []string
	rows, err := pool.Query(ctx, `SELECT key || '=' || value::text FROM run_event_writes ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		writes = append(writes, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`phase="one"`, `phase="two"`}, writes); diff != "" {
		t.Errorf("writes of the event, in order (-want +got):\n%s", diff)
	}
}

// TestSetEventReplayOfAnotherCallIsNotDeterministic replays a SetEvent
// where the record holds a step of the same name: the turn fails with the
// divergence, whatever the code makes of the error.
func TestSetEventReplayOfAnotherCallIsNotDeterministic(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var turns atomic.Int64
	wf := workflow.Define("run_event_nondeterministic", func(t *workflow.Task, _ struct{}) (string, error) {
		if turns.Add(1) == 1 {
			if _, err := workflow.Step(t, "set-event:k", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
				return "", err
			}
			return "", t.Delay("nap", 0)
		}
		err := workflow.SetEvent(t, "k", 1)
		if err == nil {
			return "", errors.New("SetEvent replayed over a step")
		}
		return err.Error(), nil
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), `diverged from its recorded history at durable call 0: recorded step "set-event:k", called SetEvent "k"`) {
		t.Errorf("SetEvent over a recorded step: %v, want the run failed by the divergence, naming both calls", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_run_events`); n != 0 {
		t.Errorf("%d events set by a diverged turn", n)
	}
}

// TestSetEventOfACancelledTaskRecordsNothing holds a turn while its task
// is cancelled, as Cancel on another process does before this turn hears
// of it: the turn's SetEvent fails and nothing is set or recorded.
func TestSetEventOfACancelledTaskRecordsNothing(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	entered, release := make(chan struct{}), make(chan struct{})
	setErr := make(chan error, 1)
	var turns atomic.Int64
	wf := workflow.Define("run_event_zombie", func(t *workflow.Task, _ struct{}) (int, error) {
		if turns.Add(1) > 1 {
			return 0, errors.New("a later turn ran")
		}
		close(entered)
		<-release
		err := workflow.SetEvent(t, "state", "zombie")
		setErr <- err
		return 0, err
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	execSQL(t, pool, `UPDATE braid_tasks SET status = 'cancelled', finished_at = now() WHERE run_id = $1`, run.ID)
	close(release)
	if err := <-setErr; err == nil || !strings.Contains(err.Error(), "no longer running") {
		t.Fatalf("SetEvent of a cancelled task = %v, want an error saying the task is no longer running", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_run_events`); n != 0 {
		t.Errorf("%d events set by a cancelled task, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'set_event'`); n != 0 {
		t.Errorf("%d SetEvent calls recorded for a cancelled task, want 0", n)
	}
	if _, err := workflow.GetEvent[string](ctx, eng, run.ID, "state", 0); !errors.Is(err, workflow.ErrEventNotSet) {
		t.Errorf("GetEvent = %v, want ErrEventNotSet", err)
	}
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
}

// TestGetEventErrors checks what GetEvent returns for a key that is not
// set, a run that finished without setting it, bad input, an unknown run
// and an ended context.
func TestGetEventErrors(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	sleeper := workflow.Define("run_event_sleeper", func(t *workflow.Task, _ struct{}) (int, error) {
		return 0, t.Delay("long", time.Hour)
	})
	quick := workflow.Define("run_event_quick", func(t *workflow.Task, _ struct{}) (int, error) { return 1, nil })
	cfg := testConfig(sleeper, quick)
	cfg.ResultPollInterval = time.Hour // only notifications wake a wait
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	sleeping, err := sleeper.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	finished, err := quick.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Polled, not Result: with an hour-long poll, Result would rest on a
	// notification that may come before its listener does.
	waitFor(t, "the quick run to complete", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'completed'`, finished.ID) == 1
	})

	// Not set within the timeout.
	_, err = workflow.GetEvent[int](ctx, eng, sleeping.ID, "missing", 50*time.Millisecond)
	if !errors.Is(err, workflow.ErrEventNotSet) || !strings.Contains(err.Error(), sleeping.ID) || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("GetEvent of an unset key = %v, want ErrEventNotSet naming the run and the key", err)
	}
	// A finished run sets nothing more: no wait, though the timeout is
	// longer than the test's deadline.
	_, err = workflow.GetEvent[int](ctx, eng, finished.ID, "missing", time.Hour)
	if !errors.Is(err, workflow.ErrEventNotSet) || !strings.Contains(err.Error(), "completed without setting") {
		t.Errorf("GetEvent on a finished run = %v, want ErrEventNotSet at once", err)
	}
	// A run that ends while GetEvent waits ends the wait. The listener of
	// the waits above closes once they end; it must be gone first, or the
	// LISTEN seen below could be its, and the run's end could come before
	// this wait's listener listens.
	waitFor(t, "the listener of the earlier waits to close", 20*time.Second, func() bool { return !listening(t, pool) })
	waited := make(chan error, 1)
	go func() {
		_, err := workflow.GetEvent[int](ctx, eng, sleeping.ID, "missing", time.Hour)
		waited <- err
	}()
	waitFor(t, "GetEvent to listen", 20*time.Second, func() bool { return listening(t, pool) })
	if err := sleeping.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, workflow.ErrEventNotSet) || !strings.Contains(err.Error(), "cancelled without setting") {
		t.Errorf("GetEvent on a run cancelled while it waited = %v, want ErrEventNotSet", err)
	}

	if _, err := workflow.GetEvent[int](ctx, eng, finished.ID, "k", -time.Second); err == nil || !strings.Contains(err.Error(), "timeout -1s is negative") {
		t.Errorf("GetEvent with a negative timeout = %v, want an error naming it", err)
	}
	if _, err := workflow.GetEvent[int](ctx, eng, "digest-42", "k", 0); !errors.Is(err, workflow.ErrRunNotFound) || !strings.Contains(err.Error(), `"digest-42" is not a UUID`) {
		t.Errorf("GetEvent with a bad run ID = %v, want an error naming it", err)
	}
	if _, err := workflow.GetEvent[int](ctx, eng, "01a20a18-f747-7f1c-9277-183ffce9dd2e", "k", time.Hour); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("GetEvent on an unknown run = %v, want ErrRunNotFound", err)
	}
	if _, err := workflow.GetEvent[int](ctx, eng, finished.ID, "", 0); err == nil || !strings.Contains(err.Error(), "event key is empty") {
		t.Errorf("GetEvent with an empty key = %v, want an error saying so", err)
	}
	if _, err := workflow.GetEvent[int](ctx, eng, finished.ID, strings.Repeat("k", 201), 0); err == nil || !strings.Contains(err.Error(), "201 bytes, over the limit of 200") {
		t.Errorf("GetEvent with a long key = %v, want an error naming the limit", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := workflow.GetEvent[int](cancelled, eng, finished.ID, "k", time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("GetEvent with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestSetEventRefusesWhatItCannotKeep checks SetEvent's errors: bad keys,
// and a value over the payload cap, which fails the attempt.
func TestSetEventRefusesWhatItCannotKeep(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	keyErrs := make(chan []string, 1)
	setErr := make(chan error, 1)
	wf := workflow.Define("run_event_too_large", func(t *workflow.Task, _ struct{}) (int, error) {
		var msgs []string
		for _, key := range []string{"", strings.Repeat("k", 201), "a\x00b"} {
			err := workflow.SetEvent(t, key, 1)
			if err == nil {
				msgs = append(msgs, "no error for key "+key)
				continue
			}
			msgs = append(msgs, err.Error())
		}
		keyErrs <- msgs
		err := workflow.SetEvent(t, "big", strings.Repeat("x", 200))
		setErr <- err
		return 0, err
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(wf)
	cfg.MaxPayloadBytes = 100
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := <-keyErrs
	for i, want := range []string{"event key is empty", "201 bytes, over the limit of 200 bytes", "not UTF-8 text without NUL"} {
		if !strings.Contains(msgs[i], want) {
			t.Errorf("SetEvent with bad key %d = %q, want it to say %q", i, msgs[i], want)
		}
	}
	var tooLarge *workflow.PayloadTooLargeError
	if err := <-setErr; !errors.As(err, &tooLarge) || !strings.Contains(tooLarge.What, `event "big"`) || tooLarge.Limit != 100 {
		t.Fatalf("SetEvent over the cap = %v, want a *PayloadTooLargeError naming the key and the limit", err)
	}
	var runErr *workflow.RunError
	if _, err := run.Result(ctx); !errors.As(err, &runErr) || runErr.Status != "failed" || !strings.Contains(runErr.Message, `event "big"`) {
		t.Fatalf("Result = %v, want the run failed with the payload error", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_run_events`); n != 0 {
		t.Errorf("%d events set, want 0", n)
	}
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Events != nil {
		t.Errorf("RunInfo.Events = %+v, want none", info.Events)
	}
	raw, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), `"events"`) {
		t.Errorf("RunInfo of a run without events encodes events: %s", raw)
	}
}

// NewEngine refuses a negative poll interval of the waits for results and
// events, naming it, as it refuses the delay processor's: a negative one
// would make every Run.Result and GetEvent read the database again at
// once, without a pause, for as long as it waits.
func TestPollIntervalsMustNotBeNegative(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	for _, tc := range []struct {
		set  func(*workflow.Config)
		want string
	}{
		{func(c *workflow.Config) { c.ResultPollInterval = -time.Second }, "ResultPollInterval -1s is negative"},
		{func(c *workflow.Config) { c.DelayPollInterval = -time.Second }, "DelayPollInterval -1s is negative"},
		{func(c *workflow.Config) { c.DelayBatchSize = -1 }, "DelayBatchSize -1 is negative"},
	} {
		cfg := testConfig()
		tc.set(cfg)
		if _, err := workflow.NewEngine(pool, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewEngine: %v; want an error naming %q", err, tc.want)
		}
	}
}
