package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/queue"
)

type feedArgs struct {
	FeedID string `json:"feed_id"`
}

func (feedArgs) Kind() string                 { return "fetch_feed" }
func (feedArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: "feeds", Priority: 3} }

func TestEnsure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, nil)

	first := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	next, err := s.Ensure(ctx, "", "42", feedArgs{FeedID: "42"}, first)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if !next.Equal(first) {
		t.Errorf("Ensure returned %s, want the first run %s", next, first)
	}
	// Again, with other args and another first time: one row, the kept
	// next_run_at, the new args.
	next, err = s.Ensure(ctx, "fetch_feed", "42", json.RawMessage(`{"feed_id": "42", "v": 2}`), first.Add(time.Hour))
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if !next.Equal(first) {
		t.Errorf("second Ensure returned %s, want the kept %s", next, first)
	}
	if n := queryValue[int](t, pool, "SELECT count(*) FROM braid_recurring"); n != 1 {
		t.Errorf("%d rows after Ensure twice, want 1", n)
	}
	r, err := s.GetRecurring(ctx, "fetch_feed", "42")
	if err != nil {
		t.Fatalf("GetRecurring: %v", err)
	}
	want := &Recurring{ID: r.ID, Kind: "fetch_feed", Key: "42", Args: json.RawMessage(`{"v": 2, "feed_id": "42"}`), Queue: QueueDefault,
		Priority: PriorityDefault, Enabled: true, NextRunAt: first, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("row (-want +got):\n%s", diff)
	}

	// JobArgs give the kind and their InsertOpts the queue and priority.
	if _, err := s.Ensure(ctx, "", "43", feedArgs{FeedID: "43"}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	r, _ = s.GetRecurring(ctx, "fetch_feed", "43")
	if r.Queue != "feeds" || r.Priority != 3 || r.NextRunAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("row from JobArgs: %+v; want queue feeds, priority 3, due now", r)
	}

	// Disable, then Ensure again: enabled, next_run_at kept.
	if r, err := s.Disable(ctx, "fetch_feed", "42"); err != nil || r.Enabled || !r.NextRunAt.Equal(first) {
		t.Fatalf("Disable: %v, %+v", err, r)
	}
	if next, err := s.Ensure(ctx, "fetch_feed", "42", nil, time.Time{}); err != nil || !next.Equal(first) {
		t.Fatalf("Ensure after Disable: %s, %v", next, err)
	}
	if r, _ := s.GetRecurring(ctx, "fetch_feed", "42"); !r.Enabled {
		t.Error("Ensure did not enable the row again")
	}

	// EnsureTx writes nothing when the transaction rolls back.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureTx(ctx, tx, "fetch_feed", "ghost", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if _, err := s.GetRecurring(ctx, "fetch_feed", "ghost"); !errors.Is(err, ErrRecurringNotFound) {
		t.Errorf("GetRecurring after rollback: %v, want ErrRecurringNotFound", err)
	}

	bad := []struct {
		kind, key string
		args      any
		want      string
	}{
		{"", "k", nil, `recurring job kind is empty; it must be 1 to 127 characters (River's limit for a job kind)`},
		{strings.Repeat("k", 128), "k", nil, `recurring job kind is 128 characters; the limit is 127 (River's limit for a job kind)`},
		{"k", "", nil, `recurring job k key is empty; it must be 1 to 500 characters`},
		{"k", strings.Repeat("é", 501), nil, `recurring job k key is 501 characters; the limit is 500`},
		{"k", "\xff", nil, `recurring job k key "\xff" is not valid UTF-8`},
		{"other", "k", feedArgs{}, `recurring job kind "other" does not match the kind "fetch_feed" of its args`},
		{"k", "k", []int{1}, "args must be a JSON object, got [1]"},
		{"k", "k", make(chan int), "args cannot be encoded as JSON"},
	}
	for _, b := range bad {
		if _, err := s.Ensure(ctx, b.kind, b.key, b.args, time.Time{}); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Ensure(%q, %q, %v) error = %v, want %q", b.kind, b.key, b.args, err, b.want)
		}
	}
	for name, err := range map[string]error{
		"SetEnabled": func() error { _, err := s.SetEnabled(ctx, "fetch_feed", "nope", true); return err }(),
		"Revive":     func() error { _, err := s.Revive(ctx, "fetch_feed", "nope"); return err }(),
		"Delete":     s.DeleteRecurring(ctx, "fetch_feed", "nope"),
	} {
		if !errors.Is(err, ErrRecurringNotFound) {
			t.Errorf("%s of a missing job: %v, want ErrRecurringNotFound", name, err)
		}
	}

	list, err := s.ListRecurring(ctx, &RecurringListParams{Kind: "fetch_feed"})
	if err != nil || len(list) != 2 || list[0].Key != "42" || list[1].Key != "43" {
		t.Errorf("ListRecurring: %v, %d rows", err, len(list))
	}
	if err := s.DeleteRecurring(ctx, "fetch_feed", "43"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListRecurring(ctx, nil); len(list) != 1 {
		t.Errorf("%d rows after DeleteRecurring, want 1", len(list))
	}
}

// riverJobs counts the River jobs of recurring rows.
func riverJobs(t *testing.T, pool *pgxpool.Pool, key string) int {
	t.Helper()
	return queryValue[int](t, pool, `SELECT count(*) FROM river_job WHERE metadata->>'braid_recurring_key' = $1`, key)
}

