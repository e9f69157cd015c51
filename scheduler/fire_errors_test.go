package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
)

// failInsertsOnce makes the next insert of a River job of kind fail, once,
// with a deadlock (SQLSTATE 40P01), as a concurrent writer could cause. A
// sequence counts the inserts because it survives the rollback of the
// failed one.
func failInsertsOnce(t *testing.T, s *Scheduler, kind string) {
	t.Helper()
	exec(t, s.pool, `CREATE SEQUENCE test_insert_failures`)
	exec(t, s.pool, `
CREATE FUNCTION test_fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind = '`+kind+`' AND nextval('test_insert_failures') = 1 THEN
        RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01';
    END IF;
    RETURN NEW;
END $$`)
	exec(t, s.pool, `CREATE TRIGGER test_fail_once BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION test_fail_once()`)
}

// TestFailedFireRetriesTheSameSlot injects one failed insert. The slot is
// not dropped: its error is recorded, the slot stays due (held back by the
// backoff, so the leader does not spin), and it fires on the next tick
// after the backoff with its own slot time; the error is then cleared.
// Under CatchUpSkip too, whose retry comes after the slot's grace: the slot
// was reached in time, and its retry is not a missed slot.
func TestFailedFireRetriesTheSameSlot(t *testing.T) {
	t.Parallel()
	for _, catchUp := range []CatchUpPolicy{CatchUpAll, CatchUpOnce, CatchUpSkip} {
		t.Run(string(catchUp), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testdb.DB(t)
			const backoff = 2 * time.Second
			s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool),
				FireRetryBackoff: queue.Backoff{Strategy: queue.Fixed, Base: backoff},
				MissedSlotGrace:  backoff})
			if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "nightly", Expression: "@every 1h", Target: "ping",
				CatchUpPolicy: catchUp}); err != nil {
				t.Fatal(err)
			}
			slot := setDue(t, s, "nightly", "date_trunc('second', now()) - interval '1 second'")
			failInsertsOnce(t, s, "ping")

			tick(t, s)
			if jobs := firedJobs(t, pool, "nightly"); len(jobs) != 0 {
				t.Fatalf("jobs after the failed insert: %+v", jobs)
			}
			sch, err := s.Get(ctx, "nightly")
			if err != nil {
				t.Fatal(err)
			}
			if !sch.NextRunAt.Equal(slot) || !strings.Contains(sch.LastError, "injected deadlock") || sch.LastErrorAt == nil ||
				sch.FireFailures != 1 || sch.RetryAt == nil || sch.RetryAt.Sub(*sch.LastErrorAt) != backoff {
				t.Fatalf("after the failed insert: next %s (want %s), error %q at %v, failures %d, retry at %v",
					sch.NextRunAt, slot, sch.LastError, sch.LastErrorAt, sch.FireFailures, sch.RetryAt)
			}

			// Held back: a tick within the backoff does not try again.
			tick(t, s)
			if n := queryValue[int64](t, pool, `SELECT last_value FROM test_insert_failures`); n != 1 {
				t.Fatalf("%d inserts tried within the backoff, want 1", n)
			}

			waitFor(t, 10*time.Second, "the backoff to pass", func() bool {
				return queryValue[bool](t, pool, `SELECT retry_at <= now() FROM braid_schedules WHERE name = 'nightly'`)
			})
			tick(t, s)
			jobs := firedJobs(t, pool, "nightly")
			if len(jobs) != 1 || jobs[0].Slot != slotString(slot) {
				t.Fatalf("jobs after the retry: %+v; want one for slot %s", jobs, slotString(slot))
			}
			sch, _ = s.Get(ctx, "nightly")
			if sch.LastError != "" || sch.LastErrorAt != nil || sch.FireFailures != 0 || sch.RetryAt != nil ||
				!sch.NextRunAt.Equal(slot.Add(time.Hour)) || sch.LastJobID == nil || *sch.LastJobID != jobs[0].ID {
				t.Errorf("after the retry: %+v", sch)
			}
		})
	}
}

