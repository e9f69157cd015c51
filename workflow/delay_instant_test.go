package workflow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// untilIn is the input of untiler: the instant to delay until.
type untilIn struct{ At time.Time }

var untiler = workflow.Define("until_instant", func(t *workflow.Task, in untilIn) (string, error) {
	if err := t.DelayUntil("until", in.At); err != nil {
		return "", err
	}
	return "woke", nil
})

// A delay due at an instant long past fires at once, whatever the
// instant: one due at 0001-01-01T00:00:00Z (a nanosecond after Go's zero
// time, which DelayUntil accepts, stored to the microsecond) has a NOTIFY
// whose payload is Go's zero time, which is a due time like any other,
// not the absence of one, and does not wait for the processor's poll,
// here a minute away.
func TestADelayDueAtYearOneFiresAtOnce(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	cfg := quietDelayConfig(time.Minute)
	cfg.Workflows = append(cfg.Workflows, untiler)
	eng := startEngine(t, pool, cfg)
	time.Sleep(time.Second) // the processor's first passes are over; it sleeps until its poll

	run, err := untiler.Start(ctxTimeout(t, 10*time.Second), eng, untilIn{time.Time{}.Add(time.Nanosecond)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := run.Result(ctxTimeout(t, 10*time.Second))
	if err != nil || got != "woke" {
		t.Fatalf("a delay due in year 1 (long past): %q, %v; want it woken at once, not at the poll a minute later", got, err)
	}
}

// A run started with a deadline sends a NOTIFY without a due time, which
// makes the delay processor look for everything due, also while it wakes
// a burst of due delays batch after full batch, not only once the burst
// is over: its last reading, taken before the burst, does not know the
// run. Here the burst (500 delays, a batch of one) lasts seconds, started
// by a NOTIFY with a due time, so that its passes are not full ones, and
// the deadline passes about 250 ms into it: some delays of the burst are
// woken after the run is cancelled.
func TestADeadlineDuringABurstOfDelaysIsNotHeldBack(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	cfg := quietDelayConfig(time.Minute)
	cfg.DelayBatchSize = 1
	eng := startEngine(t, pool, cfg)

	const n = 500
	for i := 0; i < n; i++ {
		if _, err := napper.Start(ctxTimeout(t, 10*time.Second), eng, napIn{time.Hour}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the burst's delays to be recorded", 60*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
			WHERE s.name = 'nap' AND s.status = 'waiting' AND k.status = 'waiting'`) == n
	})
	time.Sleep(time.Second) // the processor sleeps, its timer set for the poll
	// All due now, announced by no NOTIFY of their own.
	execSQL(t, pool, `UPDATE braid_steps SET resume_at = now() - interval '1 second' WHERE name = 'nap' AND status = 'waiting'`)

	// A NOTIFY that says they are due starts the burst: a pass that is
	// not a full one.
	execSQL(t, pool, `SELECT pg_notify('braid_delay', (extract(epoch FROM now()) * 1000000)::bigint::text)`)
	time.Sleep(50 * time.Millisecond)
	// The run's start NOTIFYs the processor (a NOTIFY without a due time).
	run, err := napper.Start(ctxTimeout(t, 10*time.Second), eng, napIn{time.Hour}, &workflow.StartOpts{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctxTimeout(t, 90*time.Second))
	if te := (*workflow.TimeoutError)(nil); !errors.As(err, &te) {
		t.Fatalf("the run with a 200ms deadline: %v; want it timed out", err)
	}
	waitFor(t, "the burst to end", 60*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'nap' AND status = 'waiting'`) <= 1
	})
	var span time.Duration
	if err := pool.QueryRow(ctxTimeout(t, 10*time.Second), `
		SELECT max(s.finished_at) - min(s.finished_at) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		 WHERE s.name = 'nap' AND s.status = 'fired' AND k.run_id <> $1`, run.ID).Scan(&span); err != nil {
		t.Fatal(err)
	}
	after := count(t, pool, `
		SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id, braid_runs r
		 WHERE r.id = $1 AND s.name = 'nap' AND s.status = 'fired' AND k.run_id <> r.id AND s.finished_at > r.finished_at`, run.ID)
	if span < time.Second {
		t.Skipf("the burst lasted %s only: too short to show anything", span)
	}
	t.Logf("the burst lasted %s; %d of its delays were woken after the run was cancelled", span, after)
	if after == 0 {
		t.Fatalf("the run whose deadline passed 200ms into a burst of %d delays lasting %s was cancelled only after every delay of the burst was woken", n, span)
	}
}