func TestRecurringEnableDisable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})

	// A due row that is disabled is not claimed; enabled again it runs at
	// once, since its time has passed.
	if _, err := s.Ensure(ctx, "ping", "past", nil, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Disable(ctx, "ping", "past"); err != nil {
		t.Fatal(err)
	}
	tick(t, s)
	if n := riverJobs(t, pool, "past"); n != 0 {
		t.Fatalf("disabled row claimed: %d jobs", n)
	}
	if r, _ := s.GetRecurring(ctx, "ping", "past"); r.RunningSince != nil {
		t.Errorf("disabled row marked running")
	}
	if _, err := s.Enable(ctx, "ping", "past"); err != nil {
		t.Fatal(err)
	}
	tick(t, s)
	if n := riverJobs(t, pool, "past"); n != 1 {
		t.Fatalf("enabled row: %d jobs, want 1", n)
	}
	r, _ := s.GetRecurring(ctx, "ping", "past")
	jobID := queryValue[int64](t, pool, `SELECT id FROM river_job WHERE metadata->>'braid_recurring_key' = 'past'`)
	if r.RunningSince == nil || r.JobID == nil || *r.JobID != jobID {
		t.Errorf("claimed row: running since %v, job %v; want running, job %d", r.RunningSince, r.JobID, jobID)
	}
	if a := queryValue[int](t, pool, `SELECT max_attempts FROM river_job WHERE id = $1`, jobID); a != 1 {
		t.Errorf("recurring River job has max_attempts %d, want 1", a)
	}

	// A row disabled with its time ahead keeps it and, enabled again, runs
	// at that time and not before.
	kept := queryValue[time.Time](t, pool, "SELECT now() + interval '1500 milliseconds'")
	if _, err := s.Ensure(ctx, "ping", "future", nil, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Disable(ctx, "ping", "future"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Enable(ctx, "ping", "future")
	if err != nil || !r.NextRunAt.Equal(kept) {
		t.Fatalf("Enable: %v; next_run_at %v, want the kept %s", err, r.NextRunAt, kept)
	}
	tick(t, s)
	if n := riverJobs(t, pool, "future"); n != 0 {
		t.Fatalf("claimed before its kept time")
	}
	waitFor(t, 10*time.Second, "the kept time", func() bool {
		tick(t, s)
		return riverJobs(t, pool, "future") == 1
	})
	if created := queryValue[time.Time](t, pool, `SELECT created_at FROM river_job WHERE metadata->>'braid_recurring_key' = 'future'`); created.Before(kept) {
		t.Errorf("job inserted at %s, before the kept time %s", created, kept)
	}
}

func TestSyncEnabledTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, nil)
	exec(t, pool, `CREATE TABLE subscriptions (user_id int, feed_id text)`)
	exec(t, pool, `INSERT INTO subscriptions VALUES (1, 'f1'), (2, 'f1')`)
	if _, err := s.Ensure(ctx, "fetch_feed", "f1", feedArgs{FeedID: "f1"}, time.Time{}); err != nil {
		t.Fatal(err)
	}

	wanted := func(ctx context.Context, tx pgx.Tx) (bool, error) {
		var exists bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM subscriptions WHERE feed_id = 'f1')`).Scan(&exists)
		return exists, err
	}
	unsubscribe := func(user int) *Recurring {
		t.Helper()
		var r *Recurring
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `DELETE FROM subscriptions WHERE user_id = $1`, user); err != nil {
				return err
			}
			var err error
			r, err = s.SyncEnabledTx(ctx, tx, "fetch_feed", "f1", wanted)
			return err
		})
		if err != nil {
			t.Fatalf("unsubscribe: %v", err)
		}
		return r
	}
	if r := unsubscribe(1); !r.Enabled {
		t.Error("disabled while a subscriber is left")
	}
	if r := unsubscribe(2); r.Enabled {
		t.Error("still enabled after the last subscriber left")
	}

	failing := func(context.Context, pgx.Tx) (bool, error) { return false, errors.New("nope") }
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.SyncEnabledTx(ctx, tx, "fetch_feed", "f1", failing)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("SyncEnabledTx with a failing function: %v", err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.SyncEnabledTx(ctx, tx, "fetch_feed", "missing", wanted)
		return err
	})
	if !errors.Is(err, ErrRecurringNotFound) {
		t.Errorf("SyncEnabledTx of a missing row: %v", err)
	}
}

func TestStaleRunReclaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), RecurringStaleAfter: time.Minute})
	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	tick(t, s)
	// The first run's handler starts, and returns only once the row has
	// been reclaimed.
	oldRow := jobRow(t, pool, queryValue[int64](t, pool, `SELECT min(id) FROM river_job`))
	started, release, late := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		late <- mw.Work(ctx, oldRow, func(context.Context) error {
			close(started)
			<-release
			return errors.New("late failure")
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run's handler did not start")
	}
	tick(t, s)
	if n := riverJobs(t, pool, "k"); n != 1 {
		t.Fatalf("%d jobs, want 1 (a running row is not claimed again)", n)
	}
	exec(t, pool, `UPDATE braid_recurring SET running_since = now() - interval '50 seconds'`)
	tick(t, s)
	if n := riverJobs(t, pool, "k"); n != 1 {
		t.Fatalf("reclaimed before the stale threshold: %d jobs", n)
	}
	exec(t, pool, `UPDATE braid_recurring SET running_since = now() - interval '61 seconds'`)
	tick(t, s)
	if n := riverJobs(t, pool, "k"); n != 1 {
		t.Fatalf("reclaimed while its job is still waiting: %d jobs", n)
	}
	// The job completed, but its outcome was never recorded (the process
	// died after the handler): past the threshold the row is reclaimed and,
	// the handler having succeeded, runs again at once, with no failure.
	exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now()`)
	tick(t, s)
	if n := riverJobs(t, pool, "k"); n != 2 {
		t.Fatalf("%d jobs, want 2 once the job completed unrecorded after the stale threshold", n)
	}
	r, _ := s.GetRecurring(ctx, "ping", "k")
	newest := queryValue[int64](t, pool, `SELECT max(id) FROM river_job`)
	if r.JobID == nil || *r.JobID != newest || r.RunningSince == nil || r.ConsecutiveFailures != 0 {
		t.Fatalf("reclaimed row: job %v since %v, %d failures; want job %d, running, none", r.JobID, r.RunningSince, r.ConsecutiveFailures, newest)
	}

	// The outcome of the old, reclaimed run is ignored.
	close(release)
	if err := <-late; err == nil || !strings.Contains(err.Error(), "late failure") {
		t.Errorf("Work returned %v, want the handler's late failure", err)
	}
	after, _ := s.GetRecurring(ctx, "ping", "k")
	if diff := cmp.Diff(r, after); diff != "" {
		t.Errorf("late outcome of a reclaimed run changed the row (-before +after):\n%s", diff)
	}

	// A job deleted from river_job is gone: the row is reclaimed once
	// stale, and not before, and the lost run counts as a failure that
	// backs off.
	exec(t, pool, `DELETE FROM river_job WHERE id = $1`, newest)
	tick(t, s)
	if r, _ := s.GetRecurring(ctx, "ping", "k"); r.RunningSince == nil || r.ConsecutiveFailures != 0 {
		t.Fatalf("after deleting the live job: running since %v, %d failures; want still running, not stale yet", r.RunningSince, r.ConsecutiveFailures)
	}
	exec(t, pool, `UPDATE braid_recurring SET running_since = now() - interval '61 seconds'`)
	tick(t, s)
	r, _ = s.GetRecurring(ctx, "ping", "k")
	checkLostRun(t, r, 1, "deleted")
	if n := riverJobs(t, pool, "k"); n != 1 {
		t.Fatalf("%d jobs, want 1: the reclaimed row backs off", n)
	}
}

