package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// runsTraceID is the trace that the failed runs of the test belong to.
const runsTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// runsWorld is a fixture whose database holds runs of every kind, worked
// by a real engine started in the test.
type runsWorld struct {
	*fixture
	eng                *workflow.Engine
	greets             []string // oldest first, idempotency keys greet-0…
	family             string   // a parent that awaited a child
	declined, panicked string   // failed on their step's last attempt
	sleepy             string   // waiting on an hour's delay
	chargeFails        atomic.Bool
}

func newRunsWorld(t *testing.T) *runsWorld {
	t.Helper()
	w := &runsWorld{fixture: newFixture(t, func(c *Config) { c.JaegerURL = "http://jaeger.test:16686/" })}
	w.chargeFails.Store(true)
	greet := workflow.Define("greet", func(t *workflow.Task, name string) (string, error) {
		return workflow.Step(t, "hello", func(ctx context.Context) (string, error) { return "hello " + name, nil })
	})
	family := workflow.Define("family", func(t *workflow.Task, _ struct{}) (string, error) {
		return workflow.Go(t, "kid", greet, "kid").Get()
	})
	charge := workflow.Define("charge", func(t *workflow.Task, how string) (string, error) {
		return workflow.Step(t, "charge", func(ctx context.Context) (string, error) {
			if w.chargeFails.Load() {
				if how == "panic" {
					panic("card reader on fire")
				}
				return "", errors.New("card declined: insufficient funds")
			}
			return "charged", nil
		}, workflow.Retry{MaxAttempts: 1})
	}, workflow.WithMaxAttempts(1))
	sleepy := workflow.Define("sleepy", func(t *workflow.Task, _ struct{}) (string, error) {
		if err := t.Delay("nap", time.Hour); err != nil {
			return "", err
		}
		return "rested", nil
	})
	quiet := slog.New(slog.DiscardHandler)
	eng, err := workflow.NewEngine(w.pool, &workflow.Config{
		Workflows:         []workflow.Definition{greet, family, charge, sleepy},
		DelayPollInterval: 200 * time.Millisecond,
		Leases:            &leases.Config{TTL: 2 * time.Second, Heartbeat: 300 * time.Millisecond},
		Queue: &queue.Config{
			Queues:      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
			RetryPolicy: queue.Backoff{Strategy: queue.Fixed, Base: 50 * time.Millisecond},
			Logger:      quiet,
		},
		ResultPollInterval: 200 * time.Millisecond,
		Logger:             quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := eng.Stop(stopCtx); err != nil {
			t.Errorf("stopping the engine: %v", err)
		}
	})
	w.eng = eng

	for i := range 3 {
		run, err := greet.Start(ctx, eng, fmt.Sprint("n", i), &workflow.StartOpts{IdempotencyKey: fmt.Sprint("greet-", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err != nil {
			t.Fatal(err)
		}
		w.greets = append(w.greets, run.ID)
	}
	fam, err := family.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fam.Result(ctx); err != nil {
		t.Fatal(err)
	}
	w.family = fam.ID
	tid, _ := trace.TraceIDFromHex(runsTraceID)
	traced := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	for _, how := range []string{"error", "panic"} {
		run, err := charge.Start(traced, eng, how, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err == nil {
			t.Fatalf("the %s charge succeeded", how)
		}
		if how == "error" {
			w.declined = run.ID
		} else {
			w.panicked = run.ID
		}
	}
	sl, err := sleepy.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.sleepy = sl.ID
	w.waitStatus(t, w.sleepy, "waiting")
	// River records the end of a turn's job just after the turn returns.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var live int
		if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND finalized_at IS NULL`, workflow.TaskKind).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d turn jobs still unfinished", live)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return w
}

// waitStatus polls the API until run id has status.
func (w *runsWorld) waitStatus(t *testing.T, id, status string) RunDetail {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var d RunDetail
		w.call("GET", "/api/runs/"+id, nil, 200, &d)
		if d.Run.Status == status {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s, want %s", id, d.Run.Status, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *runsWorld) createdAt(t *testing.T, id string) time.Time {
	t.Helper()
	var at time.Time
	if err := w.pool.QueryRow(context.Background(), `SELECT created_at FROM braid_runs WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

func TestRunsAPI(t *testing.T) {
	t.Parallel()
	w := newRunsWorld(t)

	t.Run("list filters and pages", func(t *testing.T) {
		g := w.greets
		at := func(id string) string { return url.QueryEscape(w.createdAt(t, id).Format(time.RFC3339Nano)) }
		tests := []struct {
			query string
			want  []string
			total int64
		}{
			{"", []string{w.sleepy, w.panicked, w.declined, w.family, g[2], g[1], g[0]}, 7},
			{"?limit=2&offset=3", []string{w.family, g[2]}, 7},
			{"?offset=7", []string{}, 7},
			{"?workflow=greet", []string{g[2], g[1], g[0]}, 3},
			{"?workflow=charge&status=failed", []string{w.panicked, w.declined}, 2},
			{"?status=waiting", []string{w.sleepy}, 1},
			{"?status=completed&limit=1", []string{w.family}, 4},
			{"?idempotency_key=greet-1", []string{g[1]}, 1},
			{"?created_after=" + at(w.declined), []string{w.sleepy, w.panicked, w.declined}, 3},
			{"?created_before=" + at(g[2]), []string{g[1], g[0]}, 2},
			{"?created_after=" + at(g[1]) + "&created_before=" + at(w.family), []string{g[2], g[1]}, 2},
			{"?workflow=" + url.QueryEscape("greet' OR '1'='1"), []string{}, 0},
			{"?idempotency_key=" + url.QueryEscape("x'); DROP TABLE braid_runs; --"), []string{}, 0},
		}
		for _, tt := range tests {
			var list List[workflow.RunInfo]
			w.call("GET", "/api/runs"+tt.query, nil, 200, &list)
			got := []string{}
			for _, r := range list.Items {
				got = append(got, r.ID)
				if len(r.Tasks) != 0 {
					t.Errorf("%s: run %s lists its tasks", tt.query, r.ID)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GET /api/runs%s (-want +got):\n%s", tt.query, diff)
			}
			if list.Total == nil || *list.Total != tt.total {
				t.Errorf("GET /api/runs%s: total %v, want %d", tt.query, list.Total, tt.total)
			}
		}
		var page List[workflow.RunInfo]
		w.call("GET", "/api/runs?limit=2&offset=3", nil, 200, &page)
		if page.Limit != 2 || page.Offset != 3 {
			t.Errorf("page %+v, want limit 2 offset 3", page.Page)
		}
	})

	t.Run("list rejects invalid filters", func(t *testing.T) {
		long := strings.Repeat("k", 501)
		tests := []struct{ query, names string }{
			{"?status=finished", "status"},
			{"?status=" + url.QueryEscape("failed' OR 1=1"), "status"},
			{"?created_after=yesterday", "created_after"},
			{"?created_before=2025-13-01T00:00:00Z", "created_before"},
			{"?created_after=2025-02-01T00:00:00Z&created_before=2025-01-01T00:00:00Z", "created_after"},
			{"?limit=-1", "limit"},
			{"?limit=abc", "limit"},
			{"?limit=1001", "limit"},
			{"?offset=-1", "offset"},
			{"?idempotency_key=" + long, "idempotency_key"},
			{"?workflow=" + strings.Repeat("w", 201), "workflow"},
		}
		for _, tt := range tests {
			status, raw := w.do("GET", "/api/runs"+tt.query, adminSecret, nil)
			var body errorBody
			if err := json.Unmarshal(raw, &body); err != nil || status != 400 || body.Error == nil ||
				!strings.Contains(body.Error.Message, tt.names) {
				t.Errorf("GET /api/runs%.60s: %d %s; want 400 naming %s", tt.query, status, raw, tt.names)
			}
		}
		_, raw := w.do("GET", "/api/runs?status=done", adminSecret, nil)
		var body errorBody
		_ = json.Unmarshal(raw, &body)
		if diff := cmp.Diff(workflow.RunStatuses, body.Error.Allowed); diff != "" {
			t.Errorf("allowed statuses (-want +got):\n%s", diff)
		}
	})

	t.Run("detail of a failed run", func(t *testing.T) {
		var d RunDetail
		w.call("GET", "/api/runs/"+w.panicked, nil, 200, &d)
		if d.Run.ID != w.panicked || d.Run.Status != "failed" || d.Run.Workflow != "charge" || len(d.Run.Tasks) != 0 {
			t.Errorf("run %+v", d.Run)
		}
		if d.TraceID != runsTraceID || d.TraceURL != "http://jaeger.test:16686/trace/"+runsTraceID {
			t.Errorf("trace %q at %q; want %s at the Jaeger URL", d.TraceID, d.TraceURL, runsTraceID)
		}
		if len(d.Tasks) != 1 || d.Tasks[0].Status != "failed" || d.Tasks[0].ParentID != "" || d.Tasks[0].Steps != nil {
			t.Fatalf("tasks %+v; want the failed root, its steps listed apart", d.Tasks)
		}
		root := d.Tasks[0]
		if len(d.Steps) != 1 {
			t.Fatalf("steps %+v; want the failed charge", d.Steps)
		}
		st := d.Steps[0]
		if st.TaskID != root.ID || st.TaskKey != root.Key || st.Name != "charge" || st.Status != "failed" || st.Attempts != 1 ||
			st.ErrorKind != "panic" || !strings.Contains(st.Error, "panic: card reader on fire") ||
			!strings.Contains(st.Error, "goroutine") || !strings.Contains(st.Error, "runs_test.go") {
			t.Errorf("failed step %+v; want the panic with its full stack", st)
		}
		if f := d.Failure; f == nil || f.TaskID != root.ID || f.Step != "charge" || !strings.Contains(f.Error, "card reader on fire") {
			t.Errorf("failure %+v; want the root's charge step", d.Failure)
		}
		if len(root.TurnJobs) != 1 || root.TurnJobs[0].State != "discarded" || len(root.TurnJobs[0].Errors) != 1 ||
			!strings.Contains(root.TurnJobs[0].Errors[0].Error, "card reader on fire") {
			t.Errorf("turn jobs %+v; want one discarded turn with its attempt's error", root.TurnJobs)
		}
		type entry struct{ Kind, Name, Status string }
		var got []entry
		for _, e := range d.Timeline {
			got = append(got, entry{e.Kind, e.Name, e.Status})
			if e.End == nil || e.End.Before(e.Start) || e.TaskID != root.ID {
				t.Errorf("timeline entry %+v: want it ended, after its start, of the root", e)
			}
		}
		if diff := cmp.Diff([]entry{{"turn", "turn 1", "discarded"}, {"step", "charge", "failed"}}, got); diff != "" {
			t.Errorf("timeline (-want +got):\n%s", diff)
		}
		if len(d.Delays) != 0 {
			t.Errorf("delays %+v, want none", d.Delays)
		}
	})

	t.Run("detail of a run that awaited a child", func(t *testing.T) {
		var d RunDetail
		w.call("GET", "/api/runs/"+w.family, nil, 200, &d)
		if len(d.Tasks) != 2 || d.Tasks[1].ParentID != d.Tasks[0].ID || d.Tasks[1].Key != "kid" || d.Tasks[1].Status != "completed" {
			t.Fatalf("tasks %+v; want the root and its child kid", d.Tasks)
		}
		if d.Failure != nil || d.Run.Status != "completed" || string(d.Run.Output) != `"hello kid"` {
			t.Errorf("run %+v, failure %+v; want it completed with its child's greeting", d.Run, d.Failure)
		}
		if len(d.Steps) != 1 || d.Steps[0].TaskKey != "kid" || string(d.Steps[0].Output) != `"hello kid"` {
			t.Errorf("steps %+v; want the child's hello with its output", d.Steps)
		}
		kinds := map[string]int{}
		for _, e := range d.Timeline {
			kinds[e.Kind+"/"+e.TaskKey]++
			if e.Kind == "wait" && (e.TaskID != d.Tasks[0].ID || e.Status != "done" || e.End == nil || e.End.Before(e.Start)) {
				t.Errorf("wait %+v; want the root's finished wait on its child", e)
			}
		}
		want := map[string]int{"turn/" + d.Tasks[0].Key: 2, "wait/" + d.Tasks[0].Key: 1, "turn/kid": 1, "step/kid": 1}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("timeline entries by kind and task (-want +got):\n%s", diff)
		}
		for i := 1; i < len(d.Timeline); i++ {
			if d.Timeline[i].Start.Before(d.Timeline[i-1].Start) {
				t.Errorf("timeline out of order at %d: %+v", i, d.Timeline)
			}
		}
	})

	t.Run("detail of a waiting run", func(t *testing.T) {
		var d RunDetail
		w.call("GET", "/api/runs/"+w.sleepy, nil, 200, &d)
		if len(d.Delays) != 1 {
			t.Fatalf("delays %+v; want the nap", d.Delays)
		}
		dl := d.Delays[0]
		if dl.Name != "nap" || dl.Status != "waiting" || dl.ResumeAt == nil || dl.ResumeAt.Sub(dl.CreatedAt) != time.Hour || dl.FiredAt != nil {
			t.Errorf("delay %+v; want the nap waiting, due an hour after it began", dl)
		}
		var delay *TimelineEntry
		for i, e := range d.Timeline {
			if e.Kind == "delay" {
				delay = &d.Timeline[i]
			}
		}
		if delay == nil || delay.Name != "nap" || delay.Status != "waiting" || delay.End == nil || !delay.End.Equal(*dl.ResumeAt) ||
			delay.ResumeAt == nil || !delay.Start.Equal(dl.CreatedAt) {
			t.Errorf("timeline %+v; want the nap from its start to its resume_at", d.Timeline)
		}
	})

	t.Run("unknown and malformed IDs", func(t *testing.T) {
		unknown := uuid.NewString()
		for _, tt := range []struct {
			method, path string
			status       int
			says         string
		}{
			{"GET", "/api/runs/" + unknown, 404, unknown},
			{"GET", "/api/runs/not-a-run", 400, "UUID"},
			{"GET", "/api/runs/" + url.PathEscape("1' OR '1'='1"), 400, "UUID"},
			{"POST", "/api/runs/" + unknown + "/cancel", 404, unknown},
			{"POST", "/api/runs/" + unknown + "/retry", 404, unknown},
			{"POST", "/api/runs/42/cancel", 400, "UUID"},
		} {
			status, raw := w.do(tt.method, tt.path, adminSecret, nil)
			if status != tt.status || !strings.Contains(string(raw), tt.says) || !strings.Contains(string(raw), `"error"`) {
				t.Errorf("%s %s: %d %s; want %d naming %s", tt.method, tt.path, status, raw, tt.status, tt.says)
			}
		}
	})

	t.Run("stats before the actions", func(t *testing.T) {
		var st RunStatsResponse
		w.call("GET", "/api/runs/stats", nil, 200, &st)
		want := RunStatsResponse{
			ByStatus:         map[string]int64{"pending": 0, "running": 0, "waiting": 1, "completed": 4, "failed": 2, "cancelled": 0},
			FinishedLastHour: 6, FailedLastHour: 2,
		}
		if diff := cmp.Diff(want, st); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
	})

	t.Run("actions need an admin token", func(t *testing.T) {
		for _, action := range []string{"cancel", "retry"} {
			path := "/api/runs/" + w.sleepy + "/" + action
			if status, raw := w.do("POST", path, "", nil); status != 401 {
				t.Errorf("POST %s without a token: %d %s, want 401", path, status, raw)
			}
			if status, raw := w.do("POST", path, "wrong-token", nil); status != 401 {
				t.Errorf("POST %s with a wrong token: %d %s, want 401", path, status, raw)
			}
			if status, raw := w.do("POST", path, readOnlySecret, nil); status != 403 || !strings.Contains(string(raw), "read-only") {
				t.Errorf("POST %s with the read-only token: %d %s, want 403", path, status, raw)
			}
		}
		if status, _ := w.do("GET", "/api/runs/"+w.sleepy, readOnlySecret, nil); status != 200 {
			t.Errorf("GET a run with the read-only token: %d, want 200", status)
		}
		var d RunDetail
		w.call("GET", "/api/runs/"+w.sleepy, nil, 200, &d)
		if d.Run.Status != "waiting" {
			t.Errorf("after refused actions the run is %s, want waiting", d.Run.Status)
		}
		if strings.Contains(w.auditLog(), "run.cancel") || strings.Contains(w.auditLog(), "run.retry") {
			t.Errorf("refused actions were audited:\n%s", w.auditLog())
		}
	})

	t.Run("cancel", func(t *testing.T) {
		var run workflow.RunInfo
		w.call("POST", "/api/runs/"+w.sleepy+"/cancel", nil, 200, &run)
		if run.ID != w.sleepy || run.Status != "cancelled" || run.FinishedAt == nil {
			t.Errorf("cancelled run %+v", run)
		}
		var d RunDetail
		w.call("GET", "/api/runs/"+w.sleepy, nil, 200, &d)
		if len(d.Delays) != 1 || d.Delays[0].Status != "cancelled" || d.Tasks[0].Status != "cancelled" {
			t.Errorf("after cancel: delays %+v, root %s; want both cancelled", d.Delays, d.Tasks[0].Status)
		}
		status, raw := w.do("POST", "/api/runs/"+w.sleepy+"/cancel", adminSecret, nil)
		if status != 409 || !strings.Contains(string(raw), "is cancelled") {
			t.Errorf("second cancel: %d %s; want 409 saying the run is cancelled", status, raw)
		}
		status, raw = w.do("POST", "/api/runs/"+w.greets[0]+"/cancel", adminSecret, nil)
		if status != 409 || !strings.Contains(string(raw), "is completed") {
			t.Errorf("cancel of a completed run: %d %s; want 409 saying it is completed", status, raw)
		}
	})

	t.Run("retry", func(t *testing.T) {
		status, raw := w.do("POST", "/api/runs/"+w.greets[1]+"/retry", adminSecret, nil)
		if status != 409 || !strings.Contains(string(raw), "is completed") {
			t.Errorf("retry of a completed run: %d %s; want 409 saying it is completed", status, raw)
		}
		w.chargeFails.Store(false)
		var run workflow.RunInfo
		w.call("POST", "/api/runs/"+w.declined+"/retry", nil, 200, &run)
		if run.ID != w.declined || run.Status == "failed" || run.Error != "" {
			t.Errorf("retried run %+v; want it no longer failed", run)
		}
		d := w.waitStatus(t, w.declined, "completed")
		if d.Failure != nil || len(d.Steps) != 1 || d.Steps[0].Status != "completed" || string(d.Steps[0].Output) != `"charged"` {
			t.Errorf("after the retry: failure %+v, steps %+v; want the charge completed", d.Failure, d.Steps)
		}
		if n := len(d.Tasks[0].TurnJobs); n != 2 || d.Tasks[0].TurnJobs[0].State != "discarded" {
			t.Errorf("turn jobs %+v; want the discarded one and the retry's", d.Tasks[0].TurnJobs)
		}
	})

	t.Run("audit log", func(t *testing.T) {
		type line struct {
			Msg    string `json:"msg"`
			Who    string `json:"who"`
			Action string `json:"action"`
			IDs    []any  `json:"ids"`
		}
		var got []line
		for _, raw := range strings.Split(strings.TrimSpace(w.auditLog()), "\n") {
			var l line
			if json.Unmarshal([]byte(raw), &l) == nil && l.Msg == "admin: audit" {
				got = append(got, l)
			}
		}
		want := []line{
			{"admin: audit", "ops", "run.cancel", []any{w.sleepy}},
			{"admin: audit", "ops", "run.retry", []any{w.declined}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("audit lines (-want +got):\n%s", diff)
		}
	})

	t.Run("stats after the actions", func(t *testing.T) {
		var st RunStatsResponse
		w.call("GET", "/api/runs/stats", nil, 200, &st)
		want := RunStatsResponse{
			ByStatus:         map[string]int64{"pending": 0, "running": 0, "waiting": 0, "completed": 5, "failed": 1, "cancelled": 1},
			FinishedLastHour: 7, FailedLastHour: 1,
		}
		if diff := cmp.Diff(want, st); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
	})
}
