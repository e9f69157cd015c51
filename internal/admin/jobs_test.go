package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// jobsWait bounds every wait of these tests; waits end as soon as their
// condition holds.
const jobsWait = 60 * time.Second

// jobsEventually polls cond until it holds, failing after jobsWait.
func jobsEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(jobsWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type jobsReportArgs struct {
	Region string `json:"region"`
}

func (jobsReportArgs) Kind() string { return "report" }

// jobsInsert inserts a report job through the server's queue and puts it in
// state (by SQL, as a fixture), with an attempt error when it failed.
func jobsInsert(t *testing.T, f *fixture, state rivertype.JobState, opts *queue.InsertOpts) int64 {
	t.Helper()
	ctx := context.Background()
	if opts == nil {
		opts = &queue.InsertOpts{}
	}
	if opts.Queue == "" {
		opts.Queue = "reports"
	}
	ins, err := queue.New(f.pool, &queue.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ins.Insert(ctx, jobsReportArgs{Region: "eu"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if state == rivertype.JobStateAvailable {
		return res.Job.ID
	}
	_, err = f.pool.Exec(ctx, `
		UPDATE river_job SET state = $2::river_job_state, attempt = 1, max_attempts = 1, attempted_at = now(),
		       scheduled_at = CASE WHEN $2 IN ('scheduled', 'retryable') THEN now() + interval '1 hour' ELSE scheduled_at END,
		       finalized_at = CASE WHEN $2 IN ('completed', 'cancelled', 'discarded') THEN now() END,
		       errors = CASE WHEN $2 IN ('discarded', 'retryable') THEN
		           ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'report failed: upstream 503', 'trace', 'goroutine 1 [running]:\nmain.report()')]
		         ELSE errors END
		 WHERE id = $1`, res.Job.ID, string(state))
	if err != nil {
		t.Fatal(err)
	}
	return res.Job.ID
}

func jobsState(t *testing.T, f *fixture, id int64) string {
	t.Helper()
	var st string
	if err := f.pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// jobsAudited checks that the audit log has a line by "ops" for action
// naming every one of ids.
func jobsAudited(t *testing.T, f *fixture, action string, ids ...any) {
	t.Helper()
	for _, line := range strings.Split(f.auditLog(), "\n") {
		var rec struct {
			Msg    string `json:"msg"`
			Who    string `json:"who"`
			Action string `json:"action"`
			IDs    []any  `json:"ids"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "admin: audit" || rec.Action != action || rec.Who != "ops" {
			continue
		}
		got := fmt.Sprint(rec.IDs)
		all := true
		for _, id := range ids {
			if !strings.Contains(got, fmt.Sprint(id)) {
				all = false
			}
		}
		if all {
			return
		}
	}
	t.Errorf("no audit line by ops for %s naming %v; log:\n%s", action, ids, f.auditLog())
}

// TestJobRoutesAuth calls every jobs, dead-letter and dispatch route with no
// token (401), a read-only token on mutations (403), and the admin token.
func TestJobRoutesAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	avail := jobsInsert(t, f, rivertype.JobStateAvailable, nil)
	dead := jobsInsert(t, f, rivertype.JobStateDiscarded, nil)
	dead2 := jobsInsert(t, f, rivertype.JobStateDiscarded, nil)
	sched := jobsInsert(t, f, rivertype.JobStateScheduled, nil)
	id := func(n int64) string { return fmt.Sprint(n) }
	for _, tc := range []struct {
		method, path string
		body         any
		mutates      bool
		want         int
	}{
		{"GET", "/api/admin/jobs/stats", nil, false, 200},
		{"GET", "/api/admin/jobs?status=queued&limit=10&offset=0", nil, false, 200},
		{"GET", "/api/admin/jobs/" + id(avail), nil, false, 200},
		{"PUT", "/api/admin/jobs/" + id(avail) + "/status", map[string]any{"status": "cancelled"}, true, 200},
		{"PUT", "/api/admin/jobs/" + id(sched) + "/priority", map[string]any{"priority": 50}, true, 200},
		{"POST", "/api/admin/jobs/" + id(sched) + "/boost", map[string]any{"boost": 20}, true, 200},
		{"POST", "/api/admin/jobs/" + id(dead) + "/retry", nil, true, 200},
		{"PUT", "/api/admin/jobs/bulk/status", map[string]any{"job_ids": []int64{sched}, "status": "queued"}, true, 200},
		{"POST", "/api/admin/jobs/bulk/retry", map[string]any{"job_ids": []int64{dead2}}, true, 200},
		{"GET", "/api/admin/dead-letters/jobs", nil, false, 200},
		{"GET", "/api/admin/dead-letters/runs", nil, false, 200},
		{"GET", "/api/admin/dispatch/known", nil, false, 200},
		{"POST", "/api/admin/dispatch/job", map[string]any{"kind": "report", "args": map[string]any{"region": "us"}}, true, 201},
		{"POST", "/api/admin/dispatch/run", map[string]any{"workflow": "nightly", "force": true}, true, 201},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			if st, body := f.do(tc.method, tc.path, "", tc.body); st != http.StatusUnauthorized {
				t.Errorf("no token: %d %s, want 401", st, body)
			}
			if tc.mutates {
				if st, body := f.do(tc.method, tc.path, readOnlySecret, tc.body); st != http.StatusForbidden {
					t.Errorf("read-only token: %d %s, want 403", st, body)
				}
			} else if st, body := f.do(tc.method, tc.path, readOnlySecret, tc.body); st != tc.want {
				t.Errorf("read-only token on a read: %d %s, want %d", st, body, tc.want)
			}
			var out map[string]any
			f.call(tc.method, tc.path, tc.body, tc.want, &out)
		})
	}
	// Nothing the read-only token sent changed anything: each mutation
	// above ran once, with the admin token.
	jobsAudited(t, f, "job.status.cancelled", avail)
	jobsAudited(t, f, "job.retry", dead)
	jobsAudited(t, f, "jobs.bulk_retry", dead2)
	if strings.Contains(f.auditLog(), `"who":"viewer"`) {
		t.Errorf("the read-only token has audit lines:\n%s", f.auditLog())
	}
}

func TestJobsListStatsAndDetail(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	avail := jobsInsert(t, f, rivertype.JobStateAvailable, nil)
	other := jobsInsert(t, f, rivertype.JobStateAvailable, &queue.InsertOpts{InsertOpts: river.InsertOpts{Queue: "bulk"}})
	dead := jobsInsert(t, f, rivertype.JobStateDiscarded, nil)
	done := jobsInsert(t, f, rivertype.JobStateCompleted, nil)
	running := jobsInsert(t, f, rivertype.JobStateRunning, nil)
	if _, err := f.pool.Exec(ctx, `INSERT INTO braid_job_progress (job_id, kind, attempt, percent, message, heartbeat_at) VALUES ($1, 'report', 1, 42, 'page 42 of 100', now())`, running); err != nil {
		t.Fatal(err)
	}

	var stats JobStatsResponse
	f.call("GET", "/api/admin/jobs/stats", nil, 200, &stats)
	if stats.Total != 5 || stats.ByState["available"] != 2 || stats.ByState["discarded"] != 1 || stats.ByState["pending"] != 0 ||
		stats.ByQueue["reports"]["available"] != 1 || stats.ByQueue["bulk"]["available"] != 1 {
		t.Errorf("stats = %+v", stats)
	}
	if diff := cmp.Diff(map[string]int64{"queued": 2, "running": 1, "failed": 1, "completed": 1}, stats.ByStatus); diff != "" {
		t.Errorf("by_status (-want +got):\n%s", diff)
	}

	ids := func(l List[JobInfo]) []int64 {
		out := []int64{}
		for _, j := range l.Items {
			out = append(out, j.ID)
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  []int64
		total int64
	}{
		{"", []int64{running, done, dead, other, avail}, 5},
		{"?status=queued", []int64{other, avail}, 2},
		{"?status=available&queue=bulk", []int64{other}, 1},
		{"?status=failed", []int64{dead}, 1},
		{"?status=discarded", []int64{dead}, 1},
		{"?status=success", []int64{done}, 1},
		{"?status=crawling", []int64{running}, 1},
		{"?kind=report&limit=2&offset=1", []int64{done, dead}, 5},
		{"?kind=nope", []int64{}, 0},
		{"?kind=" + "x%27%3B%20DROP%20TABLE%20river_job%3B--", []int64{}, 0},
		{"?offset=100", []int64{}, 5},
	} {
		var l List[JobInfo]
		f.call("GET", "/api/admin/jobs"+tc.query, nil, 200, &l)
		if diff := cmp.Diff(tc.want, ids(l)); diff != "" {
			t.Errorf("GET /api/admin/jobs%s (-want +got):\n%s", tc.query, diff)
		}
		if l.Total == nil || *l.Total != tc.total {
			t.Errorf("GET /api/admin/jobs%s: total %v, want %d", tc.query, l.Total, tc.total)
		}
	}
	for _, q := range []string{"?status=bogus", "?limit=-1", "?limit=0", "?offset=-3", "?limit=abc", "?kind=" + strings.Repeat("k", 201)} {
		status, body := f.do("GET", "/api/admin/jobs"+q, adminSecret, nil)
		if status < 400 || status >= 500 || !strings.Contains(string(body), `"message"`) {
			t.Errorf("GET /api/admin/jobs%s: %d %s, want a 4xx JSON error", q, status, body)
		}
	}
	var bad struct{ Error Error }
	status, body := f.do("GET", "/api/admin/jobs?status=bogus", adminSecret, nil)
	if err := json.Unmarshal(body, &bad); err != nil || status != 422 || !cmp.Equal(bad.Error.Allowed, jobStateNames()) {
		t.Errorf("unknown status: %d %s", status, body)
	}

	var d JobDetail
	f.call("GET", fmt.Sprintf("/api/admin/jobs/%d", running), nil, 200, &d)
	if d.Progress == nil || d.Progress.Percent != 42 || d.Progress.Message != "page 42 of 100" || d.State != "running" ||
		d.Kind != "report" || d.Queue != "reports" || d.PriorityName != "normal" || d.Priority != 3 {
		t.Errorf("running job detail = %+v (progress %+v)", d, d.Progress)
	}
	if diff := cmp.Diff([]string{"cancelled"}, d.Transitions); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	var args map[string]string
	if err := json.Unmarshal(d.Args, &args); err != nil || args["region"] != "eu" {
		t.Errorf("args %s", d.Args)
	}
	f.call("GET", fmt.Sprintf("/api/admin/jobs/%d", dead), nil, 200, &d)
	if len(d.Errors) != 1 || d.Errors[0].Error != "report failed: upstream 503" || !strings.Contains(d.Errors[0].Trace, "goroutine 1") ||
		d.LastError == nil || d.LastError.Attempt != 1 || d.Run != nil {
		t.Errorf("dead job detail = %+v", d)
	}
	if diff := cmp.Diff([]string{"available"}, d.Transitions); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}

	for path, want := range map[string]int{
		"/api/admin/jobs/999999": 404, "/api/admin/jobs/0": 400, "/api/admin/jobs/-1": 400, "/api/admin/jobs/abc": 400,
	} {
		if status, body := f.do("GET", path, adminSecret, nil); status != want {
			t.Errorf("GET %s: %d %s, want %d", path, status, body, want)
		}
	}
	var dl List[JobInfo]
	f.call("GET", "/api/admin/dead-letters/jobs", nil, 200, &dl)
	if diff := cmp.Diff([]int64{dead}, ids(dl)); diff != "" || dl.Items[0].LastError == nil {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
}

func TestJobStatusTransitions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tc := range []struct {
		from    rivertype.JobState
		to      string
		want    int
		state   string   // after, on success
		allowed []string // on 422
	}{
		{rivertype.JobStateAvailable, "cancelled", 200, "cancelled", nil},
		{rivertype.JobStateScheduled, "available", 200, "available", nil},
		{rivertype.JobStateScheduled, "queued", 200, "available", nil},
		{rivertype.JobStateRetryable, "cancelled", 200, "cancelled", nil},
		{rivertype.JobStateDiscarded, "queued", 200, "available", nil},
		{rivertype.JobStateCancelled, "available", 200, "available", nil},
		{rivertype.JobStateCompleted, "available", 200, "available", nil},
		{rivertype.JobStateAvailable, "success", 422, "", []string{"cancelled"}},
		{rivertype.JobStateAvailable, "crawling", 422, "", []string{"cancelled"}},
		{rivertype.JobStateCompleted, "failed", 422, "", []string{"available"}},
		{rivertype.JobStateDiscarded, "cancelled", 422, "", []string{"available"}},
		{rivertype.JobStateScheduled, "completed", 422, "", []string{"available", "cancelled"}},
		{rivertype.JobStateRunning, "available", 422, "", []string{"cancelled"}},
	} {
		t.Run(string(tc.from)+"_to_"+tc.to, func(t *testing.T) {
			id := jobsInsert(t, f, tc.from, nil)
			path := fmt.Sprintf("/api/admin/jobs/%d/status", id)
			status, body := f.do("PUT", path, adminSecret, map[string]string{"status": tc.to})
			if status != tc.want {
				t.Fatalf("PUT %s %s: %d %s, want %d", path, tc.to, status, body, tc.want)
			}
			if tc.want == 200 {
				var d JobDetail
				if err := json.Unmarshal(body, &d); err != nil {
					t.Fatal(err)
				}
				if d.State != tc.state || jobsState(t, f, id) != tc.state {
					t.Errorf("state %s, want %s", d.State, tc.state)
				}
				return
			}
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.allowed, e.Error.Allowed); diff != "" {
				t.Errorf("allowed (-want +got):\n%s", diff)
			}
			if !strings.Contains(e.Error.Message, fmt.Sprint(id)) {
				t.Errorf("message %q does not name job %d", e.Error.Message, id)
			}
			if got := jobsState(t, f, id); got != string(tc.from) {
				t.Errorf("a refused change moved the job to %s", got)
			}
		})
	}
	id := jobsInsert(t, f, rivertype.JobStateAvailable, nil)
	for _, tc := range []struct {
		body any
		want int
	}{
		{`{"status":`, 400},
		{`{"status": "cancelled", "extra": 1}`, 400},
		{`{"status": 5}`, 400},
		{`{}`, 422},
		{`{"status": "done'; DROP TABLE river_job; --"}`, 422},
		{strings.Repeat(" ", MaxBodyBytesDefault+10), 413},
	} {
		if status, body := f.do("PUT", fmt.Sprintf("/api/admin/jobs/%d/status", id), adminSecret, tc.body); status != tc.want {
			t.Errorf("body %.40q: %d %s, want %d", tc.body, status, body, tc.want)
		}
	}
	if status, _ := f.do("PUT", "/api/admin/jobs/999999/status", adminSecret, map[string]string{"status": "cancelled"}); status != 404 {
		t.Errorf("unknown job: %d, want 404", status)
	}
	if got := jobsState(t, f, id); got != "available" {
		t.Errorf("bad requests changed the job to %s", got)
	}
}

func TestJobPriorityAndBoost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	id := jobsInsert(t, f, rivertype.JobStateAvailable, &queue.InsertOpts{InsertOpts: river.InsertOpts{Priority: int(queue.PriorityLow)}})
	path := fmt.Sprintf("/api/admin/jobs/%d", id)
	for _, tc := range []struct {
		priority any
		want     int
	}{
		{"high", 2}, {"LOW", 4}, {1, 1}, {4, 4}, {"3", 3}, {50, 3}, {75, 2}, {100, 1}, {0, 4}, {25, 4}, {62, 3}, {63, 2}, {88, 1},
	} {
		var d JobDetail
		f.call("PUT", path+"/priority", map[string]any{"priority": tc.priority}, 200, &d)
		if d.Priority != tc.want {
			t.Errorf("priority %v: %d, want %d", tc.priority, d.Priority, tc.want)
		}
	}
	for _, p := range []string{`{"priority": 101}`, `{"priority": -1}`, `{"priority": "urgent"}`, `{"priority": 2.5}`, `{"priority": null}`, `{}`, `{"priority": true}`} {
		status, body := f.do("PUT", path+"/priority", adminSecret, p)
		var e errorBody
		if status != 422 || json.Unmarshal(body, &e) != nil || len(e.Error.Allowed) == 0 {
			t.Errorf("%s: %d %s, want 422 with the allowed values", p, status, body)
		}
	}
	f.call("PUT", path+"/priority", map[string]any{"priority": "low"}, 200, nil)
	for _, tc := range []struct{ boost, want int }{{1, 3}, {1, 2}, {20, 1}, {1, 1}} {
		var d JobDetail
		f.call("POST", path+"/boost", map[string]any{"boost": tc.boost}, 200, &d)
		if d.Priority != tc.want {
			t.Errorf("boost %d: priority %d, want %d", tc.boost, d.Priority, tc.want)
		}
	}
	for _, b := range []string{`{"boost": 0}`, `{"boost": -2}`} {
		if status, body := f.do("POST", path+"/boost", adminSecret, b); status != 422 {
			t.Errorf("%s: %d %s, want 422", b, status, body)
		}
	}
	if status, _ := f.do("POST", "/api/admin/jobs/999999/boost", adminSecret, `{"boost": 1}`); status != 404 {
		t.Errorf("boost of an unknown job: %d, want 404", status)
	}
	done := jobsInsert(t, f, rivertype.JobStateCompleted, nil)
	if status, body := f.do("PUT", fmt.Sprintf("/api/admin/jobs/%d/priority", done), adminSecret, `{"priority": "high"}`); status != 409 {
		t.Errorf("priority of a completed job: %d %s, want 409", status, body)
	}
	jobsAudited(t, f, "job.priority.high", id)
	jobsAudited(t, f, "job.boost.20", id)
}

func TestJobBulk(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	dead := jobsInsert(t, f, rivertype.JobStateDiscarded, nil)
	cancelled := jobsInsert(t, f, rivertype.JobStateCancelled, nil)
	avail := jobsInsert(t, f, rivertype.JobStateAvailable, nil)
	sched := jobsInsert(t, f, rivertype.JobStateScheduled, nil)

	var res BulkResponse
	f.call("POST", "/api/admin/jobs/bulk/retry", map[string]any{"job_ids": []int64{dead, cancelled, avail, dead}}, 200, &res)
	want := BulkResponse{Succeeded: 2, Failed: 1, Results: []BulkResult{
		{ID: dead, OK: true, State: "available"},
		{ID: cancelled, OK: true, State: "available"},
		{ID: avail, Status: 422, Allowed: []string{"cancelled"}},
	}}
	if diff := cmp.Diff(want, res, cmpIgnoreBulkError()); diff != "" {
		t.Errorf("bulk retry (-want +got):\n%s", diff)
	}
	if !strings.Contains(res.Results[2].Error, "available") {
		t.Errorf("error %q does not say the job's state", res.Results[2].Error)
	}
	jobsAudited(t, f, "jobs.bulk_retry", dead, cancelled)

	f.call("PUT", "/api/admin/jobs/bulk/status", map[string]any{"job_ids": []int64{sched, avail}, "status": "cancelled"}, 200, &res)
	if res.Succeeded != 2 || jobsState(t, f, sched) != "cancelled" || jobsState(t, f, avail) != "cancelled" {
		t.Errorf("bulk status = %+v", res)
	}
	jobsAudited(t, f, "jobs.bulk_status.cancelled", sched, avail)

	// An unknown ID is 404 naming it, and changes nothing.
	status, body := f.do("POST", "/api/admin/jobs/bulk/retry", adminSecret, map[string]any{"job_ids": []int64{sched, 987654}})
	if status != 404 || !strings.Contains(string(body), "987654") || jobsState(t, f, sched) != "cancelled" {
		t.Errorf("bulk retry with an unknown ID: %d %s", status, body)
	}
	many := make([]int64, queue.IDsMax+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		path string
		body any
		want int
	}{
		{"/api/admin/jobs/bulk/retry", map[string]any{"job_ids": many}, 413},
		{"/api/admin/jobs/bulk/retry", map[string]any{"job_ids": []int64{}}, 400},
		{"/api/admin/jobs/bulk/retry", `{}`, 400},
		{"/api/admin/jobs/bulk/retry", map[string]any{"job_ids": []int64{0}}, 400},
		{"/api/admin/jobs/bulk/retry", `{"job_ids": ["a"]}`, 400},
		{"/api/admin/jobs/bulk/status", map[string]any{"job_ids": []int64{sched}, "status": "bogus"}, 422},
		{"/api/admin/jobs/bulk/status", map[string]any{"job_ids": []int64{sched}}, 422},
	} {
		method := "POST"
		if strings.HasSuffix(tc.path, "status") {
			method = "PUT"
		}
		status, body := f.do(method, tc.path, adminSecret, tc.body)
		if status != tc.want {
			t.Errorf("%s %.60v: %d %.200s, want %d", tc.path, tc.body, status, body, tc.want)
		}
		if tc.want == 413 && !strings.Contains(string(body), fmt.Sprint(queue.IDsMax)) {
			t.Errorf("413 does not name the limit: %s", body)
		}
	}
}

func cmpIgnoreBulkError() cmp.Option {
	return cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Error" }, cmp.Ignore())
}

type flakyArgs struct {
	Name string `json:"name"`
}

func (flakyArgs) Kind() string { return "flaky" }

// TestJobFailedRetriedCompleted drives a job from failed to retried to
// completed through the API alone: it is dispatched, fails its only
// attempt and becomes a dead letter, is retried, and completes.
func TestJobFailedRetriedCompleted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var healthy atomic.Bool
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[flakyArgs]) error {
		if err := queue.Progress(ctx, 50, "halfway for "+job.Args.Name); err != nil {
			return err
		}
		if !healthy.Load() {
			return errors.New("upstream is down")
		}
		return nil
	}))
	jobsStartQueue(t, f.pool, workers)

	var created DispatchJobResponse
	f.call("POST", "/api/admin/dispatch/job", map[string]any{
		"kind": "flaky", "args": map[string]any{"name": "feed-7"}, "max_attempts": 1, "force": true,
	}, 201, &created)
	id := created.Job.ID
	path := fmt.Sprintf("/api/admin/jobs/%d", id)
	var d JobDetail
	jobsEventually(t, "the job to fail and be discarded", func() bool {
		f.call("GET", path, nil, 200, &d)
		return d.State == "discarded"
	})
	if len(d.Errors) != 1 || d.Errors[0].Error != "upstream is down" || d.Progress == nil || d.Progress.Percent != 50 {
		t.Fatalf("dead job = %+v (progress %+v)", d, d.Progress)
	}
	var dl List[JobInfo]
	f.call("GET", "/api/admin/dead-letters/jobs?kind=flaky", nil, 200, &dl)
	if len(dl.Items) != 1 || dl.Items[0].ID != id {
		t.Fatalf("dead letters = %+v", dl.Items)
	}

	healthy.Store(true)
	f.call("POST", path+"/retry", nil, 200, &d)
	if d.State != "available" || d.MaxAttempts != 2 {
		t.Errorf("after retry: state %s, max attempts %d; want available and 2", d.State, d.MaxAttempts)
	}
	jobsEventually(t, "the retried job to complete", func() bool {
		f.call("GET", path, nil, 200, &d)
		return d.State == "completed"
	})
	if d.Attempt != 2 || len(d.Errors) != 1 {
		t.Errorf("completed job: attempt %d, %d errors; want 2 and 1", d.Attempt, len(d.Errors))
	}
	jobsAudited(t, f, "dispatch.job", id)
	jobsAudited(t, f, "job.retry", id)
	// A completed job takes only a retry.
	status, body := f.do("PUT", path+"/status", adminSecret, map[string]string{"status": "cancelled"})
	var e errorBody
	if status != 422 || json.Unmarshal(body, &e) != nil || !cmp.Equal(e.Error.Allowed, []string{"available"}) {
		t.Errorf("cancelling a completed job: %d %s", status, body)
	}
}

// jobsStartQueue starts a queue that works workers on pool until the test
// ends.
func jobsStartQueue(t *testing.T, pool *pgxpool.Pool, workers *river.Workers) *queue.Queue {
	t.Helper()
	q, err := queue.New(pool, &queue.Config{
		Workers: workers, River: &river.Config{TestOnly: true},
		Logger: slog.New(slog.DiscardHandler), MaintenanceDisabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := q.Stop(ctx); err != nil {
			t.Errorf("stopping the queue: %v", err)
		}
	})
	return q
}

type jobsDigestIn struct {
	Feed string `json:"feed"`
}

// TestDeadTurnJobRetriesItsRun: a run whose only turn fails becomes a dead
// turn job and a failed run; the dead letters show the run, and retrying
// the turn job retries the run, which completes.
func TestDeadTurnJobRetriesItsRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	var healthy atomic.Bool
	digest := workflow.Define("jobs_digest", func(t *workflow.Task, in jobsDigestIn) (string, error) {
		return workflow.Step(t, "send", func(context.Context) (string, error) {
			if !healthy.Load() {
				return "", errors.New("smtp refused the digest of " + in.Feed)
			}
			return "sent " + in.Feed, nil
		})
	}, workflow.WithMaxAttempts(1))
	eng, err := workflow.NewEngine(f.pool, &workflow.Config{
		Workflows: []workflow.Definition{digest},
		Queue:     &queue.Config{River: &river.Config{TestOnly: true}, Logger: slog.New(slog.DiscardHandler)},
		Logger:    slog.New(slog.DiscardHandler),
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
	run, err := digest.Start(ctx, eng, jobsDigestIn{Feed: "news"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, jobsWait)
	defer cancel()
	if _, err := run.Result(wctx); err == nil {
		t.Fatal("the run succeeded; want it failed")
	}

	var dl List[JobInfo]
	jobsEventually(t, "the dead turn job", func() bool {
		f.call("GET", "/api/admin/dead-letters/jobs", nil, 200, &dl)
		return len(dl.Items) == 1
	})
	dead := dl.Items[0]
	if dead.Kind != workflow.TaskKind || dead.Run == nil || dead.Run.RunID != run.ID || dead.Run.Workflow != "jobs_digest" || dead.Run.RunStatus != "failed" || dead.Run.TaskID == "" {
		t.Fatalf("dead turn job = %+v (run %+v)", dead, dead.Run)
	}
	var runs List[workflow.RunInfo]
	f.call("GET", "/api/admin/dead-letters/runs", nil, 200, &runs)
	if len(runs.Items) != 1 || runs.Items[0].ID != run.ID || !strings.Contains(runs.Items[0].Error, "smtp refused") || runs.Total == nil || *runs.Total != 1 {
		t.Fatalf("failed runs = %+v", runs)
	}
	f.call("GET", "/api/admin/dead-letters/runs?workflow=other", nil, 200, &runs)
	if len(runs.Items) != 0 {
		t.Errorf("failed runs of another workflow = %+v", runs.Items)
	}

	path := fmt.Sprintf("/api/admin/jobs/%d", dead.ID)
	// A turn is not cancelled alone.
	if status, body := f.do("PUT", path+"/status", adminSecret, map[string]string{"status": "cancelled"}); status != 422 && status != 409 {
		t.Errorf("cancelling a dead turn job: %d %s", status, body)
	}

	healthy.Store(true)
	var d JobDetail
	f.call("POST", path+"/retry", nil, 200, &d)
	if d.RetriedRun != run.ID || d.Run == nil || d.Run.RunID != run.ID {
		t.Fatalf("retry of the turn job = %+v", d)
	}
	if _, err := eng.Wait(wctx, run.ID); err != nil {
		t.Fatalf("the retried run: %v", err)
	}
	jobsAudited(t, f, "job.retry", dead.ID, "run:"+run.ID)

	// The run completed: retrying its dead turn again says why not.
	status, body := f.do("POST", path+"/retry", adminSecret, nil)
	if status != 409 || !strings.Contains(string(body), run.ID) || !strings.Contains(string(body), "completed") {
		t.Errorf("retrying the turn of a completed run: %d %s", status, body)
	}
	var bulk BulkResponse
	f.call("POST", "/api/admin/jobs/bulk/retry", map[string]any{"job_ids": []int64{dead.ID}}, 200, &bulk)
	if bulk.Failed != 1 || bulk.Results[0].Status != 409 {
		t.Errorf("bulk retry of the turn of a completed run = %+v", bulk)
	}
}

// A response is as long as its data: a job whose args are 4 KB of nested
// arrays, well within every limit, reads as about that much, where an
// indented answer took about n² bytes for n levels (8 MB), at every poll of
// the dashboard.
func TestNestedArgsKeepResponsesSmall(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const depth = 2000
	nested := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	var res DispatchJobResponse
	f.call("POST", "/api/admin/dispatch/job", `{"kind": "probe_job", "force": true, "args": {"a": `+nested+`}}`, http.StatusCreated, &res)
	for _, path := range []string{"/api/admin/jobs?limit=1", "/api/admin/jobs/" + strconv.FormatInt(res.Job.ID, 10)} {
		status, raw := f.do("GET", path, readOnlySecret, nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, status)
		}
		if len(raw) > 64<<10 {
			t.Errorf("GET %s: %d bytes for a job whose args are %d bytes", path, len(raw), len(nested)+7)
		}
	}
}
