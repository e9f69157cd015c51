package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

func dispatchCount(t *testing.T, f *fixture, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDispatchJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	jobsInsert(t, f, rivertype.JobStateCompleted, nil) // kind "report" is known
	if _, err := f.pool.Exec(ctx, `INSERT INTO braid_recurring (kind, key, next_run_at) VALUES ('fetch_feed', 'feed-1', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO braid_schedules (name, expression, target_type, target, next_run_at) VALUES
		('nightly-cleanup', '@daily', 'job', 'cleanup', now() + interval '1 day'),
		('nightly-digest', '@daily', 'workflow', 'send_digest', now() + interval '1 day')`); err != nil {
		t.Fatal(err)
	}
	var known KnownNames
	f.call("GET", "/api/admin/dispatch/known", nil, 200, &known)
	if diff := cmp.Diff(KnownNames{Kinds: []string{"cleanup", "fetch_feed", "report"}, Workflows: []string{"send_digest"}}, known); diff != "" {
		t.Errorf("known names (-want +got):\n%s", diff)
	}

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	var res DispatchJobResponse
	f.call("POST", "/api/admin/dispatch/job", map[string]any{
		"kind": "report", "args": map[string]any{"region": "apac", "pages": 3},
		"queue": "reports", "priority": "high", "max_attempts": 5, "scheduled_at": at, "tags": []string{"manual"},
		"idempotency_key": "report:apac",
	}, 201, &res)
	job := res.Job
	if res.Existing || job.Kind != "report" || job.Queue != "reports" || job.Priority != int(queue.PriorityHigh) || job.MaxAttempts != 5 ||
		job.State != "scheduled" || !job.ScheduledAt.Equal(at) || !cmp.Equal(job.Tags, []string{"manual"}) {
		t.Errorf("dispatched job = %+v", job)
	}
	var args map[string]any
	if err := json.Unmarshal(job.Args, &args); err != nil || args["region"] != "apac" || args["pages"] != float64(3) {
		t.Errorf("args = %s", job.Args)
	}
	// The same key returns the same job, with 200.
	var again DispatchJobResponse
	f.call("POST", "/api/admin/dispatch/job", map[string]any{"kind": "report", "args": map[string]any{}, "unique_key": "report:apac"}, 200, &again)
	if !again.Existing || again.Job.ID != job.ID {
		t.Errorf("repeated key: %+v, want job %d existing", again, job.ID)
	}
	// Kinds of schedules and recurring jobs are known; args default to {}.
	f.call("POST", "/api/admin/dispatch/job", map[string]any{"kind": "fetch_feed", "priority": 75}, 201, &res)
	if string(res.Job.Args) != "{}" || res.Job.Priority != int(queue.PriorityHigh) || res.Job.State != "available" {
		t.Errorf("fetch_feed job = %+v", res.Job)
	}
	jobsAudited(t, f, "dispatch.job", res.Job.ID, "kind:fetch_feed")

	before := dispatchCount(t, f, `SELECT count(*) FROM river_job`)
	for _, tc := range []struct {
		name string
		body any
		want int
		says string
	}{
		{"unknown kind", map[string]any{"kind": "reprot"}, 422, `unknown job kind \"reprot\"`},
		{"turn kind", map[string]any{"kind": workflow.TaskKind, "force": true}, 422, "dispatch/run"},
		{"no kind", map[string]any{"args": map[string]any{}}, 400, "kind is required"},
		{"args not an object", map[string]any{"kind": "report", "args": []int{1}}, 400, "JSON object"},
		{"args a string", map[string]any{"kind": "report", "args": "x"}, 400, "JSON object"},
		{"NUL in args", `{"kind": "report", "args": {"a": "x\u0000y"}}`, 400, "NUL"},
		{"args not UTF-8", "{\"kind\": \"report\", \"args\": {\"a\": \"x\xffy\"}}", 400, "args cannot be stored: it is not valid UTF-8"},
		{"lone surrogate in args", `{"kind": "report", "args": {"a": "\udc00"}}`, 400, `unpaired surrogate \\udc00`},
		{"number past numeric", `{"kind": "report", "args": {"a": 1e200000}}`, 400, "digits before the decimal point"},
		{"NUL in key", `{"kind": "report", "idempotency_key": "a\u0000b"}`, 400, "NUL"},
		{"bad queue", map[string]any{"kind": "report", "queue": "Bad Queue!"}, 400, `is invalid: use 1 to 64 lower-case letters`},
		{"bad priority", map[string]any{"kind": "report", "priority": "urgent"}, 422, "unknown priority"},
		{"negative attempts", map[string]any{"kind": "report", "max_attempts": -1}, 400, "max_attempts"},
		{"bad tag", map[string]any{"kind": "report", "tags": []string{"no spaces"}}, 400, "invalid tag"},
		{"two keys", map[string]any{"kind": "report", "idempotency_key": "a", "unique_key": "b"}, 400, "differ"},
		{"long key", map[string]any{"kind": "report", "idempotency_key": strings.Repeat("k", 501)}, 400, "limit is 500"},
		{"malformed", `{"kind": "report",`, 400, "malformed"},
		{"unknown field", `{"kind": "report", "prio": 1}`, 400, "prio"},
		{"bad time", `{"kind": "report", "scheduled_at": "tomorrow"}`, 400, ""},
		{"sql in kind", map[string]any{"kind": "x'); DELETE FROM river_job; --"}, 422, "unknown job kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := f.do("POST", "/api/admin/dispatch/job", adminSecret, tc.body)
			if status != tc.want || !strings.Contains(string(body), tc.says) {
				t.Errorf("%d %s, want %d saying %q", status, body, tc.want, tc.says)
			}
		})
	}
	status, body := f.do("POST", "/api/admin/dispatch/job", adminSecret, map[string]any{"kind": "reprot"})
	var e errorBody
	if status != 422 || json.Unmarshal(body, &e) != nil || !cmp.Equal(e.Error.Allowed, known.Kinds) {
		t.Errorf("unknown kind: %d %s; want the known kinds in allowed", status, body)
	}
	if n := dispatchCount(t, f, `SELECT count(*) FROM river_job`); n != before {
		t.Errorf("bad requests inserted %d jobs", n-before)
	}
	// force inserts a kind never seen.
	f.call("POST", "/api/admin/dispatch/job", map[string]any{"kind": "reprot", "force": true}, 201, &res)
	if res.Job.Kind != "reprot" || res.Job.Priority != int(queue.PriorityNormal) {
		t.Errorf("forced job = %+v", res.Job)
	}
}