// TestMovedScheduleForgetsItsFailedFire: once an update or a toggle moves
// a schedule off the slot whose fire failed, its count of failures is back
// to zero, so that a later slot reached late is a missed slot under
// CatchUpSkip, and skipped, as for any schedule.
func TestMovedScheduleForgetsItsFailedFire(t *testing.T) {
	t.Parallel()
	for name, move := range map[string]func(ctx context.Context, s *Scheduler) (*Schedule, error){
		"update": func(ctx context.Context, s *Scheduler) (*Schedule, error) {
			expr := "@every 2h"
			return s.Update(ctx, "hourly", &ScheduleUpdate{Expression: &expr})
		},
		"toggle": func(ctx context.Context, s *Scheduler) (*Schedule, error) {
			if _, err := s.Toggle(ctx, "hourly", false); err != nil {
				return nil, err
			}
			return s.Toggle(ctx, "hourly", true)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testdb.DB(t)
			s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), MissedSlotGrace: time.Minute})
			if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "hourly", Expression: "@every 1h", Target: "ping",
				CatchUpPolicy: CatchUpSkip}); err != nil {
				t.Fatal(err)
			}
			setDue(t, s, "hourly", "date_trunc('second', now()) - interval '1 second'")
			failInsertsOnce(t, s, "ping")
			tick(t, s)
			if sch, _ := s.Get(ctx, "hourly"); sch == nil || sch.FireFailures != 1 {
				t.Fatalf("after the failed fire: %+v; want one failure", sch)
			}
			sch, err := move(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if sch.FireFailures != 0 {
				t.Fatalf("moved to %s, it still counts %d failed fires of the slot it left", sch.NextRunAt, sch.FireFailures)
			}
			// Its slots, reached late (the last by half an hour), are
			// missed slots.
			setDue(t, s, "hourly", "date_trunc('second', now()) - interval '150 minutes'")
			tick(t, s)
			if jobs := firedJobs(t, pool, "hourly"); len(jobs) != 0 {
				t.Fatalf("a slot half an hour late fired under CatchUpSkip: %+v", jobs)
			}
		})
	}
}

// TestFailedFireCatchUpAllLosesNoSlot fails the first of three missed slots
// under CatchUpAll; every slot still fires once, in order.
func TestFailedFireCatchUpAllLosesNoSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool),
		FireRetryBackoff: queue.Backoff{Strategy: queue.Fixed, Base: time.Millisecond}})
	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "every", Expression: "@every 1h", Target: "ping",
		OverlapPolicy: OverlapAllow, CatchUpPolicy: CatchUpAll}); err != nil {
		t.Fatal(err)
	}
	first := setDue(t, s, "every", "date_trunc('second', now()) - interval '2 hours 1 second'")
	failInsertsOnce(t, s, "ping")
	waitFor(t, 10*time.Second, "three slots", func() bool {
		tick(t, s)
		return len(firedJobs(t, pool, "every")) == 3
	})
	var got []string
	for _, j := range firedJobs(t, pool, "every") {
		got = append(got, j.Slot)
	}
	want := []string{slotString(first), slotString(first.Add(time.Hour)), slotString(first.Add(2 * time.Hour))}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("slots fired %v, want %v", got, want)
	}
}

// registry is a WorkflowStarter that knows some workflows.
type registry struct {
	fakeEngine
	names []string
}

func (r *registry) KnowsWorkflow(name string) bool {
	for _, n := range r.names {
		if n == name {
			return true
		}
	}
	return false
}

func TestUnknownTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{fn: func(context.Context, *river.Job[pingArgs]) error { return nil }})
	q, err := queue.New(pool, &queue.Config{Logger: quietLogger(), Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, pool, &Config{Queue: q, Workflows: &registry{names: []string{"send_digest"}}})

	for _, tc := range []struct {
		params ScheduleParams
		want   string
	}{
		{ScheduleParams{Name: "nightly", Expression: "@daily", TargetType: TargetWorkflow, Target: "send_digestt"},
			`scheduler: schedule "nightly": workflow "send_digestt" is not registered`},
		{ScheduleParams{TargetType: TargetJob, Name: "pinger", Expression: "@daily", Target: "pingg"},
			`scheduler: schedule "pinger": job kind "pingg" has no worker in the scheduler's queue`},
	} {
		_, err := s.Create(ctx, &tc.params)
		var ute *UnknownTargetError
		if !errors.Is(err, ErrUnknownTarget) || !errors.As(err, &ute) || err.Error() != tc.want {
			t.Errorf("Create(%s %q): %v; want %q matching ErrUnknownTarget", tc.params.TargetType, tc.params.Target, err, tc.want)
		} else if ute.Schedule != tc.params.Name || ute.Target != tc.params.Target {
			t.Errorf("UnknownTargetError %+v", ute)
		}
	}
	if n := queryValue[int](t, pool, `SELECT count(*) FROM braid_schedules`); n != 0 {
		t.Fatalf("%d schedules written for unknown targets", n)
	}

	// Known targets pass.
	if _, err := s.Create(ctx, &ScheduleParams{Name: "nightly", Expression: "@daily", TargetType: TargetWorkflow, Target: "send_digest"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "pinger", Expression: "@daily", Target: "ping"}); err != nil {
		t.Fatal(err)
	}

	// Update checks a changed target, and an invalid target type.
	wf, job, bogus := TargetWorkflow, TargetJob, TargetType("cron")
	ghost, pingg := "ghost", "pingg"
	for _, tc := range []struct {
		name   string
		update ScheduleUpdate
		want   string
	}{
		{"nightly", ScheduleUpdate{Target: &ghost}, `workflow "ghost" is not registered`},
		{"nightly", ScheduleUpdate{TargetType: &job, Target: &pingg}, `job kind "pingg" has no worker`},
		{"pinger", ScheduleUpdate{TargetType: &wf}, `workflow "ping" is not registered`},
		{"pinger", ScheduleUpdate{TargetType: &bogus}, `target type "cron" is invalid`},
	} {
		_, err := s.Update(ctx, tc.name, &tc.update)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `schedule "`+tc.name+`"`) {
			t.Errorf("Update(%s): %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := s.Create(ctx, &ScheduleParams{Name: "typed", Expression: "@daily", TargetType: "cron", Target: "ping"}); err == nil ||
		!strings.Contains(err.Error(), `target type "cron" is invalid`) {
		t.Errorf("Create with an invalid target type: %v", err)
	}
	// An unchanged target is not checked again: the schedule can be edited
	// even if its workflow went away.
	desc := "edited"
	if _, err := newScheduler(t, pool, &Config{Workflows: &registry{}}).Update(ctx, "nightly", &ScheduleUpdate{Description: &desc}); err != nil {
		t.Errorf("Update of the description: %v", err)
	}

	// Without a way to know (an insert-only queue, a starter that is no
	// registry, or none at all) any target is accepted.
	blind := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Workflows: &fakeEngine{}})
	if _, err := blind.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "anything", Expression: "@daily", Target: "pingg"}); err != nil {
		t.Errorf("insert-only queue refused a kind: %v", err)
	}
	if _, err := blind.Create(ctx, &ScheduleParams{Name: "anywf", Expression: "@daily", TargetType: TargetWorkflow, Target: "ghost"}); err != nil {
		t.Errorf("starter without a registry refused a workflow: %v", err)
	}
}

