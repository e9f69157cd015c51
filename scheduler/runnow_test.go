package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/internal/testdb"
)

func TestRunNowJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})

	created, err := s.Create(ctx, &ScheduleParams{
		Name: "nightly", Expression: "@daily", TargetType: TargetJob, Target: "ping",
		Args: json.RawMessage(`{"n": 7}`), Queue: "reports", Priority: 2, Disabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}

	f, err := s.RunNow(ctx, "nightly")
	if err != nil {
		t.Fatalf("RunNow: %v", err)
	}
	if f.JobID == nil || f.RunID != "" {
		t.Fatalf("RunNow of a job target = job %v, run %q; want a job and no run", f.JobID, f.RunID)
	}
	jobs := firedJobs(t, pool, "nightly")
	want := []firedJob{{
		ID: *f.JobID, Kind: "ping", Args: `{"n": 7}`, Queue: "reports", Priority: 2, MaxAttempts: jobs[0].MaxAttempts,
		Schedule: "nightly", Slot: slotString(f.At), FirstSlot: slotString(f.At),
	}}
	if diff := cmp.Diff(want, jobs); diff != "" {
		t.Errorf("fired jobs (-want +got):\n%s", diff)
	}
	// The regular slot does not move, and a disabled schedule stays
	// disabled; the fire is recorded as the last one.
	got := f.Schedule
	if !got.NextRunAt.Equal(created.NextRunAt) || got.Enabled {
		t.Errorf("after RunNow next_run_at = %s enabled = %t; want %s and false", got.NextRunAt, got.Enabled, created.NextRunAt)
	}
	if got.LastRunAt == nil || !got.LastRunAt.Equal(f.At) || got.LastJobID == nil || *got.LastJobID != *f.JobID {
		t.Errorf("after RunNow last_run_at = %v last_job_id = %v; want %s and %d", got.LastRunAt, got.LastJobID, f.At, *f.JobID)
	}

	// Two fires in separate transactions make two jobs; two in one
	// transaction share the moment, and so the job.
	if _, err := s.RunNow(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if n := len(firedJobs(t, pool, "nightly")); n != 2 {
		t.Errorf("after a second RunNow there are %d jobs, want 2", n)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		a, err := s.RunNowTx(ctx, tx, "nightly")
		if err != nil {
			return err
		}
		b, err := s.RunNowTx(ctx, tx, "nightly")
		if err != nil {
			return err
		}
		if *a.JobID != *b.JobID {
			t.Errorf("two RunNowTx in one transaction made jobs %d and %d, want one", *a.JobID, *b.JobID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A rolled back RunNowTx leaves nothing.
	before := len(firedJobs(t, pool, "nightly"))
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunNowTx(ctx, tx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(firedJobs(t, pool, "nightly")); n != before {
		t.Errorf("a rolled back RunNowTx left %d jobs, want %d", n, before)
	}

	if _, err := s.RunNow(ctx, "missing"); !errors.Is(err, ErrScheduleNotFound) {
		t.Errorf("RunNow of an unknown schedule: error = %v, want ErrScheduleNotFound", err)
	}
}

func TestRunNowWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Workflows: &fakeEngine{}})

	if _, err := s.Create(ctx, &ScheduleParams{Name: "digest", Expression: "@hourly", TargetType: TargetWorkflow, Target: "send_digest", Args: json.RawMessage(`"weekly"`)}); err != nil {
		t.Fatal(err)
	}
	f, err := s.RunNow(ctx, "digest")
	if err != nil {
		t.Fatalf("RunNow: %v", err)
	}
	if f.RunID == "" || f.JobID != nil || f.Schedule.LastRunID != f.RunID {
		t.Fatalf("RunNow of a workflow target = job %v, run %q (schedule's last run %q)", f.JobID, f.RunID, f.Schedule.LastRunID)
	}
	key := queryValue[string](t, pool, `SELECT idempotency_key FROM braid_runs WHERE id = $1`, f.RunID)
	if want := IdempotencyKey("digest", f.At); key != want {
		t.Errorf("run's idempotency key = %q, want %q", key, want)
	}

	// Without a workflow starter the scheduler cannot fire it, and says so.
	bare := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)})
	if _, err := bare.RunNow(ctx, "digest"); !errors.Is(err, ErrCannotFire) {
		t.Errorf("RunNow without Config.Workflows: error = %v, want ErrCannotFire", err)
	}
	noQueue := newScheduler(t, pool, nil)
	if _, err := noQueue.Create(ctx, &ScheduleParams{Name: "job", Expression: "@hourly", TargetType: TargetJob, Target: "ping"}); err != nil {
		t.Fatal(err)
	}
	if _, err := noQueue.RunNow(ctx, "job"); !errors.Is(err, ErrCannotFire) {
		t.Errorf("RunNow without Config.Queue: error = %v, want ErrCannotFire", err)
	}
	// A failing start is returned and writes nothing.
	failing := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Workflows: &fakeEngine{fail: errors.New("engine down")}})
	if _, err := failing.RunNow(ctx, "digest"); err == nil {
		t.Error("RunNow with a failing engine succeeded")
	}
	if n := queryValue[int](t, pool, `SELECT count(*) FROM braid_runs`); n != 1 {
		t.Errorf("braid_runs holds %d runs after a failed RunNow, want 1", n)
	}
}

