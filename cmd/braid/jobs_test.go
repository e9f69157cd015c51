package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestJobsRetryAndPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := seeded(t)
	pool := testutil.Pool(t, url)
	job := func(id int64) (state string, priority, maxAttempts int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT state::text, priority, max_attempts FROM river_job WHERE id = $1`, id).Scan(&state, &priority, &maxAttempts); err != nil {
			t.Fatal(err)
		}
		return state, priority, maxAttempts
	}

	code, out, errOut := braid(t, "jobs", "retry", "6", "7", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("jobs retry: code %d: %s", code, errOut)
	}
	var retried []jobView
	if err := json.Unmarshal([]byte(out), &retried); err != nil {
		t.Fatalf("jobs retry --json: %v\n%s", err, out)
	}
	var got []string
	for _, j := range retried {
		got = append(got, j.Kind+" "+string(j.State))
	}
	if diff := cmp.Diff([]string{"resize_image available", "send_email available"}, got); diff != "" {
		t.Errorf("retried jobs (-want +got):\n%s", diff)
	}
	if state, _, maxAttempts := job(6); state != "available" || maxAttempts != 4 {
		t.Errorf("dead letter 6 after retry: %s with %d max attempts; want available with one more attempt (4)", state, maxAttempts)
	}
	_, out, _ = braid(t, "jobs", "dead", "--json", "--database-url", url)
	var dead []jobView
	if err := json.Unmarshal([]byte(out), &dead); err != nil || len(dead) != 1 || dead[0].ID != 9 {
		t.Errorf("jobs dead after retrying dead letters 6 and 7: %v; want only the turn job 9:\n%s", err, out)
	}

	code, out, errOut = braid(t, "jobs", "priority", "2", "low", "--database-url", url)
	if code != 0 || !strings.Contains(out, "send_email") || !strings.Contains(out, " low ") {
		t.Fatalf("jobs priority 2 low: code %d\n%s%s", code, out, errOut)
	}
	if _, p, _ := job(2); p != 4 {
		t.Errorf("job 2 has priority %d after jobs priority low; want 4", p)
	}
	if code, _, errOut = braid(t, "jobs", "priority", "2", "1", "--database-url", url); code != 0 {
		t.Fatalf("jobs priority 2 1: code %d: %s", code, errOut)
	}
	if _, p, _ := job(2); p != 1 {
		t.Errorf("job 2 has priority %d after jobs priority 1; want 1", p)
	}
}

// TestJobsDeadShowsTurnRuns lists the dead turn job of the seed with its
// run, in the table and in JSON; other dead letters have none.
func TestJobsDeadShowsTurnRuns(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	code, out, errOut := braid(t, "jobs", "dead", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("jobs dead --json: code %d: %s", code, errOut)
	}
	var dead []jobView
	if err := json.Unmarshal([]byte(out), &dead); err != nil {
		t.Fatalf("jobs dead --json: %v\n%s", err, out)
	}
	runs := map[int64]*workflow.TurnRun{}
	for _, j := range dead {
		runs[j.ID] = j.Run
	}
	want := map[int64]*workflow.TurnRun{
		9: {RunID: panicRun, TaskID: "0195a1b2-1000-7000-8000-000000000007", Workflow: "import"},
		6: nil,
		7: nil,
	}
	if diff := cmp.Diff(want, runs); diff != "" {
		t.Errorf("runs of the dead letters (-want +got):\n%s", diff)
	}
}

// TestJobsShowJSON shows a running job with its progress and a dead turn
// job with its run and its errors, stack included.
func TestJobsShowJSON(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	show := func(id string) jobView {
		t.Helper()
		code, out, errOut := braid(t, "jobs", "show", id, "--json", "--database-url", url)
		if code != 0 {
			t.Fatalf("jobs show %s: code %d: %s", id, code, errOut)
		}
		var v jobView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("jobs show %s --json: %v\n%s", id, err, out)
		}
		return v
	}
	running := show("3")
	beat := time.Date(2026, 3, 2, 9, 6, 30, 0, time.UTC)
	want := &queue.JobProgress{JobID: 3, Kind: "fetch_feed", Attempt: 1, Percent: 40, Message: "fetched 4 of 10 entries", HeartbeatAt: &beat, UpdatedAt: beat}
	if diff := cmp.Diff(want, running.Progress, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" || running.State != "running" || running.Run != nil {
		t.Errorf("jobs show 3: state %s, run %v, progress (-want +got):\n%s", running.State, running.Run, diff)
	}
	turn := show(deadTurnJob)
	if turn.Run == nil || turn.Run.RunID != panicRun || turn.Progress != nil || len(turn.Errors) != 2 ||
		!strings.Contains(turn.Errors[1].Trace, "example.com/importer.parseRow") || turn.LastError != "PanicError: runtime error: index out of range [3] with length 3" {
		t.Errorf("jobs show %s: %+v", deadTurnJob, turn)
	}
}

// TestJobsRetryTurnJob retries a dead turn job: its run is retried through
// the engine, so the failed task gets a new turn, and the dead job itself
// stays as it was.
func TestJobsRetryTurnJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := seeded(t)
	pool := testutil.Pool(t, url)
	const task = "0195a1b2-1000-7000-8000-000000000007"

	code, out, errOut := braid(t, "jobs", "retry", deadTurnJob, "--database-url", url)
	if want := "job 9 is a turn job of run " + panicRun + " (import): retried the run, which is now pending\n"; code != 0 || out != want {
		t.Fatalf("jobs retry 9: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	run, err := workflow.Inspect(ctx, pool, panicRun)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "pending" || run.Tasks[0].Status != "pending" {
		t.Errorf("after jobs retry 9 the run is %s and its root %s; want both pending, its turn queued", run.Status, run.Tasks[0].Status)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = 9`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	var turns int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND braid_turn_task(unique_key, args) = $2::text::uuid AND state = 'available'`, workflow.TaskKind, task).Scan(&turns); err != nil {
		t.Fatal(err)
	}
	if state != "discarded" || turns != 1 {
		t.Errorf("after jobs retry 9: job 9 is %s and the task has %d available turns; want discarded and 1", state, turns)
	}

	// The run is pending now: a second retry changes nothing and says why.
	code, out, errOut = braid(t, "jobs", "retry", "6", deadTurnJob, "--database-url", url)
	if want := "braid jobs: run " + panicRun + " is pending; only a failed or cancelled run can be retried, so its turn jobs cannot be\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("jobs retry 6 9 again: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if err := pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = 6`).Scan(&state); err != nil || state != "discarded" {
		t.Errorf("a jobs retry refused for its turn job retried job 6 anyway: %s, %v", state, err)
	}

	// Cancelled, the run can be retried again through its turn job, beside
	// a plain job; JSON says which was retried how.
	if code, _, errOut := braid(t, "runs", "cancel", panicRun, "--database-url", url); code != 0 {
		t.Fatalf("runs cancel: %s", errOut)
	}
	code, out, errOut = braid(t, "jobs", "retry", "6", deadTurnJob, "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("jobs retry 6 9 --json: code %d: %s", code, errOut)
	}
	var retried []jobView
	if err := json.Unmarshal([]byte(out), &retried); err != nil {
		t.Fatalf("jobs retry --json: %v\n%s", err, out)
	}
	type line struct {
		ID      int64
		State   string
		Retried string
		Run     string
	}
	var got []line
	for _, j := range retried {
		l := line{j.ID, string(j.State), j.Retried, ""}
		if j.Run != nil {
			l.Run = j.Run.RunID
		}
		got = append(got, l)
	}
	if diff := cmp.Diff([]line{{6, "available", "job", ""}, {9, "discarded", "run", panicRun}}, got); diff != "" {
		t.Errorf("jobs retry 6 9 --json (-want +got):\n%s", diff)
	}
}

