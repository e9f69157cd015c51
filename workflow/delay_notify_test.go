package workflow_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// recordClockReads makes braid_clock() in the test's database record the
// statement that calls it in the table clock_reads, and return the time
// as it does in production. Every statement of the delay processor reads
// braid_clock(), so the table holds one row at least for each of them.
// The leases' statements read it too, and are left out.
func recordClockReads(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	execSQL(t, pool, `CREATE TABLE clock_reads (id bigserial PRIMARY KEY, query text NOT NULL)`)
	execSQL(t, pool, `
		CREATE OR REPLACE FUNCTION braid_clock() RETURNS timestamptz LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
		    IF current_query() NOT LIKE '%braid_leases%' THEN
		        INSERT INTO clock_reads (query) VALUES (current_query());
		    END IF;
		    RETURN clock_timestamp();
		END $$`)
}

// clockReads is how many reads of braid_clock() clock_reads holds.
func clockReads(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM clock_reads`)
}

// clockReadsSince lists the statements that read braid_clock() after the
// first n reads.
func clockReadsSince(t *testing.T, pool *pgxpool.Pool, n int) string {
	t.Helper()
	rows, err := pool.Query(ctxTimeout(t, 10*time.Second), `SELECT query FROM clock_reads ORDER BY id OFFSET $1`, n)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(queries, "\n---\n")
}

// settleClockReads waits until the delay processor has made its first
// passes and then reads the clock no more for quiet: it sleeps.
func settleClockReads(t *testing.T, pool *pgxpool.Pool, quiet time.Duration) int {
	t.Helper()
	waitFor(t, "the delay processor's first pass", 20*time.Second, func() bool { return clockReads(t, pool) > 0 })
	deadline := time.Now().Add(20 * time.Second)
	n := clockReads(t, pool)
	for {
		time.Sleep(quiet)
		m := clockReads(t, pool)
		if m == n {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delay processor never slept for %s; its last statements:\n%s", quiet, clockReadsSince(t, pool, n))
		}
		n = m
	}
}

// napIn is the input of napper: how long to sleep.
type napIn struct{ Wait time.Duration }

var napper = workflow.Define("notify_nap", func(t *workflow.Task, in napIn) (string, error) {
	if err := t.Delay("nap", in.Wait); err != nil {
		return "", err
	}
	return "woke", nil
})

// quietDelayConfig is an engine whose delay processor polls once a
// minute, so that in a test only its NOTIFYs and its due times wake it,
// and whose leases outlast a slow machine's pauses.
func quietDelayConfig(poll time.Duration) *workflow.Config {
	cfg := testConfig(napper)
	cfg.DelayPollInterval = poll
	cfg.Leases = &leases.Config{TTL: 30 * time.Second, Heartbeat: time.Second}
	return cfg
}

// startNap starts a run of napper and waits until its delay is recorded.
func startNap(t *testing.T, pool *pgxpool.Pool, eng *workflow.Engine, wait time.Duration) *workflow.Run[string] {
	t.Helper()
	run, err := napper.Start(ctxTimeout(t, 10*time.Second), eng, napIn{wait}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run's delay to be recorded", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
			WHERE k.run_id = $1 AND s.name = 'nap' AND s.status = 'waiting' AND k.status = 'waiting'`, run.ID) == 1
	})
	return run
}

