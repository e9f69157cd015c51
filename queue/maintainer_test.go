package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/leases"
)

// TestAgingSteps drives aging by hand with the database clock moved by
// backdating rows: one level after AgeAfter, one more per AgeInterval.
func TestAgingSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	q := newQueue(t, pool, &Config{AgeAfter: time.Hour, AgeInterval: 10 * time.Minute})

	insert := func(p Priority, opts river.InsertOpts) int64 {
		t.Helper()
		opts.Priority = int(p)
		res, err := q.Insert(ctx, emailArgs{}, &InsertOpts{InsertOpts: opts})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.ID
	}
	low := insert(PriorityLow, river.InsertOpts{})
	fresh := insert(PriorityLow, river.InsertOpts{})
	critical := insert(PriorityCritical, river.InsertOpts{})
	later := insert(PriorityLow, river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	backdate := func(ids ...int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() - interval '2 hours' WHERE id = ANY($1)`, ids); err != nil {
			t.Fatal(err)
		}
	}
	backdate(low, critical)
	// The scheduled job's time is in the future, whatever its age.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET created_at = now() - interval '2 hours' WHERE id = $1`, later); err != nil {
		t.Fatal(err)
	}
	priorities := func() map[int64]Priority {
		t.Helper()
		out := map[int64]Priority{}
		for _, id := range []int64{low, fresh, critical, later} {
			job, err := q.River().JobGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			out[id] = Priority(job.Priority)
		}
		return out
	}
	step := func(wantRaised int, want map[int64]Priority) {
		t.Helper()
		n, err := q.ageOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != wantRaised {
			t.Errorf("ageOnce raised %d jobs, want %d", n, wantRaised)
		}
		got := priorities()
		for id, p := range want {
			if got[id] != p {
				t.Errorf("job %d priority %s, want %s", id, got[id], p)
			}
		}
	}

	step(1, map[int64]Priority{low: PriorityNormal, fresh: PriorityLow, critical: PriorityCritical, later: PriorityLow})
	// Again at once: nothing, the interval has not passed.
	step(0, map[int64]Priority{low: PriorityNormal})
	passInterval := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE river_job SET metadata = jsonb_set(metadata, '{braid_aged_at}', to_jsonb(now() - interval '11 minutes')) WHERE metadata ? 'braid_aged_at'`); err != nil {
			t.Fatal(err)
		}
	}
	passInterval()
	step(1, map[int64]Priority{low: PriorityHigh})
	passInterval()
	step(1, map[int64]Priority{low: PriorityCritical})
	passInterval()
	step(0, map[int64]Priority{low: PriorityCritical, fresh: PriorityLow, later: PriorityLow})

	// An operator's priority holds for a full interval.
	if _, err := q.SetPriority(ctx, low, PriorityLow); err != nil {
		t.Fatal(err)
	}
	step(0, map[int64]Priority{low: PriorityLow})
	passInterval()
	step(1, map[int64]Priority{low: PriorityNormal})
}

// TestAgingEndToEnd: with aging on, the maintenance loop (under its lease)
// raises a waiting job to critical; a queue without aging leaves it alone.
func TestAgingEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	// Nobody works the "parked" queue, so its job waits.
	aging := startQueue(t, testdb.Pool(t, url), &Config{AgeAfter: 20 * time.Millisecond, AgeInterval: 40 * time.Millisecond})
	res, err := aging.Insert(ctx, emailArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Queue: "parked", Priority: int(PriorityLow)}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	eventually(t, "aging to raise the job to critical", func() (bool, error) {
		job, err := aging.River().JobGet(ctx, res.Job.ID)
		if err != nil {
			return false, err
		}
		seen[job.Priority] = true
		return job.Priority == int(PriorityCritical), nil
	})
	if job, _ := aging.River().JobGet(ctx, res.Job.ID); job.State != rivertype.JobStateAvailable {
		t.Errorf("aged job is %s, want still available", job.State)
	}

	holder, err := aging.Leases().Holder(ctx, MaintenanceLease)
	if err != nil {
		t.Fatal(err)
	}
	if holder.Holder != aging.Leases().HolderID() {
		t.Errorf("%s is held by %s, want this Queue's manager %s", MaintenanceLease, holder.Holder, aging.Leases().HolderID())
	}
	if err := aging.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := aging.Leases().Holder(ctx, MaintenanceLease); !errors.Is(err, leases.ErrNoHolder) {
		t.Errorf("after Stop, %s holder = %v; want released", MaintenanceLease, err)
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newQueue(t, testdb.DB(t), nil)
	if err := q.Stop(ctx); err != nil {
		t.Errorf("Stop before Start = %v", err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// A job row that another transaction holds for long (an operator's open
// transaction, the backend of a process cut off mid-batch) is skipped by
// the heartbeat rescuer, which rescues the other silent jobs meanwhile,
// and the held one at a later pass.
func TestRescuerSkipsAJobAnotherTransactionHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[claimedArgs]) error { return nil }))
	q := newQueue(t, pool, &Config{
		Workers:         workers,
		Heartbeats:      map[string]time.Duration{"claimed": 10 * time.Millisecond},
		HeartbeatMisses: 1,
	})
	var ids [2]int64
	for i := range ids {
		res, err := q.Insert(ctx, claimedArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.Job.ID
	}
	// Both run, silent; the held one longer, so that the rescuer meets
	// it first.
	if _, err := pool.Exec(ctx, `
		UPDATE river_job SET state = 'running', attempt = 1,
		       attempted_at = clock_timestamp() - CASE WHEN id = $1 THEN interval '200 ms' ELSE interval '100 ms' END
		 WHERE id = ANY($2)`, ids[0], ids[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, ids[0]); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := q.rescueStale(rctx)
	if err != nil || n != 1 {
		t.Fatalf("a rescue pass with job %d held: rescued %d (%v); want the other job rescued", ids[0], n, err)
	}
	state := func(id int64) rivertype.JobState {
		job, err := q.River().JobGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return job.State
	}
	if s0, s1 := state(ids[0]), state(ids[1]); s0 != rivertype.JobStateRunning || s1 == rivertype.JobStateRunning {
		t.Fatalf("after the pass: held job %s, other job %s; want the held one left running and the other rescued", s0, s1)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := q.rescueStale(rctx); err != nil || n != 1 || state(ids[0]) == rivertype.JobStateRunning {
		t.Fatalf("the pass after the hold: rescued %d (%v), job %d %s; want it rescued", n, err, ids[0], state(ids[0]))
	}
}
