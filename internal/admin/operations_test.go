package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
)

// opsArgs are the args of the plain jobs these tests insert.
type opsArgs struct {
	N int `json:"n"`
}

func (opsArgs) Kind() string { return "ops_probe" }

type opsWorker struct {
	river.WorkerDefaults[opsArgs]
}

func (opsWorker) Work(context.Context, *river.Job[opsArgs]) error { return nil }

// opsInsert inserts n jobs into a queue through River.
func opsInsert(t *testing.T, f *fixture, queueName string, n int) []int64 {
	t.Helper()
	params := make([]queue.InsertManyParams, n)
	for i := range params {
		params[i] = queue.InsertManyParams{Args: opsArgs{N: i}, InsertOpts: &queue.InsertOpts{InsertOpts: river.InsertOpts{Queue: queueName}}}
	}
	q, err := queue.New(f.pool, &queue.Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.InsertMany(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// opsExec runs test setup SQL.
func opsExec(t *testing.T, f *fixture, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// opsWait polls cond until it holds, failing after a generous deadline.
func opsWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOperationsRoutesAuthAndShapes calls the lease, queue and overview
// routes without a token, with the read-only token and with the admin
// token.
func TestOperationsRoutesAuthAndShapes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	lease, err := f.srv.leases.TryAcquire(ctx, scheduler.LeaseNameDefault)
	if err != nil {
		t.Fatal(err)
	}
	opsInsert(t, f, "default", 2)
	// A queue River knows, as a client that works it leaves it.
	opsExec(t, f, `INSERT INTO river_queue (name, created_at, metadata, updated_at) VALUES ('reports', now(), '{}', now())`)

	reads := []string{"/api/admin/leases", "/api/admin/queues", "/api/admin/overview"}
	for _, p := range reads {
		if status, _ := f.do("GET", p, "", nil); status != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", p, status)
		}
		if status, body := f.do("GET", p, readOnlySecret, nil); status != http.StatusOK {
			t.Errorf("GET %s with the read-only token: %d, want 200; %s", p, status, body)
		}
	}
	for _, p := range []string{"/api/admin/queues/reports/pause", "/api/admin/queues/reports/resume"} {
		if status, _ := f.do("POST", p, "", nil); status != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: %d, want 401", p, status)
		}
		if status, body := f.do("POST", p, readOnlySecret, nil); status != http.StatusForbidden {
			t.Errorf("POST %s with the read-only token: %d, want 403; %s", p, status, body)
		}
	}
	var paused int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM river_queue WHERE paused_at IS NOT NULL`).Scan(&paused); err != nil || paused != 0 {
		t.Fatalf("read-only calls paused %d queues (%v)", paused, err)
	}

	var leases List[LeaseInfo]
	f.call("GET", "/api/admin/leases", nil, 200, &leases)
	if len(leases.Items) != 1 {
		t.Fatalf("leases: %+v", leases.Items)
	}
	l := leases.Items[0]
	if l.Name != scheduler.LeaseNameDefault || l.Holder != lease.Holder || l.Generation != lease.Generation || l.Expired ||
		!l.ExpiresAt.Equal(lease.ExpiresAt) || l.ExpiresInSeconds <= 0 {
		t.Errorf("lease shown as %+v; acquired %+v", l, lease)
	}
	// An expired lease is shown as expired, on the database clock.
	opsExec(t, f, `UPDATE braid_leases SET expires_at = now() - interval '1 second'`)
	f.call("GET", "/api/admin/leases", nil, 200, &leases)
	if l := leases.Items[0]; !l.Expired || l.ExpiresInSeconds >= 0 {
		t.Errorf("expired lease shown as %+v", l)
	}

	var queues List[QueueInfo]
	f.call("GET", "/api/admin/queues", nil, 200, &queues)
	type q struct {
		Name          string
		Depth, Total  int64
		Known, Paused bool
	}
	var got []q
	for _, qi := range queues.Items {
		got = append(got, q{qi.Name, qi.Depth, qi.Total, qi.Known, qi.Paused})
		if len(qi.ByState) != 8 {
			t.Errorf("queue %s by_state has %d states, want River's 8: %v", qi.Name, len(qi.ByState), qi.ByState)
		}
	}
	if diff := cmp.Diff([]q{{"default", 2, 2, false, false}, {"reports", 0, 0, true, false}}, got); diff != "" {
		t.Errorf("queues (-want +got):\n%s", diff)
	}

	var raw map[string]any
	f.call("GET", "/api/admin/overview", nil, 200, &raw)
	for _, k := range []string{"now", "jobs", "runs", "last_hour", "throughput", "queues", "leases", "schedules", "recurring", "alerts", "thresholds"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("overview has no %q", k)
		}
	}
}

// TestQueuePauseResume pauses and resumes a queue that a started River
// client works, through the API.
func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)

	workers := river.NewWorkers()
	river.AddWorker(workers, opsWorker{})
	wq, err := queue.New(f.pool, &queue.Config{
		Logger: quietLogger, Workers: workers, MaintenanceDisabled: true,
		Queues:        map[string]river.QueueConfig{"pausable": {MaxWorkers: 2}},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := wq.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := wq.Stop(stopCtx); err != nil {
			t.Errorf("stopping the queue: %v", err)
		}
	})
	pausedAt := func() (known bool, paused bool) {
		var p *time.Time
		err := f.pool.QueryRow(ctx, `SELECT paused_at FROM river_queue WHERE name = 'pausable'`).Scan(&p)
		if err != nil {
			return false, false
		}
		return true, p != nil
	}
	opsWait(t, "River to register queue pausable", func() bool { known, _ := pausedAt(); return known })

	var qi QueueInfo
	f.call("POST", "/api/admin/queues/pausable/pause", nil, 200, &qi)
	if !qi.Paused || qi.PausedAt == nil || !qi.Known || qi.Name != "pausable" {
		t.Errorf("after pause: %+v", qi)
	}
	if _, paused := pausedAt(); !paused {
		t.Error("river_queue has no paused_at after pause")
	}
	// Pausing twice is no error.
	f.call("POST", "/api/admin/queues/pausable/pause", nil, 200, &qi)

	// A job inserted while the queue is paused waits; it is worked once
	// the queue resumes.
	ids := opsInsert(t, f, "pausable", 1)
	var queues List[QueueInfo]
	f.call("GET", "/api/admin/queues", nil, 200, &queues)
	if len(queues.Items) != 1 || !queues.Items[0].Paused {
		t.Errorf("queues while paused: %+v", queues.Items)
	}
	qi = QueueInfo{}
	f.call("POST", "/api/admin/queues/pausable/resume", nil, 200, &qi)
	if qi.Paused || qi.PausedAt != nil {
		t.Errorf("after resume: %+v", qi)
	}
	if _, paused := pausedAt(); paused {
		t.Error("river_queue keeps paused_at after resume")
	}
	opsWait(t, "the job to complete after resume", func() bool {
		var state string
		_ = f.pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, ids[0]).Scan(&state)
		return state == "completed"
	})

	for _, tc := range []struct {
		path    string
		status  int
		message string
	}{
		{"/api/admin/queues/never-worked/pause", 404, `queue "never-worked" is unknown to River`},
		{"/api/admin/queues/never-worked/resume", 404, `queue "never-worked" is unknown to River`},
		{"/api/admin/queues/Bad%20Name/pause", 400, `queue "Bad Name" is invalid`},
		{"/api/admin/queues/*/pause", 400, `every-queue name`},
		{"/api/admin/queues/x';%20DROP%20TABLE%20river_queue;--/pause", 400, `is invalid: use 1 to 64`},
	} {
		status, raw := f.do("POST", tc.path, adminSecret, nil)
		var e errorBody
		if err := json.Unmarshal(raw, &e); err != nil || e.Error == nil || status != tc.status || !strings.Contains(e.Error.Message, tc.message) {
			t.Errorf("POST %s: %d %s, want %d containing %q", tc.path, status, raw, tc.status, tc.message)
		}
	}
	log := f.auditLog()
	for _, action := range []string{"queue.pause", "queue.resume"} {
		if !strings.Contains(log, `"who":"ops","action":"`+action+`","ids":["pausable"]`) {
			t.Errorf("no audit line by ops for %s in:\n%s", action, log)
		}
	}
}

// opsAlerts returns the overview's alerts of a kind.
func opsAlerts(t *testing.T, f *fixture, kind string) ([]Alert, *Overview) {
	t.Helper()
	var ov Overview
	f.call("GET", "/api/admin/overview", nil, 200, &ov)
	var out []Alert
	for _, a := range ov.Alerts {
		if a.Kind == kind {
			out = append(out, a)
		}
	}
	return out, &ov
}

// TestOverviewQueueDepthAlert raises the queue-depth alert once a queue
// holds more available jobs than the threshold, and not before.
func TestOverviewQueueDepthAlert(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Alerts.QueueDepth = 3 })
	opsInsert(t, f, "busy", 3)
	opsInsert(t, f, "quiet", 1)
	if alerts, ov := opsAlerts(t, f, AlertQueueDepth); len(alerts) != 0 {
		t.Errorf("alerts at the threshold: %+v", alerts)
	} else if ov.Thresholds.QueueDepth != 3 || ov.Jobs.ByQueue["busy"]["available"] != 3 || ov.Jobs.ByState["available"] != 4 || ov.Jobs.Total != 4 {
		t.Errorf("overview: thresholds %+v, jobs %+v", ov.Thresholds, ov.Jobs)
	}
	opsInsert(t, f, "busy", 1)
	alerts, _ := opsAlerts(t, f, AlertQueueDepth)
	want := []Alert{{Kind: AlertQueueDepth, Subject: "busy", Value: 4, Threshold: 3,
		Message: `queue "busy" holds 4 available jobs, over the limit of 3`}}
	if diff := cmp.Diff(want, alerts); diff != "" {
		t.Errorf("queue-depth alerts (-want +got):\n%s", diff)
	}
	// Jobs that are not available (scheduled ones) do not count.
	opsExec(t, f, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour' WHERE id = (SELECT min(id) FROM river_job WHERE queue = 'busy')`)
	if alerts, _ := opsAlerts(t, f, AlertQueueDepth); len(alerts) != 0 {
		t.Errorf("alerts with 3 available and 1 scheduled: %+v", alerts)
	}
}

