package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// Operations: leases, queues, and the overview with its alerts. Every time
// shown or compared is the database's.

// LeaseInfo is a lease: who holds it, its fencing generation, and when it
// expires unless renewed.
type LeaseInfo struct {
	Name       string    `json:"name"`
	Holder     string    `json:"holder"`
	Generation int64     `json:"generation"`
	AcquiredAt time.Time `json:"acquired_at"`
	RenewedAt  time.Time `json:"renewed_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Expired is true when ExpiresAt has passed on the database clock:
	// nobody holds the lease.
	Expired bool `json:"expired"`
	// ExpiresInSeconds is ExpiresAt minus the database's now; negative once
	// expired.
	ExpiresInSeconds float64 `json:"expires_in_seconds"`
}

// QueueInfo is a River queue: its depth by job state, and whether it is
// paused.
type QueueInfo struct {
	Name string `json:"name"`
	// Depth counts the jobs available to work now.
	Depth int64 `json:"depth"`
	// ByState counts the queue's jobs in each River state, zero included.
	ByState map[string]int64 `json:"by_state"`
	Total   int64            `json:"total"`
	// Paused is true while River's clients fetch no jobs from the queue.
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// Known is true when River has the queue in its river_queue table: a
	// client works it, or did lately (UpdatedAt). Only such a queue can be
	// paused or resumed.
	Known     bool       `json:"known"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// Alert is a condition of the classic job-queue monitoring alerts that passed its
// threshold (Config.Alerts).
type Alert struct {
	// Kind is queue_depth, failed_rate, long_running or missed_schedule.
	Kind string `json:"kind"`
	// Message says what is wrong, naming the queue, job or schedule.
	Message string `json:"message"`
	// Value is the measure that passed Threshold: jobs for queue_depth, a
	// fraction for failed_rate, seconds for long_running and
	// missed_schedule.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Subject names the queue, job ID or schedule the alert is about.
	Subject string `json:"subject,omitempty"`
}

// Alert kinds.
const (
	AlertQueueDepth     = "queue_depth"
	AlertFailedRate     = "failed_rate"
	AlertLongRunning    = "long_running"
	AlertMissedSchedule = "missed_schedule"
)

// overviewAlertsPerKind caps the alerts of one kind that name one subject
// each (queues, jobs, schedules); the last one of the kind then counts the
// rest.
const overviewAlertsPerKind = 10

// ThroughputBucket is one minute of the overview's last hour.
type ThroughputBucket struct {
	// Minute is the start of the minute.
	Minute time.Time `json:"minute"`
	// Completed and Discarded count the River jobs that finished so.
	Completed int64 `json:"completed"`
	Discarded int64 `json:"discarded"`
	// RunsCompleted and RunsFailed count the workflow runs that finished so.
	RunsCompleted int64 `json:"runs_completed"`
	RunsFailed    int64 `json:"runs_failed"`
}

// Overview is the dashboard's first page: counts, the last hour, lease
// holders and the alerts.
type Overview struct {
	// Now is braid's clock, braid_now(), when the overview was read.
	Now  time.Time    `json:"now"`
	Jobs OverviewJobs `json:"jobs"`
	Runs OverviewRuns `json:"runs"`
	// LastHour sums the 60 minutes before Now.
	LastHour OverviewHour `json:"last_hour"`
	// Throughput has 60 buckets, oldest first, the last one the current
	// (partial) minute.
	Throughput []ThroughputBucket `json:"throughput"`
	Queues     []QueueInfo        `json:"queues"`
	Leases     []LeaseInfo        `json:"leases"`
	Schedules  OverviewSchedules  `json:"schedules"`
	Recurring  OverviewRecurring  `json:"recurring"`
	Alerts     []Alert            `json:"alerts"`
	Thresholds AlertView          `json:"thresholds"`
}

// OverviewJobs counts River jobs by state, and by queue and state.
type OverviewJobs struct {
	Total   int64                       `json:"total"`
	ByState map[string]int64            `json:"by_state"`
	ByQueue map[string]map[string]int64 `json:"by_queue"`
}

// OverviewRuns counts workflow runs by status.
type OverviewRuns struct {
	Total    int64            `json:"total"`
	ByStatus map[string]int64 `json:"by_status"`
}

// OverviewHour sums the last hour: River jobs completed and discarded, the
// failed rate (discarded over finished, 0 with none finished), and runs
// completed and failed.
type OverviewHour struct {
	Completed     int64   `json:"completed"`
	Discarded     int64   `json:"discarded"`
	FailedRate    float64 `json:"failed_rate"`
	RunsCompleted int64   `json:"runs_completed"`
	RunsFailed    int64   `json:"runs_failed"`
}

// OverviewSchedules counts schedules: all, enabled, and failing (their last
// fire failed).
type OverviewSchedules struct {
	Total   int64 `json:"total"`
	Enabled int64 `json:"enabled"`
	Failing int64 `json:"failing"`
}

// OverviewRecurring counts recurring jobs: all, enabled, running, dead.
type OverviewRecurring struct {
	Total   int64 `json:"total"`
	Enabled int64 `json:"enabled"`
	Running int64 `json:"running"`
	Dead    int64 `json:"dead"`
}

func (s *Server) routeOperations() {
	s.add(&route{
		Method: "GET", Path: "/api/admin/leases", Tag: "leases",
		Summary:  "Leases: holder, fencing generation and expiry, expired or not on the database clock",
		Response: List[LeaseInfo]{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			ls, err := s.leaseInfos(r.Context())
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, newList(ls, Page{Limit: max(len(ls), 1), Offset: 0}))
			return nil
		},
	})
	s.add(&route{
		Method: "GET", Path: "/api/admin/queues", Tag: "queues",
		Summary:  "Queues: depth by job state, and whether River's clients are paused on each",
		Response: List[QueueInfo]{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			qs, err := s.queueInfos(r.Context(), nil)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, newList(qs, Page{Limit: max(len(qs), 1), Offset: 0}))
			return nil
		},
	})
	for _, action := range []string{"pause", "resume"} {
		summary := "Pause a queue through River: its clients fetch no more of its jobs; running jobs finish"
		if action == "resume" {
			summary = "Resume a paused queue through River: its clients fetch its jobs again"
		}
		s.add(&route{
			Method: "POST", Path: "/api/admin/queues/{name}/" + action, Tag: "queues", Mutates: true,
			Summary:  summary,
			Response: QueueInfo{},
			Handle: func(w http.ResponseWriter, r *http.Request) error {
				return s.pauseQueue(w, r, action)
			},
		})
	}
	s.add(&route{
		Method: "GET", Path: "/api/admin/overview", Tag: "overview",
		Summary:  "The overview: jobs by state and queue, runs by status, the last hour per minute, queues, lease holders, and alerts",
		Response: Overview{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			ov, err := s.overview(r.Context())
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, ov)
			return nil
		},
	})
}