// A NOTIFY of a new delay says when the delay is due. The delay processor,
// woken by one for a delay due after the timer it has armed, runs no
// statement at all: the timer goes off first, and its pass reads the new
// delay. One for a delay due before the timer moves the timer, still
// without a statement, and the delay fires on time, in a pass that looks
// for no overdue run, for no deadline can be due.
func TestANotifyOfALaterDelayCostsTheDelayProcessorNothing(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	recordClockReads(t, pool)
	eng := startEngine(t, pool, quietDelayConfig(time.Minute))
	settleClockReads(t, pool, 500*time.Millisecond)

	// The timer goes off in 30 s, for this delay, before the poll.
	startNap(t, pool, eng, 30*time.Second)
	n := settleClockReads(t, pool, 500*time.Millisecond)

	// Due after the timer: its NOTIFY changes nothing.
	startNap(t, pool, eng, time.Hour)
	time.Sleep(time.Second)
	if m := clockReads(t, pool); m != n {
		t.Fatalf("the delay processor read the clock %d times after the NOTIFY of a delay due after its timer; want none. Its statements:\n%s",
			m-n, clockReadsSince(t, pool, n))
	}

	// Due before the timer: it fires on time, long before the timer
	// and the poll.
	start := time.Now()
	run := startNap(t, pool, eng, 200*time.Millisecond)
	if got, err := run.Result(ctxTimeout(t, 10*time.Second)); err != nil || got != "woke" {
		t.Fatalf("the run whose delay was due before the processor's timer: %q, %v; want it woken", got, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the delay due in 200ms fired after %s", d)
	}
	// No deadline may be due, and no full pass was due: its wake looked
	// for no overdue run.
	if since := clockReadsSince(t, pool, n); strings.Contains(since, "deadline_at <= (SELECT braid_clock())") {
		t.Errorf("the wake of a delay, with no deadline anywhere, looked for overdue runs; its statements:\n%s", since)
	}
}

// A NOTIFY whose payload says nothing of when (empty, as a new deadline's,
// the test kit's and an older version's are, or garbage) makes the delay
// processor look at everything: a due delay that no NOTIFY announced
// fires at once, not at the next poll a minute later.
func TestADelayNotifyWithoutADueTimeMakesAFullPass(t *testing.T) {
	t.Parallel()
	for name, payload := range map[string]string{"empty": "", "garbage": "soon, perhaps", "a number and more": "1700000000000000us"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := testutil.DB(t)
			eng := startEngine(t, pool, quietDelayConfig(time.Minute))
			run := startNap(t, pool, eng, time.Hour)
			time.Sleep(500 * time.Millisecond) // the processor sleeps, its timer set for the poll
			// Due now, and announced by no NOTIFY of its own.
			execSQL(t, pool, `UPDATE braid_steps s SET resume_at = now() - interval '1 second'
				FROM braid_tasks k WHERE k.id = s.task_id AND k.run_id = $1 AND s.name = 'nap'`, run.ID)
			execSQL(t, pool, `SELECT pg_notify('braid_delay', $1)`, payload)
			if got, err := run.Result(ctxTimeout(t, 20*time.Second)); err != nil || got != "woke" {
				t.Fatalf("the due delay after a NOTIFY with payload %q: %q, %v; want it woken", payload, got, err)
			}
		})
	}
}

// noteLaterDelays starts, every 100 ms until the test ends, a run whose
// delay is due in two hours: NOTIFYs that the delay processor hears and
// that make it do nothing. They must not keep it from its poll.
func noteLaterDelays(t *testing.T, pool *pgxpool.Pool, eng *workflow.Engine) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx := ctxTimeout(t, 10*time.Second)
			if _, err := napper.Start(ctx, eng, napIn{2 * time.Hour}, nil); err != nil && ctx.Err() == nil {
				t.Errorf("starting a run whose delay is due later: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
}

// A delay that falls due with no NOTIFY (one lost: the listener was down,
// or its writer never sent it) is fired by the poll, even while NOTIFYs of
// later delays keep coming.
func TestADelayWhoseNotifyIsLostFiresAtThePoll(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, quietDelayConfig(500*time.Millisecond))
	run := startNap(t, pool, eng, time.Hour)
	noteLaterDelays(t, pool, eng)
	time.Sleep(300 * time.Millisecond)
	execSQL(t, pool, `UPDATE braid_steps s SET resume_at = now() - interval '1 second'
		FROM braid_tasks k WHERE k.id = s.task_id AND k.run_id = $1 AND s.name = 'nap'`, run.ID)
	if got, err := run.Result(ctxTimeout(t, 10*time.Second)); err != nil || got != "woke" {
		t.Fatalf("the delay that fell due without a NOTIFY: %q, %v; want it woken by the poll (every 500ms)", got, err)
	}
}

// A deadline that passes with no NOTIFY is acted on by the poll as well,
// even while NOTIFYs of later delays keep coming: the passes those make
// the processor look for overdue runs only when a deadline may be due,
// and the poll always looks.
func TestADeadlineWhoseNotifyIsLostIsCancelledAtThePoll(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	eng := startEngine(t, pool, quietDelayConfig(500*time.Millisecond))
	run, err := napper.Start(ctxTimeout(t, 10*time.Second), eng, napIn{time.Hour}, &workflow.StartOpts{Timeout: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to wait", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'waiting'`, run.ID) == 1
	})
	noteLaterDelays(t, pool, eng)
	time.Sleep(300 * time.Millisecond)
	execSQL(t, pool, `UPDATE braid_runs SET deadline_at = now() - interval '1 second' WHERE id = $1`, run.ID)
	_, err = run.Result(ctxTimeout(t, 10*time.Second))
	if te := (*workflow.TimeoutError)(nil); !errors.As(err, &te) {
		t.Fatalf("the run whose deadline passed without a NOTIFY: %v; want it cancelled by the poll (every 500ms)", err)
	}
}