// TestOverviewAlertsAndHour checks the failed-rate, long-running and
// missed-schedule alerts, and the counts of the last hour.
func TestOverviewAlertsAndHour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, func(c *Config) { c.Alerts.LongRunning = 10 * time.Minute })
	ids := opsInsert(t, f, "default", 12)

	// Nothing wrong yet.
	var ov Overview
	f.call("GET", "/api/admin/overview", nil, 200, &ov)
	if len(ov.Alerts) != 0 {
		t.Errorf("alerts on a quiet database: %+v", ov.Alerts)
	}
	if len(ov.Throughput) != 60 || !ov.Throughput[59].Minute.Equal(ov.Now.Truncate(time.Minute)) {
		t.Errorf("throughput has %d buckets, the last at %v (now %v)", len(ov.Throughput), ov.Throughput[len(ov.Throughput)-1].Minute, ov.Now)
	}
	wantRuns := map[string]int64{"pending": 0, "running": 0, "waiting": 0, "completed": 0, "failed": 0, "cancelled": 0}
	if diff := cmp.Diff(wantRuns, ov.Runs.ByStatus); diff != "" {
		t.Errorf("runs by status (-want +got):\n%s", diff)
	}

	// 9 completed and 1 discarded in the last hour is exactly 10%: no
	// alert. A second discarded one passes it.
	opsExec(t, f, `UPDATE river_job SET state = 'completed', finalized_at = now() - interval '2 minutes' WHERE id = ANY($1)`, ids[:9])
	opsExec(t, f, `UPDATE river_job SET state = 'discarded', finalized_at = now(), errors = ARRAY['{"error": "boom"}'::jsonb] WHERE id = $1`, ids[9])
	if alerts, ov := opsAlerts(t, f, AlertFailedRate); len(alerts) != 0 {
		t.Errorf("alerts at 10%%: %+v", alerts)
	} else if ov.LastHour.Completed != 9 || ov.LastHour.Discarded != 1 || ov.LastHour.FailedRate != 0.1 {
		t.Errorf("last hour: %+v", ov.LastHour)
	}
	opsExec(t, f, `UPDATE river_job SET state = 'discarded', finalized_at = now(), errors = ARRAY['{"error": "boom"}'::jsonb] WHERE id = $1`, ids[10])
	alerts, ov2 := opsAlerts(t, f, AlertFailedRate)
	if len(alerts) != 1 || alerts[0].Threshold != 0.1 || alerts[0].Value != 2.0/11 ||
		!strings.Contains(alerts[0].Message, "18.2% of the jobs finished in the last hour failed (2 discarded of 11)") {
		t.Errorf("failed-rate alerts: %+v", alerts)
	}
	var completed, discarded int64
	for _, b := range ov2.Throughput {
		completed += b.Completed
		discarded += b.Discarded
	}
	if completed != 9 || discarded != 2 {
		t.Errorf("throughput sums to %d completed and %d discarded, want 9 and 2", completed, discarded)
	}

	// A job running for longer than LongRunning.
	opsExec(t, f, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '9 minutes' WHERE id = $1`, ids[11])
	if alerts, _ := opsAlerts(t, f, AlertLongRunning); len(alerts) != 0 {
		t.Errorf("long-running alerts at 9 minutes: %+v", alerts)
	}
	opsExec(t, f, `UPDATE river_job SET attempted_at = now() - interval '75 minutes' WHERE id = $1`, ids[11])
	alerts, _ = opsAlerts(t, f, AlertLongRunning)
	if len(alerts) != 1 || alerts[0].Threshold != 600 || alerts[0].Value < 75*60 ||
		!strings.Contains(alerts[0].Message, "ops_probe, queue \"default\") has been running for 1h15m") {
		t.Errorf("long-running alerts: %+v", alerts)
	}

	// A schedule whose slot passed without a fire.
	sc, err := scheduler.New(f.pool, &scheduler.Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"on-time", "late", "off"} {
		if _, err := sc.Create(ctx, &scheduler.ScheduleParams{Name: name, Expression: "@every 1m", TargetType: scheduler.TargetJob, Target: "ops_probe", Disabled: name == "off"}); err != nil {
			t.Fatal(err)
		}
	}
	opsExec(t, f, `UPDATE braid_schedules SET next_run_at = now() - interval '30 seconds' WHERE name = 'on-time'`)
	opsExec(t, f, `UPDATE braid_schedules SET next_run_at = now() - interval '10 minutes' WHERE name IN ('late', 'off')`)
	opsExec(t, f, `UPDATE braid_schedules SET last_error = 'inserting job: boom', last_error_at = now(), fire_failures = 3 WHERE name = 'late'`)
	alerts, ov3 := opsAlerts(t, f, AlertMissedSchedule)
	if len(alerts) != 1 || alerts[0].Subject != "late" || alerts[0].Value < 600 || alerts[0].Threshold != 60 ||
		!strings.Contains(alerts[0].Message, `schedule "late" missed its slot`) || !strings.Contains(alerts[0].Message, "its fire failed 3 times; last error: inserting job: boom") {
		t.Errorf("missed-schedule alerts: %+v", alerts)
	}
	if diff := cmp.Diff(OverviewSchedules{Total: 3, Enabled: 2, Failing: 1}, ov3.Schedules); diff != "" {
		t.Errorf("schedules (-want +got):\n%s", diff)
	}
	if len(ov3.Alerts) != 3 {
		t.Errorf("alerts: %+v, want one each of failed rate, long running and missed schedule", ov3.Alerts)
	}
}

// TestOverviewReadsBraidsClock moves braid_now() an hour ahead of the
// database's clock, as a test kit does: a schedule whose slot has passed
// on braid's clock is missed, though not on the database's.
func TestOverviewReadsBraidsClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	sc, err := scheduler.New(f.pool, &scheduler.Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Create(ctx, &scheduler.ScheduleParams{Name: "hourly", Expression: "@every 1m", TargetType: scheduler.TargetJob, Target: "ops_probe"}); err != nil {
		t.Fatal(err)
	}
	var ahead time.Time
	if err := f.pool.QueryRow(ctx, `SELECT now() + interval '1 hour'`).Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	opsExec(t, f, fmt.Sprintf(`CREATE OR REPLACE FUNCTION braid_now() RETURNS timestamptz
		LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT timestamptz '%s' $$`, ahead.UTC().Format("2006-01-02 15:04:05.999999+00")))
	alerts, ov := opsAlerts(t, f, AlertMissedSchedule)
	if len(alerts) != 1 || alerts[0].Subject != "hourly" || alerts[0].Value < 58*60 {
		t.Errorf("missed-schedule alerts on braid's clock: %+v", alerts)
	}
	if !ov.Now.Equal(ahead.Truncate(time.Microsecond)) {
		t.Errorf("overview's now is %v, want braid's clock %v", ov.Now, ahead)
	}
	if last := ov.Throughput[len(ov.Throughput)-1].Minute; !last.Equal(ahead.Truncate(time.Minute)) {
		t.Errorf("the last minute of the hour is %v, want braid's %v", last, ahead.Truncate(time.Minute))
	}
}
