package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/internal/testdb"
)

// The rescuer does not wait for aging: while an aging pass is stuck (here
// its raise waits on an advisory lock that the test holds, as a backlog of
// a million jobs to age would keep it busy), a silent attempt is still
// rescued.
func TestRescueDoesNotWaitForAging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	pool := testdb.Pool(t, url)
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION hold_raise() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM pg_advisory_xact_lock(4242);
		    RETURN NEW;
		END $$;
		CREATE TRIGGER hold_raise BEFORE UPDATE ON river_job FOR EACH ROW
		    WHEN (NEW.priority < OLD.priority) EXECUTE FUNCTION hold_raise()`); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Close(context.Background()) }()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}

	causes := make(chan error, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[stallArgs]) error {
		if job.Attempt > 1 {
			return nil
		}
		if err := Heartbeat(ctx); err != nil {
			return err
		}
		<-ctx.Done() // stuck, silently, until braid releases it
		causes <- context.Cause(ctx)
		return ctx.Err()
	}))
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[emailArgs]) error { return nil }))
	q := newQueue(t, pool, &Config{
		Workers:                workers,
		Heartbeats:             map[string]time.Duration{"hb_stall": 100 * time.Millisecond},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
		RetryPolicy:            Backoff{Strategy: Fixed, Base: time.Millisecond},
		AgeAfter:               time.Millisecond,
		AgeInterval:            40 * time.Millisecond,
	})
	// Nobody works the "parked" queue, so its job waits to be aged.
	if _, err := q.Insert(ctx, emailArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Queue: "parked", Priority: int(PriorityLow)}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The stuck raise goes on once the lock is released.
		_, _ = holder.Exec(context.Background(), `SELECT pg_advisory_unlock(4242)`)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := q.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	eventually(t, "an aging pass to be stuck", func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
		return n > 0, err
	})

	if _, err := q.Insert(ctx, stallArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, causes, "the silent attempt to be rescued while aging is stuck"); !errors.Is(cause, ErrJobNotRunning) {
		t.Errorf("silent attempt's context cause = %v, want ErrJobNotRunning", cause)
	}
}