// leaseInfos lists every lease, expired ones included.
func (s *Server) leaseInfos(ctx context.Context) ([]LeaseInfo, error) {
	ls, err := s.leases.List(ctx)
	if err != nil {
		return nil, err
	}
	var now time.Time // the leases' clock (DESIGN.md, invariant 8)
	if err := s.pool.QueryRow(ctx, `SELECT braid_now()`).Scan(&now); err != nil {
		return nil, fmt.Errorf("reading the database clock: %w", err)
	}
	out := make([]LeaseInfo, len(ls))
	for i, l := range ls {
		out[i] = LeaseInfo{
			Name: l.Name, Holder: l.Holder, Generation: l.Generation, AcquiredAt: l.AcquiredAt,
			RenewedAt: l.RenewedAt, ExpiresAt: l.ExpiresAt, Expired: l.Expired,
			ExpiresInSeconds: l.ExpiresAt.Sub(now).Seconds(),
		}
	}
	return out, nil
}

// queueInfos lists the queues that have jobs or that River knows, in name
// order. byQueue, when not nil, holds job counts read already.
func (s *Server) queueInfos(ctx context.Context, byQueue map[string]map[rivertype.JobState]int64) ([]QueueInfo, error) {
	if byQueue == nil {
		st, err := s.q.Stats(ctx)
		if err != nil {
			return nil, err
		}
		byQueue = st.ByQueue
	}
	res, err := s.q.River().QueueList(ctx, river.NewQueueListParams().First(10000))
	if err != nil {
		return nil, fmt.Errorf("listing River's queues: %w", err)
	}
	infos := map[string]*QueueInfo{}
	get := func(name string) *QueueInfo {
		qi, ok := infos[name]
		if !ok {
			qi = &QueueInfo{Name: name, ByState: map[string]int64{}}
			for _, st := range rivertype.JobStates() {
				qi.ByState[string(st)] = 0
			}
			infos[name] = qi
		}
		return qi
	}
	for name, states := range byQueue {
		qi := get(name)
		for st, n := range states {
			qi.ByState[string(st)] = n
			qi.Total += n
		}
		qi.Depth = states[rivertype.JobStateAvailable]
	}
	for _, rq := range res.Queues {
		qi := get(rq.Name)
		qi.Known, qi.Paused, qi.PausedAt = true, rq.PausedAt != nil, rq.PausedAt
		updated := rq.UpdatedAt
		qi.UpdatedAt = &updated
	}
	out := make([]QueueInfo, 0, len(infos))
	for _, qi := range infos {
		out = append(out, *qi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// pauseQueue pauses or resumes the queue of the path through River's
// client, which records it in river_queue and notifies the clients that
// work the queue.
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request, action string) error {
	name := r.PathValue("name")
	if name == "*" {
		return errorf(http.StatusBadRequest, "queue %q is River's every-queue name: %s the queues one by one", name, action)
	}
	if err := queue.ValidateQueueName(name); err != nil {
		return errorf(http.StatusBadRequest, "%s", err)
	}
	client := s.q.River()
	var err error
	if action == "pause" {
		err = client.QueuePause(r.Context(), name, nil)
	} else {
		err = client.QueueResume(r.Context(), name, nil)
	}
	if errors.Is(err, rivertype.ErrNotFound) {
		return errorf(http.StatusNotFound, "queue %q is unknown to River: no client has worked it lately, so there is nothing to %s; start a process that works it", name, action)
	}
	if err != nil {
		return fmt.Errorf("%s queue %q: %w", action, name, err)
	}
	s.audit(r, "queue."+action, name)
	qs, err := s.queueInfos(r.Context(), nil)
	if err != nil {
		return err
	}
	for _, qi := range qs {
		if qi.Name == name {
			writeJSON(w, http.StatusOK, qi)
			return nil
		}
	}
	return errorf(http.StatusNotFound, "queue %q vanished from River's queues after the %s", name, action)
}

// overview gathers the overview and computes its alerts.
func (s *Server) overview(ctx context.Context) (*Overview, error) {
	ov := &Overview{
		Alerts: []Alert{},
		Thresholds: AlertView{
			QueueDepth: s.cfg.Alerts.QueueDepth, FailedRate: s.cfg.Alerts.FailedRate,
			LongRunningSeconds: s.cfg.Alerts.LongRunning.Seconds(),
		},
	}
	if err := s.pool.QueryRow(ctx, `SELECT braid_now()`).Scan(&ov.Now); err != nil {
		return nil, fmt.Errorf("reading the database clock: %w", err)
	}

	st, err := s.q.Stats(ctx)
	if err != nil {
		return nil, err
	}
	ov.Jobs = OverviewJobs{Total: st.Total, ByState: map[string]int64{}, ByQueue: map[string]map[string]int64{}}
	for state, n := range st.ByState {
		ov.Jobs.ByState[string(state)] = n
	}
	for q, states := range st.ByQueue {
		m := map[string]int64{}
		for state, n := range states {
			m[string(state)] = n
		}
		ov.Jobs.ByQueue[q] = m
	}
	if ov.Queues, err = s.queueInfos(ctx, st.ByQueue); err != nil {
		return nil, err
	}

	if err := s.overviewRuns(ctx, ov); err != nil {
		return nil, err
	}
	if err := s.overviewHour(ctx, ov); err != nil {
		return nil, err
	}
	if ov.Leases, err = s.leaseInfos(ctx); err != nil {
		return nil, err
	}
	err = s.pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM braid_schedules),
       (SELECT count(*) FROM braid_schedules WHERE enabled),
       (SELECT count(*) FROM braid_schedules WHERE last_error IS NOT NULL),
       (SELECT count(*) FROM braid_recurring),
       (SELECT count(*) FROM braid_recurring WHERE enabled),
       (SELECT count(*) FROM braid_recurring WHERE running_since IS NOT NULL),
       (SELECT count(*) FROM braid_recurring WHERE dead_at IS NOT NULL)`).Scan(
		&ov.Schedules.Total, &ov.Schedules.Enabled, &ov.Schedules.Failing,
		&ov.Recurring.Total, &ov.Recurring.Enabled, &ov.Recurring.Running, &ov.Recurring.Dead)
	if err != nil {
		return nil, fmt.Errorf("counting schedules and recurring jobs: %w", err)
	}
	if err := s.overviewAlerts(ctx, ov); err != nil {
		return nil, err
	}
	return ov, nil
}

// overviewRuns counts runs by status, as the runs list shows them (a run
// whose root turn runs is running).
func (s *Server) overviewRuns(ctx context.Context, ov *Overview) error {
	st, err := workflow.CollectRunStats(ctx, s.pool, time.Hour)
	if err != nil {
		return fmt.Errorf("counting runs: %w", err)
	}
	ov.Runs.ByStatus = st.ByStatus
	for _, n := range st.ByStatus {
		ov.Runs.Total += n
	}
	return nil
}

// overviewHour reads the last hour: per-minute buckets of finished jobs
// and runs, and the sums over the 60 minutes before now.
func (s *Server) overviewHour(ctx context.Context, ov *Overview) error {
	// Runs finish on braid's clock, braid_now(), and River's jobs on the
	// database's; the two differ only under a test kit's moved clock, by
	// an offset that the jobs' times are moved by.
	rows, err := s.pool.Query(ctx, `
WITH clock AS (
    SELECT date_trunc('minute', braid_now()) AS minute, braid_now() - now() AS offset_
), minutes AS (
    SELECT generate_series(c.minute - interval '59 minutes', c.minute, interval '1 minute') AS minute FROM clock c
), jobs AS (
    SELECT date_trunc('minute', finalized_at + c.offset_) AS minute,
           count(*) FILTER (WHERE state = 'completed') AS completed,
           count(*) FILTER (WHERE state = 'discarded') AS discarded
    FROM river_job, clock c
    WHERE state IN ('completed', 'discarded') AND finalized_at + c.offset_ >= c.minute - interval '59 minutes'
    GROUP BY 1
), runs AS (
    SELECT date_trunc('minute', finished_at) AS minute,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM braid_runs, clock c
    WHERE status IN ('completed', 'failed') AND finished_at >= c.minute - interval '59 minutes'
    GROUP BY 1
)
SELECT m.minute, coalesce(j.completed, 0), coalesce(j.discarded, 0), coalesce(r.completed, 0), coalesce(r.failed, 0)
FROM minutes m LEFT JOIN jobs j USING (minute) LEFT JOIN runs r USING (minute)
ORDER BY m.minute`)
	if err != nil {
		return fmt.Errorf("reading the last hour: %w", err)
	}
	ov.Throughput, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ThroughputBucket, error) {
		var b ThroughputBucket
		err := row.Scan(&b.Minute, &b.Completed, &b.Discarded, &b.RunsCompleted, &b.RunsFailed)
		return b, err
	})
	if err != nil {
		return fmt.Errorf("reading the last hour: %w", err)
	}
	h := &ov.LastHour
	err = s.pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM river_job WHERE state = 'completed' AND finalized_at >= now() - interval '1 hour'),
       (SELECT count(*) FROM river_job WHERE state = 'discarded' AND finalized_at >= now() - interval '1 hour'),
       (SELECT count(*) FROM braid_runs WHERE status = 'completed' AND finished_at >= braid_now() - interval '1 hour'),
       (SELECT count(*) FROM braid_runs WHERE status = 'failed' AND finished_at >= braid_now() - interval '1 hour')`).Scan(
		&h.Completed, &h.Discarded, &h.RunsCompleted, &h.RunsFailed)
	if err != nil {
		return fmt.Errorf("summing the last hour: %w", err)
	}
	if finished := h.Completed + h.Discarded; finished > 0 {
		h.FailedRate = float64(h.Discarded) / float64(finished)
	}
	return nil
}

