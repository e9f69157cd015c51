package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// schedCount counts rows for a test's assertions.
func (f *fixture) schedCount(sql string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// schedCompact compacts JSON for comparisons.
func schedCompact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compacting %s: %v", raw, err)
	}
	return b.String()
}

// schedSeed creates, through the scheduler, two schedules (a job and a
// workflow target) and three recurring jobs, one of them dead.
func schedSeed(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	// A scheduler without a queue accepts any job kind, as one in a
	// process that does not work them.
	s, err := scheduler.New(f.pool, &scheduler.Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, &scheduler.ScheduleParams{
		Name: "daily-askreddit", Description: "Daily crawl of AskReddit", Expression: "@daily",
		TargetType: scheduler.TargetJob, Target: "crawl", Args: map[string]any{"subreddit": "AskReddit"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, &scheduler.ScheduleParams{
		Name: "weekly-digest", Expression: "0 9 * * MON", TimeZone: "Europe/Berlin",
		TargetType: scheduler.TargetWorkflow, Target: "send_digest", Args: json.RawMessage(`{"window": "7d"}`), Disabled: true,
	}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"feed-1", "feed-2", "feed-3"} {
		if _, err := s.Ensure(ctx, "fetch_feed", key, map[string]string{"feed_id": key}, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Disable(ctx, "fetch_feed", "feed-2"); err != nil {
		t.Fatal(err)
	}
	// The third has failed too often: it is parked as a dead letter, as
	// the middleware parks it.
	if _, err := f.pool.Exec(ctx, `UPDATE braid_recurring SET dead_at = now(), consecutive_failures = 8, last_error = 'feed gone'
WHERE kind = 'fetch_feed' AND key = 'feed-3'`); err != nil {
		t.Fatal(err)
	}
}

// TestScheduleRoutesAuthAndShapes calls every route of schedules and
// recurring jobs without a token (401), with the read-only token (403 on
// mutations, 200 on reads) and with the admin token, and checks the
// shapes it answers.
func TestScheduleRoutesAuthAndShapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	schedSeed(t, f)

	routes := []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/api/admin/scheduled-jobs", nil, 200},
		{"GET", "/api/admin/scheduled-jobs/daily-askreddit", nil, 200},
		{"POST", "/api/admin/scheduled-jobs", map[string]any{"name": "hourly", "cron_expression": "@hourly", "kind": "crawl"}, 201},
		{"PUT", "/api/admin/scheduled-jobs/hourly", map[string]any{"description": "every hour"}, 200},
		{"POST", "/api/admin/scheduled-jobs/hourly/toggle", map[string]any{"enabled": false}, 200},
		{"POST", "/api/admin/scheduled-jobs/hourly/run", nil, 200},
		{"DELETE", "/api/admin/scheduled-jobs/hourly", nil, 200},
		{"GET", "/api/admin/recurring", nil, 200},
		{"GET", "/api/admin/recurring/fetch_feed/feed-1", nil, 200},
		{"POST", "/api/admin/recurring/fetch_feed/feed-1/disable", nil, 200},
		{"POST", "/api/admin/recurring/fetch_feed/feed-1/enable", nil, 200},
		{"POST", "/api/admin/recurring/fetch_feed/feed-3/revive", nil, 200},
	}
	for _, rt := range routes {
		if status, body := f.do(rt.method, rt.path, "", rt.body); status != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401; %s", rt.method, rt.path, status, body)
		}
		mutates := rt.method != "GET"
		status, body := f.do(rt.method, rt.path, readOnlySecret, rt.body)
		switch {
		case mutates && status != http.StatusForbidden:
			t.Errorf("%s %s with the read-only token: %d, want 403; %s", rt.method, rt.path, status, body)
		case !mutates && status != http.StatusOK:
			t.Errorf("%s %s with the read-only token: %d, want 200; %s", rt.method, rt.path, status, body)
		}
	}
	if n := f.schedCount(`SELECT count(*) FROM braid_schedules`); n != 2 {
		t.Fatalf("read-only calls changed the schedules: %d rows, want 2", n)
	}
	for _, rt := range routes {
		status, body := f.do(rt.method, rt.path, adminSecret, rt.body)
		if status != rt.want {
			t.Errorf("%s %s with the admin token: %d, want %d; %s", rt.method, rt.path, status, rt.want, body)
			continue
		}
		var shape map[string]any
		if err := json.Unmarshal(body, &shape); err != nil {
			t.Errorf("%s %s: not a JSON object: %s", rt.method, rt.path, body)
			continue
		}
		var want []string
		switch {
		case strings.HasSuffix(rt.path, "/scheduled-jobs") && rt.method == "GET", strings.HasSuffix(rt.path, "/recurring"):
			want = []string{"items", "limit", "offset", "total"}
		case strings.HasSuffix(rt.path, "/run"):
			want = []string{"schedule", "fired_at", "job_id"}
		case rt.method == "DELETE":
			want = []string{"id", "name", "deleted"}
		case strings.Contains(rt.path, "/scheduled-jobs"):
			want = []string{"id", "name", "description", "cron_expression", "time_zone", "enabled", "priority", "target_type",
				"kind", "args", "queue", "overlap_policy", "catch_up_policy", "next_run_at", "last_run_at", "last_error", "last_error_at",
				"fire_failures", "created_by", "created_at", "updated_at"}
		default:
			want = []string{"id", "kind", "key", "args", "queue", "priority", "enabled", "next_run_at", "consecutive_failures",
				"dead", "running", "created_at", "updated_at"}
		}
		for _, k := range want {
			if _, ok := shape[k]; !ok {
				t.Errorf("%s %s: no field %q in %s", rt.method, rt.path, k, body)
			}
		}
	}

	// The list shapes, item by item.
	var schedules List[ScheduledJob]
	f.call("GET", "/api/admin/scheduled-jobs", nil, 200, &schedules)
	var names []string
	for _, s := range schedules.Items {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"daily-askreddit", "weekly-digest"}, names); diff != "" || schedules.Total == nil || *schedules.Total != 2 {
		t.Errorf("scheduled jobs (-want +got):\n%s (total %v)", diff, schedules.Total)
	}
	wf := schedules.Items[1]
	if wf.TargetType != "workflow" || wf.Workflow != "send_digest" || schedCompact(t, wf.Input) != `{"window":"7d"}` || wf.Kind != "" ||
		wf.TimeZone != "Europe/Berlin" || wf.CronExpression != "0 9 * * MON" || wf.Enabled {
		t.Errorf("workflow schedule shown as %+v", wf)
	}

	var recurring List[RecurringJob]
	f.call("GET", "/api/admin/recurring", nil, 200, &recurring)
	type row struct {
		Key           string
		Enabled, Dead bool
		Failures      int
	}
	var rows []row
	for _, r := range recurring.Items {
		rows = append(rows, row{r.Key, r.Enabled, r.Dead, r.ConsecutiveFailures})
	}
	// feed-3 was revived above: live, failures reset.
	want := []row{{"feed-1", true, false, 0}, {"feed-2", false, false, 0}, {"feed-3", true, false, 0}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("recurring jobs (-want +got):\n%s", diff)
	}

	log := f.auditLog()
	for _, action := range []string{"schedule.create", "schedule.update", "schedule.toggle", "schedule.run_now", "schedule.delete",
		"recurring.enable", "recurring.disable", "recurring.revive"} {
		if !strings.Contains(log, `"action":"`+action+`"`) {
			t.Errorf("no audit line for %s in:\n%s", action, log)
		}
	}
}