type dispatchGreetIn struct {
	Name string `json:"name"`
}

// TestDispatchRun starts runs by name through the API on a server whose
// engine has no workflow, and sees a process that has the workflow work
// them.
func TestDispatchRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	greet := workflow.Define("dispatch_greet", func(t *workflow.Task, in dispatchGreetIn) (string, error) {
		return "hello " + in.Name, nil
	}, workflow.WithQueue("greetings"))
	eng, err := workflow.NewEngine(f.pool, &workflow.Config{
		Workflows: []workflow.Definition{greet},
		Queue: &queue.Config{
			Queues: map[string]river.QueueConfig{"greetings": {MaxWorkers: 5}},
			River:  &river.Config{TestOnly: true}, Logger: slog.New(slog.DiscardHandler),
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = eng.Stop(sctx)
	})
	wctx, cancel := context.WithTimeout(ctx, jobsWait)
	defer cancel()

	// Never seen: refused, naming it.
	status, body := f.do("POST", "/api/admin/dispatch/run", adminSecret, map[string]any{"workflow": "dispatch_greet", "input": map[string]any{"name": "a"}})
	if status != 422 || !strings.Contains(string(body), `dispatch_greet`) {
		t.Fatalf("a never-seen workflow: %d %s, want 422 naming it", status, body)
	}
	first, err := greet.Start(ctx, eng, dispatchGreetIn{Name: "first"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Result(wctx); err != nil {
		t.Fatal(err)
	}

	var res DispatchRunResponse
	f.call("POST", "/api/admin/dispatch/run", map[string]any{
		"workflow": "dispatch_greet", "input": map[string]any{"name": "operator"}, "idempotency_key": "greet:operator",
	}, 201, &res)
	if res.Run.Existing || res.Run.Workflow != "dispatch_greet" || res.Run.ID == "" {
		t.Fatalf("dispatched run = %+v", res.Run)
	}
	out, err := eng.Wait(wctx, res.Run.ID)
	if err != nil {
		t.Fatalf("the dispatched run: %v", err)
	}
	if string(out) != `"hello operator"` {
		t.Errorf("output %s", out)
	}
	jobsAudited(t, f, "dispatch.run", res.Run.ID, "workflow:dispatch_greet")

	var again DispatchRunResponse
	f.call("POST", "/api/admin/dispatch/run", map[string]any{"workflow": "dispatch_greet", "idempotency_key": "greet:operator"}, 200, &again)
	if !again.Run.Existing || again.Run.ID != res.Run.ID {
		t.Errorf("repeated key: %+v, want run %s existing", again.Run, res.Run.ID)
	}

	runsBefore := dispatchCount(t, f, `SELECT count(*) FROM braid_runs`)
	for _, tc := range []struct {
		name string
		body any
		want int
		says string
	}{
		{"unknown workflow", map[string]any{"workflow": "dispatch_gret"}, 422, "dispatch_greet"},
		{"no workflow", map[string]any{"input": 1}, 400, "workflow is required"},
		{"key of another workflow", map[string]any{"workflow": "other", "idempotency_key": "greet:operator", "force": true}, 409, "already used by another workflow"},
		{"long key", map[string]any{"workflow": "dispatch_greet", "idempotency_key": strings.Repeat("k", 501)}, 400, "limit is 500"},
		{"bad priority", map[string]any{"workflow": "dispatch_greet", "priority": 500}, 422, "out of range"},
		{"bad queue", map[string]any{"workflow": "dispatch_greet", "queue": "UPPER"}, 400, `is invalid: use 1 to 64 lower-case letters`},
		{"NUL in input", `{"workflow": "dispatch_greet", "input": "a\u0000b"}`, 400, "NUL"},
		{"input not UTF-8", "{\"workflow\": \"dispatch_greet\", \"input\": \"x\xffy\"}", 400, "not valid UTF-8"},
		{"lone surrogate in input", `{"workflow": "dispatch_greet", "input": "\ud800"}`, 400, `unpaired surrogate \\ud800`},
		{"NUL in key", `{"workflow": "dispatch_greet", "idempotency_key": "a\u0000b"}`, 400, "NUL"},
		{"malformed", `{"workflow": `, 400, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := f.do("POST", "/api/admin/dispatch/run", adminSecret, tc.body)
			if status != tc.want || !strings.Contains(string(body), tc.says) {
				t.Errorf("%d %s, want %d saying %q", status, body, tc.want, tc.says)
			}
		})
	}
	if n := dispatchCount(t, f, `SELECT count(*) FROM braid_runs`); n != runsBefore {
		t.Errorf("bad requests started %d runs", n-runsBefore)
	}
	// force starts a workflow never seen, with the defaults.
	f.call("POST", "/api/admin/dispatch/run", map[string]any{"workflow": "not_deployed", "force": true, "priority": "critical"}, 201, &res)
	var q string
	var prio int
	if err := f.pool.QueryRow(ctx, `SELECT queue, priority FROM braid_tasks WHERE run_id = $1`, res.Run.ID).Scan(&q, &prio); err != nil {
		t.Fatal(err)
	}
	if q != "default" || prio != 1 {
		t.Errorf("forced run: queue %q priority %d, want default and 1", q, prio)
	}
}
