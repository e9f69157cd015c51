package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// startEngine starts an engine running defs on pool, stopped when the test
// ends.
func startEngine(t *testing.T, ctx context.Context, pool *pgxpool.Pool, defs ...workflow.Definition) *workflow.Engine {
	t.Helper()
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: defs, DisableDelayProcessor: true, Logger: quiet,
		Queue: &queue.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return eng
}

// awaitWait polls the run until one of its tasks waits on a message of
// kind ("signal" or "event"), and returns the run and that wait.
func awaitWait(t *testing.T, ctx context.Context, pool *pgxpool.Pool, runID, kind string) (*workflow.RunInfo, *workflow.StepInfo) {
	t.Helper()
	for {
		info, err := workflow.Inspect(ctx, pool, runID)
		if err != nil {
			t.Fatal(err)
		}
		for i := range info.Tasks {
			for j := range info.Tasks[i].Steps {
				if s := &info.Tasks[i].Steps[j]; s.Kind == kind && s.Status == "waiting" {
					return info, s
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s never waited on a %s: %v", runID, kind, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// approval waits for the signal "approve" and returns who approved.
var approval = workflow.Define("approval", func(t *workflow.Task, order string) (string, error) {
	by, ok, err := workflow.WaitSignal[struct {
		By string `json:"by"`
	}](t, "approve", 0)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", nil
	}
	return order + " approved by " + by.By, nil
})

// TestRunsSignal sends signals with the CLI to runs that wait on them on a
// running engine, by run ID and by idempotency key, once per key, and
// refuses what cannot be sent.
func TestRunsSignal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	eng := startEngine(t, ctx, pool, approval)

	// By run ID: the run takes the payload as given.
	byID, err := approval.Start(ctx, eng, "order-7", nil)
	if err != nil {
		t.Fatal(err)
	}
	awaitWait(t, ctx, pool, byID.ID, "signal")
	code, out, errOut := braid(t, "runs", "signal", byID.ID, "approve", "--payload", `{"by": "ada", "note": [1, 2]}`, "--database-url", url)
	if want := `sent signal "approve" to run ` + byID.ID + " (approval)\n"; code != 0 || out != want || errOut != "" {
		t.Fatalf("runs signal: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if got, err := byID.Result(ctx); err != nil || got != "order-7 approved by ada" {
		t.Fatalf("the signalled run ended with %q, %v; want it approved by ada", got, err)
	}
	var payload string
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM braid_signals WHERE run_id = $1`, byID.ID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if payload != `{"by": "ada", "note": [1, 2]}` {
		t.Errorf("the signal's payload is stored as %s", payload)
	}

	// By idempotency key, with --json.
	byKey, err := approval.Start(ctx, eng, "order-8", &workflow.StartOpts{IdempotencyKey: "order:8"})
	if err != nil {
		t.Fatal(err)
	}
	awaitWait(t, ctx, pool, byKey.ID, "signal")
	code, out, errOut = braid(t, "runs", "signal", "order:8", "approve", "--by-key", "--payload", `{"by": "grace"}`, "--json", "--database-url", url)
	var sent signalView
	if code != 0 || json.Unmarshal([]byte(out), &sent) != nil {
		t.Fatalf("runs signal --by-key --json: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if want := (signalView{RunID: byKey.ID, Workflow: "approval", Signal: "approve"}); sent != want {
		t.Errorf("runs signal --by-key --json printed %+v; want %+v", sent, want)
	}
	if got, err := byKey.Result(ctx); err != nil || got != "order-8 approved by grace" {
		t.Fatalf("the run signalled by key ended with %q, %v; want it approved by grace", got, err)
	}

	// The same idempotency key twice sends once. The run does not wait on
	// "note", so the signal stays in its mailbox.
	keyed, err := approval.Start(ctx, eng, "order-9", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		code, out, errOut = braid(t, "runs", "signal", keyed.ID, "note", "--payload", `"call first"`, "--key", "note-1", "--database-url", url)
		if want := `sent signal "note" to run ` + keyed.ID + ` (approval), once for idempotency key "note-1"` + "\n"; code != 0 || out != want {
			t.Fatalf("runs signal --key: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
		}
	}
	var notes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_signals WHERE run_id = $1 AND name = 'note'`, keyed.ID).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if notes != 1 {
		t.Errorf("a signal sent twice with one idempotency key is in the mailbox %d times; want once", notes)
	}

	const ghost = "0195a1b2-ffff-7000-8000-000000000000"
	checkErrors(t, []string{"--database-url", url}, []errorCase{
		{[]string{"runs", "signal", keyed.ID, "approve", "--payload", `{"by": ada}`}, 2, "--payload is not valid JSON: invalid character 'a' looking for beginning of value"},
		{[]string{"runs", "signal", keyed.ID, "approve", "--payload", ""}, 2, "--payload is not valid JSON: unexpected end of JSON input"},
		{[]string{"runs", "signal", keyed.ID, "approve", "--payload", `{"by": "ada"} {}`}, 2, "--payload is not valid JSON"},
		{[]string{"runs", "signal", ghost, "approve"}, 1, "run " + ghost + " not found"},
		{[]string{"runs", "signal", "order:404", "approve", "--by-key"}, 1, `no run has the idempotency key "order:404"`},
		{[]string{"runs", "signal", byID.ID, "approve", "--payload", `{"by": "ada"}`}, 1,
			"run " + byID.ID + ` is already completed; signal "approve" is not sent: a finished run takes no signals`},
		{[]string{"runs", "signal", "order:8", "approve", "--by-key"}, 1,
			"run " + byKey.ID + ` is already completed; signal "approve" is not sent`},
		{[]string{"runs", "signal", "order-7", "approve"}, 2, `invalid run ID "order-7": a run ID is a UUID (with --by-key, RUN is the run's idempotency key)`},
		{[]string{"runs", "signal", keyed.ID, ""}, 2, "signal name is empty"},
		{[]string{"runs", "signal", keyed.ID, strings.Repeat("n", workflow.MessageNameMax+1)}, 2, "bytes, over the limit of 200"},
		{[]string{"runs", "signal", keyed.ID, "approve", "--key", strings.Repeat("k", 501)}, 2, "--key is 501 bytes, over the limit of 500"},
		{[]string{"runs", "signal", keyed.ID}, 2, "missing argument NAME"},
		{[]string{"runs", "signal", keyed.ID, "approve", "now"}, 2, `unexpected argument "now"`},
		{[]string{"runs", "signal", keyed.ID, "approve", "--payload", `"` + strings.Repeat("x", 1<<20) + `"`}, 1, "--payload is 1048578 bytes, over the limit of 1048576 bytes"},
	})
	// Nothing was sent by the failed commands.
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_signals`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 3 {
		t.Errorf("braid_signals holds %d signals; want the 3 sent", total)
	}
}

// TestRunsShowPendingSignalAndDeadline shows a run whose root waits on a
// signal with a timeout, and whose run has a deadline: the wait is listed
// under its task with its name and when it times out, and the header says
// the deadline.
func TestRunsShowPendingSignalAndDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	sender := workflow.Define("sender", func(t *workflow.Task, _ struct{}) (bool, error) {
		_, ok, err := workflow.WaitSignal[struct{}](t, "send-now", time.Hour)
		return ok, err
	})
	eng := startEngine(t, ctx, pool, sender)
	run, err := sender.Start(ctx, eng, struct{}{}, &workflow.StartOpts{Timeout: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	info, wait := awaitWait(t, ctx, pool, run.ID, "signal")
	if wait.ResumeAt == nil || info.DeadlineAt == nil {
		t.Fatalf("the wait's timeout %v or the run's deadline %v is missing", wait.ResumeAt, info.DeadlineAt)
	}

	code, out, errOut := braid(t, "runs", "show", run.ID, "--database-url", url)
	if code != 0 {
		t.Fatalf("runs show: code %d: %s", code, errOut)
	}
	if want := "\ndeadline:  " + ts(info.DeadlineAt) + " (timeout 2h)\n"; !strings.Contains(out, want) {
		t.Errorf("runs show does not say the deadline %q:\n%s", want, out)
	}
	line := regexp.MustCompile(`(?m)^  signal:send-now +signal +waiting +- +- +waiting on signal "send-now" \(times out in ([0-9hms]+), at (.+)\)$`)
	m := line.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("runs show does not list the wait on send-now under its task:\n%s", out)
	}
	if in, err := time.ParseDuration(m[1]); err != nil || in <= 0 || in > time.Hour {
		t.Errorf("the wait times out in %q; want a time within the hour", m[1])
	}
	if m[2] != ts(wait.ResumeAt) {
		t.Errorf("the wait times out at %s; want %s", m[2], ts(wait.ResumeAt))
	}

	// --json is the run as Inspect gives it, deadline and wait included.
	_, out, _ = braid(t, "runs", "show", run.ID, "--json", "--database-url", url)
	var got workflow.RunInfo
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("runs show --json: %v\n%s", err, out)
	}
	if got.Timeout != 2*time.Hour || got.DeadlineAt == nil || !got.DeadlineAt.Equal(*info.DeadlineAt) ||
		len(got.Tasks) != 1 || len(got.Tasks[0].Steps) != 1 || got.Tasks[0].Steps[0].WaitOn != "send-now" {
		t.Errorf("runs show --json: %s", out)
	}

	// Once signalled, the wait is no longer pending.
	if code, _, errOut := braid(t, "runs", "signal", run.ID, "send-now", "--database-url", url); code != 0 {
		t.Fatalf("runs signal: code %d: %s", code, errOut)
	}
	if ok, err := run.Result(ctx); err != nil || !ok {
		t.Fatalf("the signalled run ended with %v, %v; want true", ok, err)
	}
	_, out, _ = braid(t, "runs", "show", run.ID, "--database-url", url)
	if strings.Contains(out, "waiting on") || !strings.Contains(out, "(timeout 2h)") {
		t.Errorf("runs show of the finished run:\n%s", out)
	}
}

// TestWaitDetail words pending waits, counted from a fixed moment.
func TestWaitDetail(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	for _, tc := range []struct {
		step workflow.StepInfo
		want string
	}{
		{workflow.StepInfo{Kind: "signal", WaitOn: "send-now", ResumeAt: at(3*time.Minute + 12*time.Second)},
			`waiting on signal "send-now" (times out in 3m12s, at 2026-03-02 09:03:12)`},
		{workflow.StepInfo{Kind: "signal", WaitOn: "approve", ResumeAt: at(24 * time.Hour)},
			`waiting on signal "approve" (times out in 24h, at 2026-03-03 09:00:00)`},
		{workflow.StepInfo{Kind: "signal", WaitOn: "approve", ResumeAt: at(90 * time.Minute)},
			`waiting on signal "approve" (times out in 1h30m, at 2026-03-02 10:30:00)`},
		{workflow.StepInfo{Kind: "signal", WaitOn: "approve", ResumeAt: at(200 * time.Millisecond)},
			`waiting on signal "approve" (times out in 1s, at 2026-03-02 09:00:00)`},
		{workflow.StepInfo{Kind: "event", WaitOn: "feeds", Filter: "payload.id == input.id"},
			`waiting on event "feeds" filter payload.id == input.id (no timeout)`},
		{workflow.StepInfo{Kind: "event", WaitOn: "feeds", ResumeAt: at(-5 * time.Second)},
			`waiting on event "feeds" (timeout passed 5s ago, at 2026-03-02 08:59:55)`},
		{workflow.StepInfo{Kind: "event", WaitOn: "feeds", Filter: strings.Repeat("payload.a && ", 10) + "true"},
			`waiting on event "feeds" filter payload.a && payload.a && payload.a && payload.a && payload… (no timeout)`},
	} {
		if got := waitDetail(&tc.step, now); got != tc.want {
			t.Errorf("waitDetail(%+v):\n got %s\nwant %s", tc.step, got, tc.want)
		}
	}
	var got []string
	for _, d := range []time.Duration{time.Hour, 90 * time.Minute, 10 * time.Minute, 45 * time.Second, time.Hour + 5*time.Second, 0} {
		got = append(got, shortDuration(d))
	}
	if diff := cmp.Diff([]string{"1h", "1h30m", "10m", "45s", "1h0m5s", "0s"}, got); diff != "" {
		t.Errorf("shortDuration (-want +got):\n%s", diff)
	}
}

// TestRunsShowDetachedChild: runs show lists a detached child's start
// under its parent, with the child's run ID.
func TestRunsShowDetachedChild(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	audit := workflow.Define("audit", func(t *workflow.Task, n int) (int, error) { return n, nil })
	parent := workflow.Define("audited", func(t *workflow.Task, _ struct{}) (string, error) {
		id := workflow.Go(t, "audit", audit, 1, workflow.Detached()).RunID()
		_, _, err := workflow.WaitSignal[struct{}](t, "done", 0)
		return id, err
	})
	eng := startEngine(t, ctx, pool, parent, audit)
	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	awaitWait(t, ctx, pool, run.ID, "signal")
	var child string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM braid_runs WHERE workflow = 'audit'`).Scan(&child); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := braid(t, "runs", "show", run.ID, "--database-url", url)
	if code != 0 {
		t.Fatalf("runs show: code %d: %s", code, errOut)
	}
	line := regexp.MustCompile(`(?m)^  audit +detached +(\S+ )?completed +- +- +run ` + regexp.QuoteMeta(child) + `$`)
	if !line.MatchString(out) {
		t.Errorf("runs show does not list the detached child's start with its run %s:\n%s", child, out)
	}
}