// TestScheduledJobLifecycle drives a schedule through the API alone:
// create, get, update, toggle, run now, delete.
func TestScheduledJobLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)

	// The classic job-queue admin API's shape, with braid's target in place of subreddit_id.
	var created ScheduledJob
	f.call("POST", "/api/admin/scheduled-jobs", map[string]any{
		"name": "daily-askreddit", "description": "Daily crawl of AskReddit", "cron_expression": "@daily",
		"enabled": true, "priority": 2, "kind": "crawl", "args": map[string]any{"subreddit": "AskReddit"},
		"queue": "crawls", "overlap_policy": "allow", "catch_up_policy": "skip",
	}, http.StatusCreated, &created)
	created.Args = json.RawMessage(schedCompact(t, created.Args))
	want := ScheduledJob{
		ID: created.ID, Name: "daily-askreddit", Description: "Daily crawl of AskReddit", CronExpression: "@daily",
		TimeZone: "UTC", Enabled: true, Priority: 2, TargetType: "job", Kind: "crawl", Args: json.RawMessage(`{"subreddit":"AskReddit"}`),
		Queue: "crawls", OverlapPolicy: "allow", CatchUpPolicy: "skip", NextRunAt: created.NextRunAt,
		CreatedBy: "ops", CreatedAt: created.CreatedAt, UpdatedAt: created.UpdatedAt,
	}
	if diff := cmp.Diff(want, created); diff != "" {
		t.Fatalf("created (-want +got):\n%s", diff)
	}
	if created.NextRunAt.Hour() != 0 || created.NextRunAt.Minute() != 0 || !created.NextRunAt.After(created.CreatedAt) {
		t.Errorf("@daily next_run_at = %s, want the next midnight after %s", created.NextRunAt, created.CreatedAt)
	}

	// Get by name, and by the numeric id of the classic routes.
	var got ScheduledJob
	f.call("GET", "/api/admin/scheduled-jobs/daily-askreddit", nil, 200, &got)
	got.Args = json.RawMessage(schedCompact(t, got.Args))
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("get by name (-created +got):\n%s", diff)
	}
	f.call("GET", "/api/admin/scheduled-jobs/"+strconv.FormatInt(created.ID, 10), nil, 200, &got)
	if got.Name != "daily-askreddit" {
		t.Errorf("get by id %d = %q", created.ID, got.Name)
	}

	// Update with the classic job-queue admin API's shape: a new expression moves next_run_at.
	var updated ScheduledJob
	f.call("PUT", "/api/admin/scheduled-jobs/daily-askreddit", map[string]any{
		"name": "daily-askreddit", "description": "Hourly crawl", "cron_expression": "@hourly", "enabled": true, "priority": 1,
	}, 200, &updated)
	// The next hour, which is the next midnight during the last hour of a
	// day: never later than the daily slot, within the hour, on the hour.
	if updated.CronExpression != "@hourly" || updated.Description != "Hourly crawl" || updated.Priority != 1 ||
		updated.Kind != "crawl" || updated.Queue != "crawls" || updated.NextRunAt.After(created.NextRunAt) ||
		updated.NextRunAt.Minute() != 0 || updated.NextRunAt.Second() != 0 || time.Until(updated.NextRunAt) > time.Hour {
		t.Errorf("after update: %+v", updated)
	}

	// Toggle off and on.
	var toggled ScheduledJob
	f.call("POST", "/api/admin/scheduled-jobs/daily-askreddit/toggle", map[string]any{"enabled": false}, 200, &toggled)
	if toggled.Enabled {
		t.Error("toggle to false left the schedule enabled")
	}
	f.call("POST", "/api/admin/scheduled-jobs/daily-askreddit/toggle", map[string]any{"enabled": true}, 200, &toggled)
	if !toggled.Enabled {
		t.Error("toggle to true left the schedule disabled")
	}

	// Run now inserts a job at once; next_run_at stays.
	var fire ScheduleFire
	f.call("POST", "/api/admin/scheduled-jobs/daily-askreddit/run", nil, 200, &fire)
	if fire.JobID == nil {
		t.Fatalf("run now inserted no job: %+v", fire)
	}
	var kind, queue, args, meta string
	var priority int
	err := f.pool.QueryRow(context.Background(), `SELECT kind, queue, priority, args::text, metadata->>'braid_schedule' FROM river_job WHERE id = $1`,
		*fire.JobID).Scan(&kind, &queue, &priority, &args, &meta)
	if err != nil {
		t.Fatalf("the job of run now: %v", err)
	}
	if kind != "crawl" || queue != "crawls" || priority != 1 || args != `{"subreddit": "AskReddit"}` || meta != "daily-askreddit" {
		t.Errorf("run now inserted %s in %s at priority %d with %s for %q", kind, queue, priority, args, meta)
	}
	if !fire.Schedule.NextRunAt.Equal(toggled.NextRunAt) || fire.Schedule.LastRunAt == nil || !fire.Schedule.LastRunAt.Equal(fire.FiredAt) ||
		fire.Schedule.LastJobID == nil || *fire.Schedule.LastJobID != *fire.JobID || fire.Schedule.LastError != nil {
		t.Errorf("after run now the schedule is %+v; want next_run_at %s kept and the fire recorded", fire.Schedule, toggled.NextRunAt)
	}

	// Delete, then it is gone.
	var deleted DeletedSchedule
	f.call("DELETE", "/api/admin/scheduled-jobs/daily-askreddit", nil, 200, &deleted)
	if diff := cmp.Diff(DeletedSchedule{ID: created.ID, Name: "daily-askreddit", Deleted: true}, deleted); diff != "" {
		t.Errorf("delete (-want +got):\n%s", diff)
	}
	for _, method := range []string{"GET", "DELETE"} {
		status, body := f.do(method, "/api/admin/scheduled-jobs/daily-askreddit", adminSecret, nil)
		if status != http.StatusNotFound || !strings.Contains(string(body), "daily-askreddit") {
			t.Errorf("%s after delete: %d %s, want 404 naming the schedule", method, status, body)
		}
	}
	// The job it fired stays.
	if n := f.schedCount(`SELECT count(*) FROM river_job WHERE id = $1`, *fire.JobID); n != 1 {
		t.Error("deleting the schedule deleted the job it fired")
	}

	log := f.auditLog()
	for _, action := range []string{"schedule.create", "schedule.update", "schedule.toggle", "schedule.run_now", "schedule.delete"} {
		if !strings.Contains(log, `"who":"ops","action":"`+action+`","ids":["daily-askreddit",`+strconv.FormatInt(created.ID, 10)) {
			t.Errorf("no audit line by ops for %s naming the schedule in:\n%s", action, log)
		}
	}
}