// checkLostRun checks a recurring row just reclaimed after a lost run: not
// running, failures consecutive failures, an error naming the lost run and
// the state of its River job, and its next run a backoff away.
func checkLostRun(t *testing.T, r *Recurring, failures int, jobState string) {
	t.Helper()
	if r.RunningSince != nil || r.ConsecutiveFailures != failures {
		t.Errorf("reclaimed row: running since %v with %d failures; want not running, %d failures", r.RunningSince, r.ConsecutiveFailures, failures)
	}
	if !strings.Contains(r.LastError, "ended without recording an outcome") || !strings.Contains(r.LastError, "River job: "+jobState) {
		t.Errorf("reclaimed row's error = %q; want it to name the lost run and its job's state %q", r.LastError, jobState)
	}
	if wait := time.Until(r.NextRunAt); wait < 30*time.Second {
		t.Errorf("reclaimed row runs again in %s; want a backoff of about a minute", wait)
	}
	if r.DeadAt != nil {
		t.Errorf("reclaimed row parked at %v after %d failures", r.DeadAt, failures)
	}
}

// TestLostRunsParkTheRecurringJob: a recurring job whose runs end with no
// outcome recorded, as when its handler kills its process, is parked as a
// dead letter after the middleware's MaxFailures, as failed runs are,
// rather than be reclaimed and run for ever.
func TestLostRunsParkTheRecurringJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{MaxFailures: 2, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), RecurringStaleAfter: time.Minute, Recurring: mw})
	if _, err := s.Ensure(ctx, "ping", "crash", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for lost := 1; lost <= 2; lost++ {
		tick(t, s)
		if n := riverJobs(t, pool, "crash"); n != lost {
			t.Fatalf("before lost run %d: %d jobs, want %d", lost, n, lost)
		}
		// The process dies in the handler: the rescuer discards the
		// River job (one attempt), and nothing records the outcome.
		exec(t, pool, `UPDATE river_job SET state = 'discarded', finalized_at = now(),
    errors = array_append(errors, '{"attempt": 1, "error": "heartbeat lost"}'::jsonb) WHERE state <> 'discarded'`)
		exec(t, pool, `UPDATE braid_recurring SET running_since = now() - interval '61 seconds'`)
		tick(t, s)
		r, _ := s.GetRecurring(ctx, "ping", "crash")
		if r.ConsecutiveFailures != lost || !strings.Contains(r.LastError, "River job: discarded: heartbeat lost") {
			t.Fatalf("after lost run %d: %d failures, error %q", lost, r.ConsecutiveFailures, r.LastError)
		}
		if lost < 2 {
			if r.DeadAt != nil {
				t.Fatalf("parked after %d lost runs, want after 2", lost)
			}
			exec(t, pool, `UPDATE braid_recurring SET next_run_at = now()`)
		} else if r.DeadAt == nil {
			t.Fatal("not parked after 2 lost runs")
		}
	}
	exec(t, pool, `UPDATE braid_recurring SET next_run_at = now()`)
	tick(t, s)
	if n := riverJobs(t, pool, "crash"); n != 2 {
		t.Errorf("%d jobs, want 2: a parked row does not run", n)
	}
}

// TestRecurringAtMostOneLiveJobUnderBacklog keeps the queue's only worker
// busy, so a recurring job waits behind it for ten times its stale
// threshold. The row is never claimed again while its job waits; once the
// job runs, the row runs again.
func TestRecurringAtMostOneLiveJobUnderBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce atomic.Bool
	t.Cleanup(func() {
		if releaseOnce.CompareAndSwap(false, true) {
			close(release)
		}
	})
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{fn: func(ctx context.Context, job *river.Job[pingArgs]) error {
		if job.Args.N < 0 { // the blocker
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		return NextRunAt(ctx, time.Now())
	}})
	q, err := queue.New(pool, &queue.Config{
		Logger:              quietLogger(),
		Workers:             workers,
		Queues:              map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Middleware:          []rivertype.Middleware{mw},
		FetchCooldown:       5 * time.Millisecond,
		FetchPollInterval:   50 * time.Millisecond,
		MaintenanceDisabled: true,
		JobTimeout:          -1,
		River:               &river.Config{TestOnly: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if releaseOnce.CompareAndSwap(false, true) {
			close(release)
		}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.Stop(sctx)
	})
	const stale = time.Second
	s := newScheduler(t, pool, &Config{Queue: q, RecurringStaleAfter: stale})

	if _, err := q.River().Insert(ctx, pingArgs{N: -1}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the blocker to run", func() bool {
		return queryValue[int](t, pool, `SELECT count(*) FROM river_job WHERE state = 'running'`) == 1
	})
	if _, err := s.Ensure(ctx, "ping", "k", pingArgs{N: 1}, time.Time{}); err != nil {
		t.Fatal(err)
	}

	live := func() (live, total int) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded')), count(*)