func TestKnowsKind(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{fn: func(context.Context, *river.Job[pingArgs]) error { return nil }})
	q, err := queue.New(pool, &queue.Config{Logger: quietLogger(), Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	if !q.KnowsKind("ping") || q.KnowsKind("pingg") || q.KnowsKind("") {
		t.Errorf("KnowsKind: ping %t, pingg %t, empty %t; want true, false, false", q.KnowsKind("ping"), q.KnowsKind("pingg"), q.KnowsKind(""))
	}
	if io := insertOnlyQueue(t, pool); !io.KnowsKind("anything") {
		t.Error("an insert-only queue refused a kind")
	}
	if n := queryValue[int](t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Errorf("KnowsKind inserted %d jobs", n)
	}
}

func TestArgsCaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	const limit = 100
	s := newScheduler(t, pool, &Config{MaxArgsBytes: limit})
	big := map[string]string{"pad": strings.Repeat("x", limit)}
	size := len(mustJSON(t, big))

	_, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "big", Expression: "@daily", Target: "ping", Args: big})
	var tooLarge *ArgsTooLargeError
	want := `scheduler: schedule "big": args are 110 bytes of JSON; the limit is 100 bytes (Config.MaxArgsBytes)`
	if !errors.Is(err, ErrArgsTooLarge) || !errors.As(err, &tooLarge) || err.Error() != want || tooLarge.Size != size || tooLarge.Limit != limit {
		t.Errorf("Create with big args: %v; want %q", err, want)
	}
	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "small", Expression: "@daily", Target: "ping", Args: json.RawMessage(`{"n": 1}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "small", &ScheduleUpdate{Args: big}); !errors.Is(err, ErrArgsTooLarge) || !strings.Contains(err.Error(), `schedule "small"`) {
		t.Errorf("Update with big args: %v", err)
	}
	_, err = s.Ensure(ctx, "fetch_feed", "feed:1", big, time.Time{})
	want = `scheduler: recurring job fetch_feed/feed:1: args are 110 bytes of JSON; the limit is 100 bytes (Config.MaxArgsBytes)`
	if !errors.Is(err, ErrArgsTooLarge) || err == nil || err.Error() != want {
		t.Errorf("Ensure with big args: %v; want %q", err, want)
	}
	if n := queryValue[int](t, pool, `SELECT count(*) FROM braid_recurring`); n != 0 {
		t.Errorf("%d recurring rows written with big args", n)
	}

	// The default is MaxArgsBytesDefault; a negative limit is refused.
	if d := newScheduler(t, pool, nil); d.cfg.MaxArgsBytes != MaxArgsBytesDefault || d.cfg.FireRetryBackoff != FireRetryBackoffDefault {
		t.Errorf("defaults: MaxArgsBytes %d, FireRetryBackoff %+v", d.cfg.MaxArgsBytes, d.cfg.FireRetryBackoff)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxArgsBytes: -1}, "Config.MaxArgsBytes is -1"},
		{Config{FireRetryBackoff: queue.Backoff{Base: -time.Second}}, "Config.FireRetryBackoff: queue: Backoff.Base is -1s"},
	} {
		if _, err := New(pool, &tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v; want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestRecurringErrorTextSanitized stores the error of a handler whose text
// PostgreSQL would refuse (a NUL byte, invalid UTF-8) and that is over the
// default cap.
func TestRecurringErrorTextSanitized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newRecurringHarness(t, nil)
	text := "bad\x00bytes\xff" + strings.Repeat("e", queue.MaxErrorBytesDefault)
	h.handle(func(context.Context, *river.Job[pingArgs]) error { return errors.New(text) })
	if _, err := h.s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	r := h.run("k")
	if want := queue.SanitizeErrorText(text, 0); r.LastError != want || r.ConsecutiveFailures != 1 {
		t.Errorf("stored error of %d bytes (failures %d), want the sanitized %d bytes", len(r.LastError), r.ConsecutiveFailures, len(want))
	}
}

// TestFailedFireOfADeposedLeaderIsNotRecorded: a fire whose transaction
// broke is recorded in a transaction of its own, fenced on the lease: a
// leader whose lease another process took meanwhile records nothing, and
// so does not hold back the slot with its backoff.
func TestFailedFireOfADeposedLeaderIsNotRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	old, err := leases.New(pool, &leases.Config{Holder: "old", TTL: time.Minute, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Leases: old})
	sch, err := s.Create(ctx, &ScheduleParams{Name: "fenced", Expression: "@every 1h", TargetType: TargetJob, Target: "k"})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := old.TryAcquire(ctx, LeaseNameDefault)
	if err != nil {
		t.Fatal(err)
	}
	fireErr := errors.New("injected: the connection broke")
	record := func() error {
		return s.recordFireFailureFenced(ctx, lease, sch, sch.NextRunAt, fireErr, time.Hour)
	}

	// The lease expires and another process takes it.
	exec(t, pool, `UPDATE braid_leases SET expires_at = now() - interval '1 second' WHERE name = $1`, LeaseNameDefault)
	other, err := leases.New(pool, &leases.Config{Holder: "other", TTL: time.Minute, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, LeaseNameDefault); err != nil {
		t.Fatal(err)
	}
	if err := record(); !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Fatalf("recording the failed fire of a deposed leader: %v, want ErrLeaseNotHeld", err)
	}
	if got, _ := s.Get(ctx, "fenced"); got.LastError != "" || got.FireFailures != 0 || got.RetryAt != nil {
		t.Fatalf("a deposed leader recorded its failed fire: error %q, %d failures, retry at %v", got.LastError, got.FireFailures, got.RetryAt)
	}

	// The leader that holds the lease records it.
	lease, err = other.Holder(ctx, LeaseNameDefault)
	if err != nil {
		t.Fatal(err)
	}
	if err := record(); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "fenced"); got.LastError != fireErr.Error() || got.FireFailures != 1 || got.RetryAt == nil {
		t.Errorf("the leader's failed fire: error %q, %d failures, retry at %v", got.LastError, got.FireFailures, got.RetryAt)
	}
}

// TestCatchUpSkipAfterAFailedFireAndAnOutage fails a CatchUpSkip schedule's
// fire once, then moves the database clock on as if no leader had run for
// a while. The slot being retried is late from its RetryAt, and a later
// slot that the outage made late is a missed slot: neither fires once it
// is later than MissedSlotGrace. A retry that an Update let go at once
// fires, however late its slot.
func TestCatchUpSkipAfterAFailedFireAndAnOutage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, expression, outage string
		update, fires            bool
	}{
		{"a later slot made late", "@every 1h", "3 hours 10 minutes", false, false},
		{"the failed slot made late", "@every 24h", "3 hours", false, false},
		{"within the grace", "@every 1h", "30 seconds", false, true},
		{"an update ended the backoff", "@every 24h", "3 hours", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testdb.DB(t)
			s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool),
				FireRetryBackoff: queue.Backoff{Strategy: queue.Fixed, Base: time.Second},
				MissedSlotGrace:  time.Minute})
			if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "s", Expression: c.expression, Target: "ping",
				OverlapPolicy: OverlapAllow, CatchUpPolicy: CatchUpSkip}); err != nil {
				t.Fatal(err)
			}
			setDue(t, s, "s", "date_trunc('second', now()) - interval '1 second'")
			failInsertsOnce(t, s, "ping")
			tick(t, s)
			if sch, _ := s.Get(ctx, "s"); sch == nil || sch.FireFailures != 1 || sch.RetryAt == nil {
				t.Fatalf("after the failed fire: %+v; want one failure, held back", sch)
			}
			if c.update {
				desc := "ended the backoff"
				if _, err := s.Update(ctx, "s", &ScheduleUpdate{Description: &desc}); err != nil {
					t.Fatal(err)
				}
			}
			exec(t, pool, `CREATE OR REPLACE FUNCTION braid_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT now() + interval '`+c.outage+`' $$`)
			tick(t, s)
			jobs := firedJobs(t, pool, "s")
			if fired := len(jobs) > 0; fired != c.fires {
				t.Errorf("after %s without a leader: fired %+v; want a fire: %v", c.outage, jobs, c.fires)
			}
		})
	}
}

// TestScheduleTheLeaderCannotReadIsRetried: a schedule whose expression
// this leader cannot read (a zone unknown to it, written around this
// package or by another version) is a failed fire, held back and tried
// again, never disabled; once readable, its slot fires.
func TestScheduleTheLeaderCannotReadIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool),
		FireRetryBackoff: queue.Backoff{Strategy: queue.Fixed, Base: time.Minute}})
	exec(t, pool, `INSERT INTO braid_schedules (name, expression, time_zone, target_type, target, next_run_at)
		VALUES ('mars', '0 3 * * *', 'Mars/Olympus_Mons', 'job', 'ping', date_trunc('second', now()) - interval '1 second')`)
	tick(t, s)
	sch, err := s.Get(ctx, "mars")
	if err != nil {
		t.Fatal(err)
	}
	if !sch.Enabled || sch.FireFailures != 1 || sch.RetryAt == nil || sch.RetryAt.Sub(*sch.LastErrorAt) != time.Minute ||
		!strings.Contains(sch.LastError, `unknown time zone "Mars/Olympus_Mons"`) {
		t.Fatalf("after a tick: enabled %v, failures %d, retry at %v, error %q; want it enabled, held back a minute, saying why",
			sch.Enabled, sch.FireFailures, sch.RetryAt, sch.LastError)
	}
	tick(t, s)
	if sch, _ := s.Get(ctx, "mars"); sch.FireFailures != 1 {
		t.Fatalf("a tick within the backoff tried it again: %d failures", sch.FireFailures)
	}
	// Readable now, and its backoff over.
	exec(t, pool, `UPDATE braid_schedules SET time_zone = 'Europe/Berlin', retry_at = now() WHERE name = 'mars'`)
	tick(t, s)
	if jobs := firedJobs(t, pool, "mars"); len(jobs) != 1 {
		t.Fatalf("jobs once readable: %+v; want the slot fired", jobs)
	}
}

// TestUntilNextWithTheNextRunCenturiesAway: a recurring job parked
// centuries ahead (NextRunAt in the year 2400), beyond what a Duration
// holds, makes the leader sleep PollInterval, not poll every few
// milliseconds.
func TestUntilNextWithTheNextRunCenturiesAway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{PollInterval: time.Second})
	if _, err := s.Ensure(ctx, "ping", "far", pingArgs{}, time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if d := s.untilNext(ctx); d != time.Second {
		t.Fatalf("untilNext with the only next run in 2400: %s; want PollInterval, %s", d, time.Second)
	}
}

// TestRefusedScheduleMatchesErrInvalidSchedule: every refusal by Create
// and Update of the schedule they were given matches ErrInvalidSchedule,
// args over the cap and an unknown target among them, so that a caller
// can answer each as the requester's mistake; a refusal of a recurring
// job's args does not, as it refuses no schedule.
func TestRefusedScheduleMatchesErrInvalidSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{MaxArgsBytes: 100, Workflows: &registry{names: []string{"send_digest"}}})
	big := map[string]string{"pad": strings.Repeat("x", 100)}
	ghost := "ghost"

	if _, err := s.Create(ctx, &ScheduleParams{Name: "digest", Expression: "@daily", TargetType: TargetWorkflow, Target: "send_digest"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		err  func() error
	}{
		{"Create with args over the cap", func() error {
			_, err := s.Create(ctx, &ScheduleParams{Name: "big", Expression: "@daily", TargetType: TargetWorkflow, Target: "send_digest", Args: big})
			return err
		}},
		{"Update with args over the cap", func() error {
			_, err := s.Update(ctx, "digest", &ScheduleUpdate{Args: big})
			return err
		}},
		{"Create of an unknown target", func() error {
			_, err := s.Create(ctx, &ScheduleParams{Name: "lost", Expression: "@daily", TargetType: TargetWorkflow, Target: ghost})
			return err
		}},
		{"Update to an unknown target", func() error {
			_, err := s.Update(ctx, "digest", &ScheduleUpdate{Target: &ghost})
			return err
		}},
	} {
		if err := tc.err(); err == nil || !errors.Is(err, ErrInvalidSchedule) {
			t.Errorf("%s: %v; want an error matching ErrInvalidSchedule", tc.what, err)
		}
	}
	if _, err := s.Ensure(ctx, "fetch_feed", "feed:1", big, time.Time{}); !errors.Is(err, ErrArgsTooLarge) || errors.Is(err, ErrInvalidSchedule) {
		t.Errorf("Ensure with args over the cap: %v; want ErrArgsTooLarge, not ErrInvalidSchedule", err)
	}
}