// TestScheduledJobBadInput sends bad requests: each gets a clear 4xx that
// names the problem, and nothing is written.
func TestScheduledJobBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.call("POST", "/api/admin/scheduled-jobs", map[string]any{"name": "taken", "cron_expression": "@daily", "kind": "crawl"}, 201, nil)
	f.call("POST", "/api/admin/scheduled-jobs", map[string]any{"name": "flow", "cron_expression": "@daily", "workflow": "send_digest"}, 201, nil)
	before := f.schedCount(`SELECT count(*) FROM braid_schedules`)
	snapshot := func() string {
		var s string
		if err := f.pool.QueryRow(context.Background(), `SELECT string_agg(to_jsonb(s)::text, ',' ORDER BY id) FROM braid_schedules s`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	was := snapshot()

	cases := []struct {
		name, method, path string
		body               any
		status             int
		message            string
		allowed            []string
	}{
		{"invalid cron", "POST", "", map[string]any{"name": "x", "cron_expression": "61 * * * *", "kind": "crawl"}, 422, `cron_expression "61 * * * *" is invalid: minute field`, nil},
		{"unknown descriptor", "POST", "", map[string]any{"name": "x", "cron_expression": "@fortnightly", "kind": "crawl"}, 422, `cron_expression "@fortnightly" is invalid`, nil},
		{"every too short", "POST", "", map[string]any{"name": "x", "cron_expression": "@every 1ms", "kind": "crawl"}, 422, `cron_expression "@every 1ms" is invalid`, nil},
		{"invalid cron on update", "PUT", "/taken", map[string]any{"cron_expression": "* * *"}, 422, `cron_expression "* * *" is invalid: expected 5 fields`, nil},
		{"bad time zone", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "time_zone": "Mars/Olympus", "kind": "crawl"}, 422, `time_zone "Mars/Olympus" is invalid`, nil},
		{"duplicate name", "POST", "", map[string]any{"name": "taken", "cron_expression": "@daily", "kind": "crawl"}, 409, `"taken" already exists; pick another name`, nil},
		{"the classic subreddit_id", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "crawl", "subreddit_id": 1}, 400, `unknown field "subreddit_id"`, nil},
		{"no name", "POST", "", map[string]any{"cron_expression": "@daily", "kind": "crawl"}, 422, `field "name" is required`, nil},
		{"no cron", "POST", "", map[string]any{"name": "x", "kind": "crawl"}, 422, `field "cron_expression" is required`, nil},
		{"no target", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily"}, 422, `a target is required`, nil},
		{"two targets", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "a", "workflow": "b"}, 422, `not both`, nil},
		{"args not an object", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "crawl", "args": []int{1}}, 422, `field "args" must be a JSON object`, nil},
		{"input with a kind", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "crawl", "input": 1}, 422, `field "input" goes with "workflow"`, nil},
		{"a 0-100 priority", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "crawl", "priority": 10}, 422, `priority 10 is out of range`, []string{"1", "2", "3", "4"}},
		{"bad overlap", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "crawl", "overlap_policy": "queue"}, 422, `overlap_policy "queue" is invalid`, []string{"skip", "allow"}},
		{"bad catch-up", "PUT", "/taken", map[string]any{"catch_up_policy": "never"}, 422, `catch_up_policy "never" is invalid`, []string{"once", "skip", "all"}},
		{"bad queue", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "crawl", "queue": "Bad Queue"}, 422, `queue "Bad Queue" is invalid`, nil},
		{"negative attempts", "PUT", "/taken", map[string]any{"max_attempts": -1}, 422, `max_attempts -1 is outside 0-32767`, nil},
		{"empty name", "POST", "", map[string]any{"name": "", "cron_expression": "@daily", "kind": "crawl"}, 422, `field "name" is empty`, nil},
		{"long name", "POST", "", map[string]any{"name": strings.Repeat("n", 201), "cron_expression": "@daily", "kind": "crawl"}, 422, `the limit is 200`, nil},
		{"NUL in name", "POST", "", map[string]any{"name": "a\x00b", "cron_expression": "@daily", "kind": "crawl"}, 422, `NUL`, nil},
		{"long description", "PUT", "/taken", map[string]any{"description": strings.Repeat("d", 2001)}, 422, `field "description" is 2001 characters; the limit is 2000`, nil},
		{"NUL in args", "POST", "", map[string]any{"name": "x", "cron_expression": "@daily", "kind": "crawl", "args": map[string]any{"a": "b\x00"}}, 422, `field "args" cannot be stored: it holds a NUL character`, nil},
		{"lone surrogate in input", "POST", "", json.RawMessage(`{"name": "x", "cron_expression": "@daily", "workflow": "flow", "input": "\udfff"}`), 422, `field "input" cannot be stored: it holds an unpaired surrogate`, nil},
		{"rename", "PUT", "/taken", map[string]any{"name": "other"}, 422, `cannot be renamed`, nil},
		{"input on a job", "PUT", "/taken", map[string]any{"input": "x"}, 422, `field "input" is for a workflow`, nil},
		{"args on a workflow", "PUT", "/flow", map[string]any{"args": map[string]any{}}, 422, `field "args" is for a job kind`, nil},
		{"malformed JSON", "POST", "", `{"name": `, 400, `malformed JSON`, nil},
		{"wrong type", "POST", "", `{"name": 5}`, 400, `field "name" must be string`, nil},
		{"empty body", "POST", "", "", 400, `empty request body`, nil},
		{"huge body", "POST", "", `{"description": "` + strings.Repeat("x", MaxBodyBytesDefault) + `"}`, 413, `request body too large`, nil},
		{"toggle without enabled", "POST", "/taken/toggle", map[string]any{}, 422, `field "enabled" is required`, nil},
		{"unknown schedule", "GET", "/nope", nil, 404, `scheduled job "nope" not found`, nil},
		{"unknown id", "GET", "/999999", nil, 404, `scheduled job "999999" not found`, nil},
		{"unknown update", "PUT", "/nope", map[string]any{"description": "x"}, 404, `not found`, nil},
		{"unknown toggle", "POST", "/nope/toggle", map[string]any{"enabled": true}, 404, `not found`, nil},
		{"unknown run", "POST", "/nope/run", nil, 404, `not found`, nil},
		{"SQL in a name", "GET", "/" + url.PathEscape("x'; DROP TABLE braid_schedules; --"), nil, 404, `not found`, nil},
		{"bad enabled filter", "GET", "?enabled=maybe", nil, 422, `invalid enabled "maybe"`, []string{"true", "false"}},
		{"negative limit", "GET", "?limit=-1", nil, 400, `invalid limit "-1"`, nil},
		// No process has run this workflow yet: the server cannot tell its
		// queue, and says so.
		{"run a workflow never run", "POST", "/flow/run", nil, 422, `"send_digest" is not registered with this engine, and the database holds no run of it`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, raw := f.do(tc.method, "/api/admin/scheduled-jobs"+tc.path, adminSecret, tc.body)
			var e errorBody
			if err := json.Unmarshal(raw, &e); err != nil || e.Error == nil {
				t.Fatalf("%d %s: not a JSON error", status, raw)
			}
			if status != tc.status || e.Error.Status != tc.status || !strings.Contains(e.Error.Message, tc.message) {
				t.Errorf("%d %q, want %d containing %q", status, e.Error.Message, tc.status, tc.message)
			}
			if diff := cmp.Diff(tc.allowed, e.Error.Allowed); diff != "" {
				t.Errorf("allowed (-want +got):\n%s", diff)
			}
		})
	}
	if n := f.schedCount(`SELECT count(*) FROM braid_schedules`); n != before {
		t.Errorf("bad requests changed the number of schedules: %d, want %d", n, before)
	}
	if now := snapshot(); now != was {
		t.Errorf("bad requests changed the schedules:\nbefore %s\nafter  %s", was, now)
	}
	if n := f.schedCount(`SELECT count(*) FROM river_job`); n != 0 {
		t.Errorf("bad requests inserted %d jobs", n)
	}
}