// TestOverlapSeesAFireThatRunNowCameAfter: under OverlapSkip, a slot's
// fire that is still unfinished holds the next slots back even after a
// RunNow, whose fire is recorded as the last one, has finished; a fire of
// another schedule whose name extends this one's does not.
func TestOverlapSeesAFireThatRunNowCameAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Workflows: &fakeEngine{}})
	for _, p := range []ScheduleParams{
		{Name: "job", TargetType: TargetJob, Target: "k"},
		{Name: "run", TargetType: TargetWorkflow, Target: "w"},
		{Name: "run:other", TargetType: TargetWorkflow, Target: "w"},
	} {
		p.Expression = "@every 1h"
		if _, err := s.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	behind := 0
	fire := func(names ...string) {
		t.Helper()
		behind++
		for _, name := range names {
			setDue(t, s, name, fmt.Sprintf("date_trunc('second', now()) - interval '%d minutes'", behind))
		}
		tick(t, s)
	}
	fires := func(name string) int {
		t.Helper()
		return queryValue[int](t, pool, `
SELECT (SELECT count(*) FROM river_job WHERE metadata->>'braid_schedule' = $1)
     + (SELECT count(*) FROM braid_runs WHERE idempotency_key LIKE 'schedule:' || $1 || ':2%')`, name)
	}

	// A slot's fire of each, still unfinished; then a RunNow of each,
	// which finishes at once.
	fire("job", "run")
	for _, name := range []string{"job", "run"} {
		f, err := s.RunNow(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if f.JobID != nil {
			exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, *f.JobID)
		} else {
			exec(t, pool, `UPDATE braid_runs SET status = 'completed' WHERE id = $1`, f.RunID)
		}
	}
	fire("job", "run")
	for _, name := range []string{"job", "run"} {
		if n := fires(name); n != 2 {
			t.Errorf("%s: %d fires while its first slot's fire is unfinished, want 2 (that one and RunNow's)", name, n)
		}
	}

	// Once the slot's fire has finished, the next slot fires; a run of
	// "run:other" that is unfinished does not hold "run" back.
	exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now()`)
	exec(t, pool, `UPDATE braid_runs SET status = 'completed'`)
	fire("run:other")
	if n := fires("run:other"); n != 1 {
		t.Fatalf("run:other fired %d times, want 1", n)
	}
	fire("job", "run")
	for _, name := range []string{"job", "run"} {
		if n := fires(name); n != 3 {
			t.Errorf("%s: %d fires once every earlier fire finished, want 3", name, n)
		}
	}
}