// overviewAlerts computes the alerts of the classic job-queue monitoring alerts with
// Config.Alerts: a queue deeper than QueueDepth, a failed rate over
// FailedRate in the last hour, a job running longer than LongRunning, and
// an enabled schedule whose slot passed without a fire.
func (s *Server) overviewAlerts(ctx context.Context, ov *Overview) error {
	th := s.cfg.Alerts
	var deep []QueueInfo
	for _, qi := range ov.Queues {
		if qi.Depth > int64(th.QueueDepth) {
			deep = append(deep, qi)
		}
	}
	sort.Slice(deep, func(i, j int) bool { return deep[i].Depth > deep[j].Depth })
	for i, qi := range deep {
		if i == overviewAlertsPerKind {
			ov.Alerts = append(ov.Alerts, Alert{Kind: AlertQueueDepth, Threshold: float64(th.QueueDepth),
				Message: fmt.Sprintf("%d more queues hold over %d available jobs", len(deep)-i, th.QueueDepth), Value: float64(len(deep) - i)})
			break
		}
		paused := ""
		if qi.Paused {
			paused = " (the queue is paused)"
		}
		ov.Alerts = append(ov.Alerts, Alert{
			Kind: AlertQueueDepth, Subject: qi.Name, Value: float64(qi.Depth), Threshold: float64(th.QueueDepth),
			Message: fmt.Sprintf("queue %q holds %d available jobs, over the limit of %d%s", qi.Name, qi.Depth, th.QueueDepth, paused),
		})
	}

	if h := ov.LastHour; h.FailedRate > th.FailedRate {
		ov.Alerts = append(ov.Alerts, Alert{
			Kind: AlertFailedRate, Value: h.FailedRate, Threshold: th.FailedRate,
			Message: fmt.Sprintf("%.1f%% of the jobs finished in the last hour failed (%d discarded of %d), over the limit of %.1f%%",
				100*h.FailedRate, h.Discarded, h.Completed+h.Discarded, 100*th.FailedRate),
		})
	}

	var long int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job
WHERE state = 'running' AND attempted_at < now() - $1::bigint * interval '1 microsecond'`, th.LongRunning.Microseconds()).Scan(&long); err != nil {
		return fmt.Errorf("finding long-running jobs: %w", err)
	}
	if long > 0 {
		rows, err := s.pool.Query(ctx, `SELECT id, kind, queue, extract(epoch FROM now() - attempted_at)::float8 FROM river_job
WHERE state = 'running' AND attempted_at < now() - $1::bigint * interval '1 microsecond'
ORDER BY attempted_at LIMIT $2`, th.LongRunning.Microseconds(), overviewAlertsPerKind)
		if err != nil {
			return fmt.Errorf("finding long-running jobs: %w", err)
		}
		var (
			id          int64
			kind, queue string
			secs        float64
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &kind, &queue, &secs}, func() error {
			ov.Alerts = append(ov.Alerts, Alert{
				Kind: AlertLongRunning, Subject: strconv.FormatInt(id, 10), Value: secs, Threshold: th.LongRunning.Seconds(),
				Message: fmt.Sprintf("job %d (%s, queue %q) has been running for %s, over the limit of %s",
					id, kind, queue, roundDuration(secs), th.LongRunning),
			})
			return nil
		})
		if err != nil {
			return fmt.Errorf("finding long-running jobs: %w", err)
		}
		if long > overviewAlertsPerKind {
			ov.Alerts = append(ov.Alerts, Alert{Kind: AlertLongRunning, Value: float64(long - overviewAlertsPerKind), Threshold: th.LongRunning.Seconds(),
				Message: fmt.Sprintf("%d more jobs have been running for over %s", long-overviewAlertsPerKind, th.LongRunning)})
		}
	}

	grace := scheduler.MissedSlotGraceDefault
	missed, total, err := s.schedulesMissed(ctx, grace, overviewAlertsPerKind)
	if err != nil {
		return err
	}
	for _, sch := range missed {
		late := ov.Now.Sub(sch.NextRunAt).Seconds()
		why := "no scheduler is firing it"
		if sch.LastError != "" {
			why = fmt.Sprintf("its fire failed %d times; last error: %s", sch.FireFailures, sch.LastError)
		}
		ov.Alerts = append(ov.Alerts, Alert{
			Kind: AlertMissedSchedule, Subject: sch.Name, Value: late, Threshold: grace.Seconds(),
			Message: fmt.Sprintf("schedule %q missed its slot at %s by %s: %s", sch.Name, sch.NextRunAt.UTC().Format(time.RFC3339), roundDuration(late), why),
		})
	}
	if rest := total - int64(len(missed)); rest > 0 {
		ov.Alerts = append(ov.Alerts, Alert{Kind: AlertMissedSchedule, Value: float64(rest), Threshold: grace.Seconds(),
			Message: fmt.Sprintf("%d more schedules missed their slots", rest)})
	}
	return nil
}

// roundDuration writes seconds as a duration rounded to the second.
func roundDuration(secs float64) time.Duration {
	return time.Duration(secs * float64(time.Second)).Round(time.Second)
}