// TestRecurringRoutes lists recurring jobs with filters and changes them.
func TestRecurringRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	schedSeed(t, f)
	if _, err := f.srv.sched.Ensure(context.Background(), "renew_websub", "all", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}

	keys := func(query string) []string {
		t.Helper()
		var l List[RecurringJob]
		f.call("GET", "/api/admin/recurring"+query, nil, 200, &l)
		out := []string{}
		for _, r := range l.Items {
			out = append(out, r.Kind+"/"+r.Key)
		}
		if l.Total == nil || (l.Offset == 0 && int(*l.Total) < len(out)) {
			t.Errorf("GET %s: total %v with %d items", query, l.Total, len(out))
		}
		return out
	}
	filters := []struct {
		query string
		want  []string
	}{
		{"", []string{"fetch_feed/feed-1", "fetch_feed/feed-2", "fetch_feed/feed-3", "renew_websub/all"}},
		{"?kind=renew_websub", []string{"renew_websub/all"}},
		{"?enabled=false", []string{"fetch_feed/feed-2"}},
		{"?dead=true", []string{"fetch_feed/feed-3"}},
		{"?dead=false&kind=fetch_feed", []string{"fetch_feed/feed-1", "fetch_feed/feed-2"}},
		{"?limit=2&offset=1", []string{"fetch_feed/feed-2", "fetch_feed/feed-3"}},
		{"?kind=" + url.QueryEscape("x' OR '1'='1"), []string{}},
	}
	for _, tc := range filters {
		if diff := cmp.Diff(tc.want, keys(tc.query)); diff != "" {
			t.Errorf("GET /api/admin/recurring%s (-want +got):\n%s", tc.query, diff)
		}
	}

	var dead RecurringJob
	f.call("GET", "/api/admin/recurring/fetch_feed/feed-3", nil, 200, &dead)
	if !dead.Dead || dead.DeadAt == nil || dead.ConsecutiveFailures != 8 || dead.LastError != "feed gone" {
		t.Errorf("dead recurring job shown as %+v", dead)
	}
	var revived RecurringJob
	f.call("POST", "/api/admin/recurring/fetch_feed/feed-3/revive", nil, 200, &revived)
	if revived.Dead || revived.ConsecutiveFailures != 0 || revived.NextRunAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("revived recurring job shown as %+v", revived)
	}
	var rj RecurringJob
	f.call("POST", "/api/admin/recurring/fetch_feed/feed-1/disable", nil, 200, &rj)
	if rj.Enabled {
		t.Error("disable left the job enabled")
	}
	f.call("POST", "/api/admin/recurring/fetch_feed/feed-1/enable", nil, 200, &rj)
	if !rj.Enabled {
		t.Error("enable left the job disabled")
	}

	for _, tc := range []struct {
		method, path string
		status       int
		message      string
	}{
		{"GET", "/api/admin/recurring/fetch_feed/nope", 404, "recurring job fetch_feed/nope"},
		{"POST", "/api/admin/recurring/nope/feed-1/enable", 404, "not found"},
		{"POST", "/api/admin/recurring/fetch_feed/nope/revive", 404, "not found"},
		{"GET", "/api/admin/recurring/fetch_feed/a%00b", 400, "without NUL"},
		{"GET", "/api/admin/recurring?enabled=2", 422, `invalid enabled "2"`},
		{"GET", "/api/admin/recurring?dead=yes", 422, `invalid dead "yes"`},
		{"GET", "/api/admin/recurring?kind=%00", 400, "invalid kind filter"},
		{"GET", "/api/admin/recurring?limit=0", 400, "invalid limit"},
	} {
		status, raw := f.do(tc.method, tc.path, adminSecret, nil)
		var e errorBody
		if err := json.Unmarshal(raw, &e); err != nil || e.Error == nil {
			t.Errorf("%s %s: %d %s is not a JSON error", tc.method, tc.path, status, raw)
			continue
		}
		if status != tc.status || !strings.Contains(e.Error.Message, tc.message) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, status, e.Error.Message, tc.status, tc.message)
		}
	}
	log := f.auditLog()
	if !strings.Contains(log, `"who":"ops","action":"recurring.revive","ids":["fetch_feed","feed-3",`) {
		t.Errorf("no audit line by ops for the revive in:\n%s", log)
	}
}