// TestJobsRetryTurnJobWithoutTask refuses a turn job whose task is gone:
// there is no run to retry.
func TestJobsRetryTurnJobWithoutTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := seeded(t)
	pool := testutil.Pool(t, url)
	if _, err := pool.Exec(ctx, `INSERT INTO river_job (id, state, attempt, max_attempts, finalized_at, args, kind, queue)
		VALUES (50, 'discarded', 1, 1, now(), '{"task_id": "0195a1b2-1000-7000-8000-0000000000ff", "workflow": "gone"}', $1, 'default')`, workflow.TaskKind); err != nil {
		t.Fatal(err)
	}
	checkErrors(t, []string{"--database-url", url}, []errorCase{
		{[]string{"jobs", "retry", "50"}, 1, "job 50 is a turn job whose task no longer exists (its run was deleted); there is nothing to retry"},
	})
	code, out, _ := braid(t, "jobs", "dead", "--database-url", url)
	if code != 0 || !strings.Contains(out, "\n50  braid_task") {
		t.Errorf("jobs dead with a turn job without its task:\n%s", out)
	}
}

// TestJobsRetryInterruptedChangesNoPlainJob retries a plain dead letter and
// a turn job together, and is interrupted (^C) while the run's retry waits
// for a turn of it that still runs: the command fails, and the plain job is
// still as it was, since the runs are retried first and the plain jobs
// last.
func TestJobsRetryInterruptedChangesNoPlainJob(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	pool := testutil.Pool(t, url)
	bg := context.Background()
	// A turn of the failed import's root, still running.
	if _, err := pool.Exec(bg, `INSERT INTO river_job (id, state, attempt, max_attempts, attempted_at, args, kind, queue)
		VALUES (60, 'running', 1, 2, now(), '{"task_id": "0195a1b2-1000-7000-8000-000000000007", "workflow": "import"}', $1, 'default')`, workflow.TaskKind); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"jobs", "retry", "6", deadTurnJob, "--database-url", url}, &out, &errOut)
	var state string
	if err := pool.QueryRow(bg, `SELECT state::text FROM river_job WHERE id = 6`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if code == 0 || state != "discarded" {
		t.Errorf("jobs retry 6 9, interrupted while the run waits for its turn: code %d, stderr %q, job 6 %s; want a failure and job 6 discarded still", code, errOut.String(), state)
	}
}