FROM river_job WHERE metadata->>'braid_recurring_key' = 'k'`).Scan(&live, &total)
		if err != nil {
			t.Fatal(err)
		}
		return live, total
	}
	// Tick for three thresholds of real time, then make the wait ten
	// thresholds long and tick again; the row stays due all along.
	ticks := 0
	check := func() {
		t.Helper()
		exec(t, pool, `UPDATE braid_recurring SET next_run_at = least(next_run_at, now())`)
		tick(t, s)
		ticks++
		if l, n := live(); l != 1 || n != 1 {
			t.Fatalf("after %d ticks: %d live and %d total jobs of the row, want 1 and 1", ticks, l, n)
		}
	}
	for deadline := time.Now().Add(3 * stale); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		check()
	}
	exec(t, pool, `UPDATE braid_recurring SET running_since = now() - $1::bigint * interval '1 microsecond'`, (10 * stale).Microseconds())
	for range 20 {
		check()
	}
	if got := queryValue[string](t, pool, `SELECT state::text FROM river_job WHERE metadata->>'braid_recurring_key' = 'k'`); got != "available" {
		t.Fatalf("the row's job is %s, want it still waiting behind the blocker", got)
	}

	// The backlog clears: the job runs, its outcome is recorded, and the
	// row runs again.
	releaseOnce.Store(true)
	close(release)
	waitFor(t, 10*time.Second, "the row's run to be recorded", func() bool {
		r, err := s.GetRecurring(ctx, "ping", "k")
		return err == nil && r.RunningSince == nil && r.LastRunAt != nil
	})
	tick(t, s)
	if _, n := live(); n != 2 {
		t.Fatalf("%d jobs of the row after its run, want 2", n)
	}
	waitFor(t, 10*time.Second, "the second run", func() bool {
		l, _ := live()
		return l == 0
	})
}

// jobRow reads what the middleware needs of a River job.
func jobRow(t *testing.T, pool *pgxpool.Pool, id int64) *rivertype.JobRow {
	t.Helper()
	row := &rivertype.JobRow{ID: id}
	if err := pool.QueryRow(context.Background(), `SELECT kind, metadata FROM river_job WHERE id = $1`, id).Scan(&row.Kind, &row.Metadata); err != nil {
		t.Fatal(err)
	}
	return row
}

// recurringHarness runs recurring jobs of kind "ping" through a working
// River client with the middleware; the test drives claims with tick.
type recurringHarness struct {
	t       *testing.T
	pool    *pgxpool.Pool
	s       *Scheduler
	q       *queue.Queue
	handler atomic.Pointer[func(ctx context.Context, job *river.Job[pingArgs]) error]
}

func newRecurringHarness(t *testing.T, cfg *RecurringConfig) *recurringHarness {
	t.Helper()
	h := &recurringHarness{t: t, pool: testdb.DB(t)}
	c := RecurringConfig{Logger: quietLogger()}
	if cfg != nil {
		c = *cfg
		c.Logger = quietLogger()
	}
	mw, err := NewRecurringMiddleware(h.pool, &c)
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, *river.Job[pingArgs]) error { return nil }
	h.handler.Store(&ok)
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{fn: func(ctx context.Context, job *river.Job[pingArgs]) error {
		return (*h.handler.Load())(ctx, job)
	}})
	h.q = workingQueue(t, h.pool, workers, mw)
	h.s = newScheduler(t, h.pool, &Config{Queue: h.q})
	return h
}

func (h *recurringHarness) handle(fn func(ctx context.Context, job *river.Job[pingArgs]) error) {
	h.handler.Store(&fn)
}

// run makes the row due, claims it and waits until its run is recorded.
func (h *recurringHarness) run(key string) *Recurring {
	h.t.Helper()
	exec(h.t, h.pool, `UPDATE braid_recurring SET next_run_at = now() WHERE kind = 'ping' AND key = $1`, key)
	before := riverJobs(h.t, h.pool, key)
	tick(h.t, h.s)
	if riverJobs(h.t, h.pool, key) != before+1 {
		h.t.Fatalf("row %s was not claimed", key)
	}
	var r *Recurring
	waitFor(h.t, 10*time.Second, "the run of "+key, func() bool {
		var err error
		r, err = h.s.GetRecurring(context.Background(), "ping", key)
		return err == nil && r.RunningSince == nil
	})
	return r
}

func TestRecurringFailuresBackOff(t *testing.T) {
	t.Parallel()
	h := newRecurringHarness(t, &RecurringConfig{
		Backoff:   queue.Backoff{Strategy: queue.Linear, Base: time.Hour},
		Intervals: map[string]time.Duration{"ping": 30 * time.Minute},
	})
	if _, err := h.s.Ensure(context.Background(), "ping", "k", pingArgs{N: 1}, time.Time{}); err != nil {
		t.Fatal(err)
	}

	var calls atomic.Int32
	h.handle(func(context.Context, *river.Job[pingArgs]) error {
		return errors.New("boom " + string(rune('0'+calls.Add(1))))
	})
	for n := 1; n <= 2; n++ {
		r := h.run("k")
		if r.ConsecutiveFailures != n || r.LastError != "boom "+string(rune('0'+n)) || r.DeadAt != nil {
			t.Fatalf("after failure %d: failures %d, error %q, dead %v", n, r.ConsecutiveFailures, r.LastError, r.DeadAt)
		}
		if got := r.NextRunAt.Sub(*r.LastRunAt); got != time.Duration(n)*time.Hour {
			t.Errorf("backoff after failure %d = %s, want %dh", n, got, n)
		}
	}

	h.handle(func(context.Context, *river.Job[pingArgs]) error { return nil })
	r := h.run("k")
	if r.ConsecutiveFailures != 0 || r.LastError != "" {
		t.Errorf("after a success: failures %d, error %q; want both reset", r.ConsecutiveFailures, r.LastError)
	}
	if got := r.NextRunAt.Sub(*r.LastRunAt); got != 30*time.Minute {
		t.Errorf("next run after a success = %s after the run, want the kind's 30m", got)
	}
}

func TestRecurringParkedAndRevived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, &RecurringConfig{MaxFailures: 3, Backoff: queue.Backoff{Strategy: queue.Fixed, Base: time.Hour}})
	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	h.handle(func(context.Context, *river.Job[pingArgs]) error { panic("handler panicked") })
	for n := 1; n <= 3; n++ {
		r := h.run("k")
		if parked := r.DeadAt != nil; parked != (n == 3) {
			t.Fatalf("after failure %d: dead_at %v", n, r.DeadAt)
		}
		if !strings.Contains(r.LastError, "panic: handler panicked") {
			t.Errorf("last error %q does not report the panic", r.LastError)
		}
	}
	if dead, _ := h.s.ListRecurring(ctx, &RecurringListParams{Dead: ptr(true)}); len(dead) != 1 {
		t.Errorf("ListRecurring(dead) = %d rows, want 1", len(dead))
	}

	// A dead letter is not claimed, even when due.
	exec(t, h.pool, `UPDATE braid_recurring SET next_run_at = now() - interval '1 second'`)
	tick(t, h.s)
	if n := riverJobs(t, h.pool, "k"); n != 3 {
		t.Fatalf("dead letter claimed: %d jobs", n)
	}
	// Ensure does not revive it, and says so: the row is ensured (its
	// args stored), but its next run does not come; Revive revives it.
	next, err := h.s.Ensure(ctx, "ping", "k", pingArgs{N: 9}, time.Time{})
	var parked *RecurringParkedError
	if !errors.Is(err, ErrRecurringParked) || !errors.As(err, &parked) || parked.Kind != "ping" || parked.Key != "k" ||
		parked.ConsecutiveFailures != 3 || !strings.Contains(parked.LastError, "handler panicked") || !strings.Contains(err.Error(), "Revive") {
		t.Fatalf("Ensure of a dead letter: %v; want a *RecurringParkedError naming ping/k, its 3 failures and Revive", err)
	}
	r, _ := h.s.GetRecurring(ctx, "ping", "k")
	if r.DeadAt == nil || !parked.DeadAt.Equal(*r.DeadAt) || !next.Equal(r.NextRunAt) || string(r.Args) != `{"n": 9}` {
		t.Errorf("after Ensure of a dead letter: %+v (returned %s, parked at %s); want still parked, args stored", r, next, parked.DeadAt)
	}
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.s.EnsureTx(ctx, tx, "ping", "k", nil, time.Time{})
		if !errors.Is(err, ErrRecurringParked) {
			t.Errorf("EnsureTx of a dead letter: %v, want ErrRecurringParked", err)
		}
		_, err = tx.Exec(ctx, `SELECT 1`)
		return err
	})
	if err != nil {
		t.Errorf("the transaction after EnsureTx of a dead letter: %v", err)
	}
	r, err = h.s.Revive(ctx, "ping", "k")
	if err != nil || r.DeadAt != nil || r.ConsecutiveFailures != 0 {
		t.Fatalf("Revive: %v, %+v", err, r)
	}
	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Errorf("Ensure of a revived row: %v", err)
	}
	h.handle(func(context.Context, *river.Job[pingArgs]) error { return nil })
	tick(t, h.s)
	if n := riverJobs(t, h.pool, "k"); n != 4 {
		t.Fatalf("revived row not claimed: %d jobs", n)
	}
}

func ptr[T any](v T) *T { return &v }

func TestRecurringHandlerChoosesNextRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, nil)
	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	chosen := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	h.handle(func(ctx context.Context, job *river.Job[pingArgs]) error {
		return NextRunAt(ctx, chosen)
	})
	if r := h.run("k"); !r.NextRunAt.Equal(chosen) {
		t.Errorf("next_run_at = %s, want the handler's %s", r.NextRunAt, chosen)
	}

	// Without a choice: the default interval.
	h.handle(func(context.Context, *river.Job[pingArgs]) error { return nil })
	if r := h.run("k"); r.NextRunAt.Sub(*r.LastRunAt) != RecurringIntervalDefault {
		t.Errorf("next run %s after the run, want %s", r.NextRunAt.Sub(*r.LastRunAt), RecurringIntervalDefault)
	}

	// Snoozing runs again after the snooze, and completes the River job.
	h.handle(func(context.Context, *river.Job[pingArgs]) error { return river.JobSnooze(2 * time.Hour) })
	r := h.run("k")
	if r.NextRunAt.Sub(*r.LastRunAt) != 2*time.Hour || r.ConsecutiveFailures != 0 {
		t.Errorf("after a snooze: next in %s, failures %d; want 2h, 0", r.NextRunAt.Sub(*r.LastRunAt), r.ConsecutiveFailures)
	}
	waitFor(t, 5*time.Second, "the snoozed job to complete", func() bool {
		return queryValue[string](t, h.pool, `SELECT state::text FROM river_job WHERE id = $1`, *r.JobID) == "completed"
	})

	if err := NextRunAt(ctx, chosen); !errors.Is(err, ErrNotRecurring) {
		t.Errorf("NextRunAt outside a run: %v, want ErrNotRecurring", err)
	}
}

func TestRecurringDisabledDuringRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, nil)
	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	h.handle(func(context.Context, *river.Job[pingArgs]) error {
		close(started)
		<-release
		return nil
	})
	tick(t, h.s)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not start")
	}
	if r, err := h.s.Disable(ctx, "ping", "k"); err != nil || r.Enabled || r.RunningSince == nil {
		t.Fatalf("Disable during the run: %v, %+v", err, r)
	}
	close(release)
	var r *Recurring
	waitFor(t, 10*time.Second, "the run to finish", func() bool {
		r, _ = h.s.GetRecurring(ctx, "ping", "k")
		return r.RunningSince == nil
	})
	if r.Enabled || r.LastRunAt == nil || r.ConsecutiveFailures != 0 || r.NextRunAt.Sub(*r.LastRunAt) != RecurringIntervalDefault {
		t.Errorf("after the run: %+v; want disabled, finished normally", r)
	}
	waitFor(t, 5*time.Second, "the River job to complete", func() bool {
		return queryValue[string](t, h.pool, `SELECT state::text FROM river_job WHERE id = $1`, *r.JobID) == "completed"
	})
	exec(t, h.pool, `UPDATE braid_recurring SET next_run_at = now() - interval '1 second'`)
	tick(t, h.s)
	if n := riverJobs(t, h.pool, "k"); n != 1 {
		t.Errorf("disabled row claimed again: %d jobs", n)
	}
}

func TestRecurringInsertFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, nil)
	// The River client has no worker for "unknown", so its job cannot be
	// inserted; the row is released with the error and the others run.
	for _, key := range []string{"a", "b"} {
		if _, err := h.s.Ensure(ctx, "ping", key, nil, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.s.Ensure(ctx, "unknown", "x", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	tick(t, h.s)
	if n := queryValue[int](t, h.pool, `SELECT count(*) FROM river_job`); n != 2 {
		t.Errorf("%d jobs inserted, want 2", n)
	}
	r, _ := h.s.GetRecurring(ctx, "unknown", "x")
	if r.RunningSince != nil || !strings.Contains(r.LastError, "inserting the River job failed") || !r.NextRunAt.After(time.Now().Add(30*time.Second)) {
		t.Errorf("row with an uninsertable job: %+v", r)
	}
}

func TestRecurringMiddlewarePassesOtherJobs(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	mw, err := NewRecurringMiddleware(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, meta := range []string{`{}`, `{"braid_recurring_id": "x"}`, `not json`} {
		called := false
		err := mw.Work(context.Background(), &rivertype.JobRow{ID: 1, Kind: "k", Metadata: []byte(meta)}, func(ctx context.Context) error {
			called = true
			if err := NextRunAt(ctx, time.Now()); !errors.Is(err, ErrNotRecurring) {
				t.Errorf("NextRunAt in a plain job: %v", err)
			}
			return errors.New("plain failure")
		})
		if !called || err == nil || err.Error() != "plain failure" {
			t.Errorf("metadata %s: called %v, error %v", meta, called, err)
		}
	}

	bad := []struct {
		cfg  RecurringConfig
		want string
	}{
		{RecurringConfig{Interval: -1}, "RecurringConfig.Interval is -1ns"},
		{RecurringConfig{Intervals: map[string]time.Duration{"k": 0}}, `RecurringConfig.Intervals["k"] is 0s`},
		{RecurringConfig{Backoff: queue.Backoff{Base: -time.Second}}, "RecurringConfig.Backoff: queue: Backoff.Base is -1s"},
	}
	for _, b := range bad {
		if _, err := NewRecurringMiddleware(pool, &b.cfg); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("NewRecurringMiddleware(%+v): %v, want %q", b.cfg, err, b.want)
		}
	}
	if _, err := NewRecurringMiddleware(nil, nil); err == nil {
		t.Error("NewRecurringMiddleware(nil) succeeded")
	}
	if mw.cfg.Backoff != queue.DefaultBackoff || mw.cfg.MaxFailures != RecurringMaxFailuresDefault || mw.cfg.Interval != RecurringIntervalDefault {
		t.Errorf("defaults not applied: %+v", mw.cfg)
	}
}

// TestRecurringUnderLeader runs the whole loop: the started scheduler
// claims a row as soon as Ensure commits (woken by the notification) and
// again when the handler's chosen time comes.
func TestRecurringUnderLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, nil)
	runs := make(chan time.Time, 10)
	h.handle(func(ctx context.Context, job *river.Job[pingArgs]) error {
		runs <- time.Now()
		if len(runs) < 2 {
			return NextRunAt(ctx, time.Now().Add(300*time.Millisecond))
		}
		return NextRunAt(ctx, time.Now().Add(time.Hour))
	})
	if err := h.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.s.Stop(context.Background()) })
	// Let the leader settle on the lease before the row appears.
	waitFor(t, 10*time.Second, "a leader", func() bool {
		return queryValue[int](t, h.pool, `SELECT count(*) FROM braid_leases WHERE name = $1 AND expires_at > now()`, LeaseNameDefault) == 1
	})
	if _, err := h.s.Ensure(ctx, "ping", "k", pingArgs{N: 7}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case <-runs:
		case <-time.After(15 * time.Second):
			t.Fatalf("run %d did not happen", i+1)
		}
	}
	if err := h.s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := riverJobs(t, h.pool, "k"); n != 2 {
		t.Errorf("%d runs, want 2", n)
	}
}

// TestRecurringJobRetriedByHand: a recurring job's last River job retried
// by hand (from River's dead letters, say) runs as the row's run when the
// row is idle; an older job, or any job of a parked row, is cancelled
// with the reason and never runs the handler beside the row's own runs.
func TestRecurringJobRetriedByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})
	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var calls int
	handler := func(context.Context) error { calls++; return nil }
	work := func(jobID int64) error {
		t.Helper()
		return mw.Work(ctx, jobRow(t, pool, jobID), handler)
	}
	cancelled := func(err error, want string) {
		t.Helper()
		var jc *rivertype.JobCancelError
		if !errors.As(err, &jc) || !strings.Contains(err.Error(), want) {
			t.Errorf("Work = %v; want the job cancelled because %q", err, want)
		}
	}

	tick(t, s)
	first := queryValue[int64](t, pool, `SELECT max(id) FROM river_job`)
	if err := work(first); err != nil || calls != 1 {
		t.Fatalf("the row's own run: %v after %d calls", err, calls)
	}
	before, _ := s.GetRecurring(ctx, "ping", "k")

	// Retried by hand while the row is idle: it runs as the row's run.
	if err := work(first); err != nil || calls != 2 {
		t.Fatalf("the row's last job retried by hand: %v after %d calls, want it run", err, calls)
	}
	after, _ := s.GetRecurring(ctx, "ping", "k")
	if after.RunningSince != nil || !after.LastRunAt.After(*before.LastRunAt) {
		t.Errorf("after the retried job ran: running since %v, last run %v (before %v); want its outcome recorded",
			after.RunningSince, after.LastRunAt, before.LastRunAt)
	}

	// Once the row has run again, the older job is refused.
	exec(t, pool, `UPDATE braid_recurring SET next_run_at = now()`)
	tick(t, s)
	second := queryValue[int64](t, pool, `SELECT max(id) FROM river_job`)
	cancelled(work(first), fmt.Sprintf("has run since as job %d", second))
	if calls != 2 {
		t.Fatalf("an older job ran the handler beside the row's run (%d calls)", calls)
	}
	if err := work(second); err != nil || calls != 3 {
		t.Fatalf("the row's own run: %v after %d calls", err, calls)
	}

	// A parked row runs nothing until it is revived.
	exec(t, pool, `UPDATE braid_recurring SET dead_at = now()`)
	cancelled(work(second), "parked as a dead letter")
	if calls != 3 {
		t.Fatalf("a parked row's job ran the handler (%d calls)", calls)
	}
}

// TestSchedulerFindsTheRecurringMiddlewareInItsQueue: without
// Config.Recurring, a lost run counts under the policy of the
// RecurringMiddleware in the queue's middleware, not the defaults.
func TestSchedulerFindsTheRecurringMiddlewareInItsQueue(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{MaxFailures: -1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(pool, &queue.Config{Logger: quietLogger(), Middleware: []rivertype.Middleware{mw}})
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, pool, &Config{Queue: q})
	if s.failures.MaxFailures != -1 {
		t.Errorf("a lost run counts against MaxFailures %d, want the queue's middleware's -1 (never park)", s.failures.MaxFailures)
	}
	if s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)}); s.failures.MaxFailures != RecurringMaxFailuresDefault {
		t.Errorf("with no middleware: MaxFailures %d, want the default %d", s.failures.MaxFailures, RecurringMaxFailuresDefault)
	}
}

// TestRecurringGracefulStopIsNotAFailure: a run whose handler returns
// because the queue stops and cancels it (River puts its job back to
// available) is no failed run: the row stays claimed by that job, with no
// failure, no backoff and no dead letter, and the job runs as the row's
// run once the queue starts again.
func TestRecurringGracefulStopIsNotAFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, &RecurringConfig{MaxFailures: 1})
	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	h.handle(func(ctx context.Context, _ *river.Job[pingArgs]) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	tick(t, h.s)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := h.q.Stop(stopCtx); err != nil {
		t.Fatalf("stopping the queue: %v", err)
	}
	r, err := h.s.GetRecurring(ctx, "ping", "k")
	if err != nil {
		t.Fatal(err)
	}
	jobID := queryValue[int64](t, h.pool, `SELECT id FROM river_job WHERE metadata->>'braid_recurring_key' = 'k'`)
	state := queryValue[string](t, h.pool, `SELECT state::text FROM river_job WHERE id = $1`, jobID)
	if r.ConsecutiveFailures != 0 || r.DeadAt != nil || r.LastError != "" || r.RunningSince == nil || r.JobID == nil || *r.JobID != jobID || state != "available" {
		t.Fatalf("after a stop during the run: %d failures, dead at %v, error %q, running since %v, job %v (%s); "+
			"want no failure, still claimed by job %d, available",
			r.ConsecutiveFailures, r.DeadAt, r.LastError, r.RunningSince, r.JobID, state, jobID)
	}

	// Started again, the queue runs the same job as the row's run.
	h.handle(func(context.Context, *river.Job[pingArgs]) error { return nil })
	if err := h.q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the interrupted run to finish", func() bool {
		r, _ = h.s.GetRecurring(ctx, "ping", "k")
		return r.RunningSince == nil
	})
	if r.ConsecutiveFailures != 0 || r.LastRunAt == nil || r.NextRunAt.Sub(*r.LastRunAt) != RecurringIntervalDefault {
		t.Errorf("after the interrupted run ran: %+v; want a success", r)
	}
	waitFor(t, 10*time.Second, "the job to complete", func() bool {
		return queryValue[string](t, h.pool, `SELECT state::text FROM river_job WHERE id = $1`, jobID) == "completed"
	})
	if n := riverJobs(t, h.pool, "k"); n != 1 {
		t.Errorf("%d jobs of the row, want 1", n)
	}
}

// TestRecurringJobOfDeletedRowDoesNotRun: a job still queued when its row
// is deleted, and the same kind and key ensured again and claimed, is
// cancelled before its handler runs, so the entity never runs twice at
// once; nor does a job whose row cannot be read.
func TestRecurringJobOfDeletedRowDoesNotRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})
	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	tick(t, s)
	old := jobRow(t, pool, queryValue[int64](t, pool, `SELECT max(id) FROM river_job`))
	if err := s.DeleteRecurring(ctx, "ping", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	tick(t, s)
	if r, _ := s.GetRecurring(ctx, "ping", "k"); r.RunningSince == nil || r.JobID == nil || *r.JobID == old.ID {
		t.Fatalf("the new row is not running a job of its own: %+v", r)
	}
	called := false
	err = mw.Work(ctx, old, func(context.Context) error { called = true; return nil })
	var jc *rivertype.JobCancelError
	if called || !errors.As(err, &jc) || !strings.Contains(err.Error(), "was deleted") {
		t.Errorf("the deleted row's job: handler called %v, Work = %v; want it cancelled, naming the deleted row", called, err)
	}

	// A row that cannot be read runs nothing.
	closed, err := pgxpool.New(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	blind, err := NewRecurringMiddleware(closed, &RecurringConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	current := jobRow(t, pool, queryValue[int64](t, pool, `SELECT max(id) FROM river_job`))
	err = blind.Work(ctx, current, func(context.Context) error { called = true; return nil })
	if called || err == nil || !strings.Contains(err.Error(), "does not run") {
		t.Errorf("a job whose row cannot be read: handler called %v, Work = %v; want it refused", called, err)
	}
}

// TestRecurringLostRunOfDisabledRowReclaimed: a run lost while its row is
// disabled is reclaimed once stale like any other, without inserting a
// job: the row stops showing as running, a failed run counts (and backs
// off) then, and a run whose job completed counts as none, so that the
// row, enabled again, runs at once.
func TestRecurringLostRunOfDisabledRowReclaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), RecurringStaleAfter: time.Minute})
	for _, c := range []struct {
		key, state string
		failures   int
	}{{"lost", "discarded", 1}, {"done", "completed", 0}} {
		if _, err := s.Ensure(ctx, "ping", c.key, nil, time.Time{}); err != nil {
			t.Fatal(err)
		}
		tick(t, s)
		if _, err := s.Disable(ctx, "ping", c.key); err != nil {
			t.Fatal(err)
		}
		exec(t, pool, `UPDATE river_job SET state = $2, finalized_at = now() WHERE metadata->>'braid_recurring_key' = $1`, c.key, c.state)
		exec(t, pool, `UPDATE braid_recurring SET running_since = now() - interval '61 seconds' WHERE key = $1`, c.key)
		tick(t, s)
		r, _ := s.GetRecurring(ctx, "ping", c.key)
		if r.RunningSince != nil || r.ConsecutiveFailures != c.failures || r.Enabled {
			t.Errorf("%s: disabled row with a stale run whose job is %s: running since %v, %d failures, enabled %v; want released, %d failures, disabled",
				c.key, c.state, r.RunningSince, r.ConsecutiveFailures, r.Enabled, c.failures)
		}
		if c.failures > 0 {
			checkLostRun(t, r, c.failures, c.state)
		}
		if n := riverJobs(t, pool, c.key); n != 1 {
			t.Errorf("%s: %d jobs, want 1: a disabled row is never run", c.key, n)
		}
	}

	// Enabled again, the row whose run completed runs at once; the other
	// once its backoff has passed.
	for _, key := range []string{"lost", "done"} {
		if _, err := s.Ensure(ctx, "ping", key, nil, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	tick(t, s)
	if n := riverJobs(t, pool, "done"); n != 2 {
		t.Errorf("done: %d jobs after enabling it again, want 2", n)
	}
	exec(t, pool, `UPDATE braid_recurring SET next_run_at = now() WHERE key = 'lost'`)
	tick(t, s)
	if r, _ := s.GetRecurring(ctx, "ping", "lost"); riverJobs(t, pool, "lost") != 2 || r.ConsecutiveFailures != 1 || r.RunningSince == nil {
		t.Errorf("lost: %d jobs, %d failures, running since %v after its backoff; want 2 jobs, the failure counted once, running",
			riverJobs(t, pool, "lost"), r.ConsecutiveFailures, r.RunningSince)
	}
}

// TestRecurringRefusesTextPostgreSQLCannotStore: a NUL character in a kind,
// a key, a schedule's name or target, or args that PostgreSQL's jsonb
// refuses, are refused before they reach the database, with an error
// that names them (without the raw NUL byte), and the caller's transaction
// stays usable.
func TestRecurringRefusesTextPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, nil)
	check := func(what string, err error, want string) {
		t.Helper()
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			t.Errorf("%s: accepted", what)
		case errors.As(err, &pgErr):
			t.Errorf("%s: a PostgreSQL error reached the caller: %v", what, err)
		case !strings.Contains(err.Error(), want) || strings.ContainsRune(err.Error(), 0):
			t.Errorf("%s: error %q, want it to say %q, without a raw NUL", what, err, want)
		}
	}
	for _, c := range []struct {
		what, kind, key string
		args            any
		want            string
	}{
		{"NUL in the key", "ping", "a\x00b", nil, `key "a\x00b" holds a NUL character`},
		{"NUL in the kind", "pi\x00ng", "k", nil, `kind "pi\x00ng" holds a NUL character`},
		{"NUL in args", "ping", "k", map[string]string{"a": "x\x00y"}, `args cannot be stored: it holds a NUL character`},
		{"NUL in raw args", "ping", "k", json.RawMessage(`{"a": "\u0000"}`), `args cannot be stored: it holds a NUL character`},
		{"unpaired surrogate", "ping", "k", json.RawMessage(`{"a": "\udc00"}`), `unpaired surrogate \udc00`},
		{"number out of range", "ping", "k", json.RawMessage(`{"a": 1e200000}`), `digits before the decimal point`},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := s.EnsureTx(ctx, tx, c.kind, c.key, c.args, time.Time{})
			if _, txErr := tx.Exec(ctx, `SELECT 1`); txErr != nil {
				t.Errorf("%s: the caller's transaction is unusable after EnsureTx: %v", c.what, txErr)
			}
			return err
		})
		check(c.what, err, c.want)
	}
	if n := queryValue[int](t, pool, `SELECT count(*) FROM braid_recurring`); n != 0 {
		t.Errorf("%d rows stored by refused Ensures", n)
	}

	valid := func() ScheduleParams {
		return ScheduleParams{TargetType: TargetJob, Name: "n", Expression: "@daily", Target: "kind"}
	}
	for _, c := range []struct {
		what   string
		change func(p *ScheduleParams)
		want   string
	}{
		{"NUL in a schedule's name", func(p *ScheduleParams) { p.Name = "n\x00" }, `schedule name "n\x00" holds a NUL character`},
		{"NUL in a schedule's target", func(p *ScheduleParams) { p.Target = "k\x00" }, `target "k\x00" holds a NUL character, which PostgreSQL cannot store`},
		{"NUL in a schedule's args", func(p *ScheduleParams) { p.Args = map[string]string{"a": "\x00"} }, "args cannot be stored: it holds a NUL character"},
		{"NUL in a workflow's input", func(p *ScheduleParams) { p.TargetType, p.Args = TargetWorkflow, "\x00" }, "args cannot be stored: it holds a NUL character"},
	} {
		p := valid()
		c.change(&p)
		_, err := s.Create(ctx, &p)
		check(c.what, err, c.want)
	}
}

// TestRecurringNextRunInUsesTheDatabaseClock: NextRunIn sets the next run
// a delay after the database's time (braid_now()), however far the
// worker's clock is from it; here the database's clock runs two days
// ahead.
func TestRecurringNextRunInUsesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, nil)
	exec(t, h.pool, `CREATE OR REPLACE FUNCTION braid_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT now() + interval '48 hours' $$`)
	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	h.handle(func(ctx context.Context, _ *river.Job[pingArgs]) error {
		if err := NextRunIn(ctx, -time.Second); err == nil || !strings.Contains(err.Error(), "-1s") {
			t.Errorf("NextRunIn(-1s) = %v, want an error naming the delay", err)
		}
		// The last choice wins.
		if err := NextRunAt(ctx, time.Now().Add(time.Minute)); err != nil {
			return err
		}
		return NextRunIn(ctx, time.Hour)
	})
	tick(t, h.s)
	var r *Recurring
	waitFor(t, 10*time.Second, "the run", func() bool {
		r, _ = h.s.GetRecurring(ctx, "ping", "k")
		return r.RunningSince == nil && r.LastRunAt != nil
	})
	if got := r.NextRunAt.Sub(*r.LastRunAt); got != time.Hour || r.NextRunAt.Before(time.Now().Add(48*time.Hour)) {
		t.Errorf("next run at %s, %s after the run; want an hour after the database's time", r.NextRunAt, got)
	}
	if err := NextRunIn(ctx, time.Hour); !errors.Is(err, ErrNotRecurring) {
		t.Errorf("NextRunIn outside a run: %v, want ErrNotRecurring", err)
	}
}

// TestRecurringTimesOutsidePostgreSQLAreRefused: a next run time that
// PostgreSQL's timestamptz cannot hold is refused where it is given, with
// an error that names it and the range, rather than accepted and then
// lost: NextRunAt's choice failed the write of the run's outcome (the row
// stayed claimed, and ran again once reclaimed, for ever), and Ensure's
// first run time came back as another time.
func TestRecurringTimesOutsidePostgreSQLAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, nil)
	farBeyond := time.Date(600000, 1, 1, 0, 0, 0, 0, time.UTC)
	if next, err := h.s.Ensure(ctx, "ping", "far", nil, farBeyond); err == nil || !strings.Contains(err.Error(), "outside the times PostgreSQL stores") {
		t.Errorf("Ensure first due in the year 600000: next run %s, error %v; want an error naming the range", next, err)
	}
	if _, err := h.s.GetRecurring(ctx, "ping", "far"); !errors.Is(err, ErrRecurringNotFound) {
		t.Errorf("the refused Ensure stored its row: %v", err)
	}

	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var chosenErr atomic.Pointer[error]
	h.handle(func(ctx context.Context, job *river.Job[pingArgs]) error {
		err := NextRunAt(ctx, time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC))
		chosenErr.Store(&err)
		return nil
	})
	r := h.run("k")
	if err := *chosenErr.Load(); err == nil || !strings.Contains(err.Error(), "outside the times PostgreSQL stores") {
		t.Errorf("NextRunAt in the year 300000: %v; want an error naming the range", err)
	}
	if r.LastRunAt == nil || r.NextRunAt.Sub(*r.LastRunAt) != RecurringIntervalDefault {
		t.Errorf("after a refused NextRunAt: last run %v, next %s; want the run recorded, next after the default interval", r.LastRunAt, r.NextRunAt)
	}
}