// TestScheduledWorkflowRunNow runs a workflow schedule now from a server
// whose engine does not register the workflow: the run starts on the
// queue of the workflow's earlier runs.
func TestScheduledWorkflowRunNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)

	// A service's engine, never started, starts one run of its workflow in
	// queue "digests", as a service would.
	digest := workflow.Define("send_digest", func(t *workflow.Task, in map[string]string) (string, error) { return "sent", nil },
		workflow.WithQueue("digests"))
	eng, err := workflow.NewEngine(f.pool, &workflow.Config{
		Workflows: []workflow.Definition{digest}, Logger: quietLogger, DisableDelayProcessor: true,
		Queue: &queue.Config{Logger: quietLogger, MaintenanceDisabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := digest.Start(ctx, eng, map[string]string{"window": "1d"}, nil); err != nil {
		t.Fatal(err)
	}

	f.call("POST", "/api/admin/scheduled-jobs", map[string]any{
		"name": "weekly-digest", "cron_expression": "0 9 * * MON", "time_zone": "Europe/Berlin",
		"workflow": "send_digest", "input": map[string]any{"window": "7d"},
	}, 201, nil)
	var fire ScheduleFire
	f.call("POST", "/api/admin/scheduled-jobs/weekly-digest/run", nil, 200, &fire)
	if fire.RunID == "" || fire.JobID != nil || fire.Schedule.LastRunID != fire.RunID {
		t.Fatalf("run now of a workflow schedule: %+v", fire)
	}
	var wf, input, key, jobQueue string
	err = f.pool.QueryRow(ctx, `SELECT r.workflow, r.input::text, r.idempotency_key, j.queue
FROM braid_runs r JOIN braid_tasks t ON t.run_id = r.id AND t.parent_task_id IS NULL
JOIN river_job j ON j.kind = 'braid_task' AND braid_turn_task(j.unique_key, j.args) = t.id
WHERE r.id = $1`, fire.RunID).Scan(&wf, &input, &key, &jobQueue)
	if err != nil {
		t.Fatalf("the run of run now: %v", err)
	}
	if wf != "send_digest" || input != `{"window": "7d"}` || key != scheduler.IdempotencyKey("weekly-digest", fire.FiredAt) || jobQueue != "digests" {
		t.Errorf("run now started %s with %s, key %q, its turn in queue %q", wf, input, key, jobQueue)
	}
}
