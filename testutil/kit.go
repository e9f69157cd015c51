package testutil

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// KitConfig configures NewKitConfig. The zero value is fine.
type KitConfig struct {
	// URL, when set, is the database the kit works on (from URL, say, for
	// a test that needs a pool on it before the kit starts); by default
	// the kit creates one.
	URL string
	// Engine is the engine's configuration; its Workflows are added to
	// the definitions given to NewKitConfig. Nil for the defaults.
	Engine *workflow.Config
	// Scheduler, when set, starts a scheduler on the engine's queue and
	// the engine's workflows (its Queue and Workflows are set by the kit).
	Scheduler *scheduler.Config
}

// Kit is an engine, and optionally a scheduler, on an isolated database
// whose time stands still until the test moves it: braid_now() and
// braid_clock(), the database clock that braid decides every time by,
// return the kit's time, which only Advance changes. So a test that says
// "three days pass" watches, within seconds, every delay, wait timeout,
// run deadline, cron slot and recurring job that falls inside them come
// due, each at its own time, and leases expire.
//
// River's own times (a job's scheduled_at, its retries and snoozes) stay
// on the real clock; Advance moves the River jobs scheduled within the
// advanced span forward too, so they come due with the rest.
type Kit struct {
	// Engine is the kit's started engine; Scheduler its scheduler, or nil.
	Engine    *workflow.Engine
	Scheduler *scheduler.Scheduler
	// Pool is a pool on the kit's database, and URL its connection string.
	Pool *pgxpool.Pool
	URL  string

	tb  kitT
	now time.Time
}

// kitT is what a kit needs of its test: testing.TB has it, and so does
// the standalone kit of OpenKit.
type kitT interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// standalone is the kitT of a kit opened outside a test (OpenKit): a
// failure panics, and Close runs the cleanups.
type standalone struct{ cleanups []func() }

func (*standalone) Helper()                           {}
func (*standalone) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*standalone) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (s *standalone) Cleanup(f func())                { s.cleanups = append(s.cleanups, f) }

// OpenKit opens a kit, as NewKitConfig does, for code that has no test,
// such as a runnable example; a failure panics. Close it when done.
func OpenKit(ctx context.Context, cfg *KitConfig, defs ...workflow.Definition) (*Kit, error) {
	db, err := Open(ctx)
	if err != nil {
		return nil, err
	}
	st := &standalone{}
	st.Cleanup(db.Close)
	c := KitConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.URL = db.URL
	return newKit(st, db.Pool, &c, defs), nil
}

// Close stops a kit that OpenKit opened, and drops its database.
func (k *Kit) Close() {
	if st, ok := k.tb.(*standalone); ok {
		for i := len(st.cleanups) - 1; i >= 0; i-- {
			st.cleanups[i]()
		}
		st.cleanups = nil
	}
}

// KitLeaseTTL is the TTL of the leases of a kit's own engine and
// scheduler (unless their configuration sets one): long enough that no
// Advance of a test takes them away from their holders, which renew them
// in real time while the kit's time stands still. A lease a test takes
// itself keeps its own TTL, and expires as the kit's time passes it.
const KitLeaseTTL = 1000 * time.Hour

// kitIdlePoll is how often RunUntilIdle looks whether anything is left.
const kitIdlePoll = 20 * time.Millisecond

// NewKit returns a kit with an engine running defs; see Kit.
func NewKit(tb testing.TB, defs ...workflow.Definition) *Kit {
	tb.Helper()
	return NewKitConfig(tb, nil, defs...)
}

// NewKitConfig returns a kit configured by cfg, with an engine running
// defs; see Kit. Everything stops when the test ends.
func NewKitConfig(tb testing.TB, cfg *KitConfig, defs ...workflow.Definition) *Kit {
	tb.Helper()
	if cfg == nil {
		cfg = &KitConfig{}
	}
	c := *cfg
	if c.URL == "" {
		c.URL = URL(tb)
	}
	return newKit(tb, Pool(tb, c.URL), &c, defs)
}

func newKit(tb kitT, pool *pgxpool.Pool, cfg *KitConfig, defs []workflow.Definition) *Kit {
	k := &Kit{tb: tb, URL: cfg.URL, Pool: pool}
	ctx := context.Background()
	// The clock stands still from here, at the database's present.
	if err := k.Pool.QueryRow(ctx, `SELECT date_trunc('milliseconds', now())`).Scan(&k.now); err != nil {
		tb.Fatalf("testutil: kit: %v", err)
	}
	k.setClock(ctx)
	var ec workflow.Config
	if cfg.Engine != nil {
		ec = *cfg.Engine
	}
	if ec.Leases == nil {
		ec.Leases = &leases.Config{}
	} else {
		lc := *ec.Leases
		ec.Leases = &lc
	}
	if ec.Leases.TTL == 0 {
		// The engine's own leases outlast any Advance of a test.
		ec.Leases.TTL = KitLeaseTTL
	}
	ec.Workflows = append(append([]workflow.Definition(nil), ec.Workflows...), defs...)
	eng, err := workflow.NewEngine(k.Pool, &ec)
	if err != nil {
		tb.Fatalf("testutil: kit: %v", err)
	}
	if err := eng.Start(ctx); err != nil {
		tb.Fatalf("testutil: kit: %v", err)
	}
	k.Engine = eng
	tb.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := eng.Stop(stopCtx); err != nil {
			tb.Errorf("testutil: kit: stopping the engine: %v", err)
		}
	})
	if cfg.Scheduler != nil {
		sc := *cfg.Scheduler
		sc.Queue, sc.Workflows = eng.Queue(), eng
		if sc.Leases == nil {
			sc.Leases = eng.Queue().Leases()
		}
		s, err := scheduler.New(k.Pool, &sc)
		if err != nil {
			tb.Fatalf("testutil: kit: %v", err)
		}
		if err := s.Start(ctx); err != nil {
			tb.Fatalf("testutil: kit: %v", err)
		}
		k.Scheduler = s
		// Registered after the engine's, so it runs first: the
		// scheduler stops before the queue it inserts into.
		tb.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Stop(stopCtx); err != nil {
				tb.Errorf("testutil: kit: stopping the scheduler: %v", err)
			}
		})
	}
	return k
}

// Now is the kit's time: what braid_now() returns in its database.
func (k *Kit) Now() time.Time { return k.now }

// setClock makes braid_now() and braid_clock() return k.now.
func (k *Kit) setClock(ctx context.Context) {
	k.tb.Helper()
	at := k.now.UTC().Format("2006-01-02 15:04:05.999999") + "+00"
	b := &pgx.Batch{}
	b.Queue(fmt.Sprintf(`CREATE OR REPLACE FUNCTION braid_now() RETURNS timestamptz
		LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT timestamptz '%s' $$`, at))
	b.Queue(fmt.Sprintf(`CREATE OR REPLACE FUNCTION braid_clock() RETURNS timestamptz
		LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT timestamptz '%s' $$`, at))
	if err := k.Pool.SendBatch(ctx, b).Close(); err != nil {
		k.tb.Fatalf("testutil: kit: setting the clock to %s: %v", at, err)
	}
}

// Advance moves the kit's time forward by d, waking on the way whatever
// falls due, each at its own time: it moves to the earliest due time
// within the span (a delay, a wait's timeout, a run's deadline, a cron
// slot, a recurring job, a lease's expiry), lets everything due run until
// the kit is idle (RunUntilIdle), and goes on from there until d has
// passed. River jobs scheduled within the span move along. It fails the
// test if the kit does not become idle within a minute at some step.
func (k *Kit) Advance(d time.Duration) {
	k.tb.Helper()
	if d < 0 {
		k.tb.Fatalf("testutil: kit: Advance(%s): time only moves forward", d)
	}
	if err := k.step(d, 0); err != nil {
		k.tb.Fatalf("testutil: kit: Advance(%s): %v", d, err)
	}
	target := k.now.Add(d)
	for k.now.Before(target) {
		var due *time.Time
		if err := k.Pool.QueryRow(context.Background(), kitNextDueSQL).Scan(&due); err != nil {
			k.tb.Fatalf("testutil: kit: Advance(%s): %v", d, err)
		}
		next := target
		if due != nil && due.After(k.now) && due.Before(next) {
			next = *due
		}
		if err := k.step(d, next.Sub(k.now)); err != nil {
			k.tb.Fatalf("testutil: kit: Advance(%s) at %s: %v", d, k.now.Format(time.RFC3339Nano), err)
		}
	}
}

// step moves the kit's time by by (none for 0), with River's jobs
// scheduled within it, wakes the delay processor and the scheduler, and
// waits, at most a minute, until the kit is idle.
func (k *Kit) step(d, by time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if by > 0 {
		k.now = k.now.Add(by)
		k.setClock(ctx)
		// River's future jobs within the step come due as they would.
		if _, err := k.Pool.Exec(ctx, `
			UPDATE river_job SET scheduled_at = greatest(now(), scheduled_at - $1::bigint * interval '1 microsecond')
			 WHERE state IN ('scheduled', 'retryable') AND scheduled_at > now()`, by.Microseconds()); err != nil {
			return fmt.Errorf("moving River's scheduled jobs: %w", err)
		}
		if err := k.wake(ctx); err != nil {
			return err
		}
	}
	return k.RunUntilIdle(ctx)
}

// kitNextDueSQL is the earliest time after the kit's present at which
// something comes due on braid's clock.
const kitNextDueSQL = `
	SELECT min(t) FROM (
	    SELECT min(resume_at) AS t FROM braid_steps WHERE status = 'waiting' AND resume_at > braid_now()
	    UNION ALL SELECT min(deadline_at) FROM braid_runs
	     WHERE deadline_at > braid_now() AND status IN ('pending', 'running', 'waiting')
	    UNION ALL SELECT min(next_run_at) FROM braid_schedules WHERE enabled AND next_run_at > braid_now()
	    UNION ALL SELECT min(next_run_at) FROM braid_recurring
	     WHERE enabled AND dead_at IS NULL AND running_since IS NULL AND next_run_at > braid_now()
	    UNION ALL SELECT min(expires_at) FROM braid_leases WHERE expires_at > braid_now()
	) AS due`

// wake tells the delay processor and the scheduler that time moved.
func (k *Kit) wake(ctx context.Context) error {
	_, err := k.Pool.Exec(ctx, `SELECT pg_notify('braid_delay', ''), pg_notify($1, '')`, scheduler.NotifyChannel)
	return err
}

// RunUntilIdle returns once nothing is due or running at the kit's time:
// no turn or River job is available or running, no delay, wait timeout or
// deadline is due, and no schedule slot or recurring job is due or
// running; that is, twice in a row, a poll apart. It returns ctx's error
// if that does not happen before ctx ends.
func (k *Kit) RunUntilIdle(ctx context.Context) error {
	quiet := 0
	for quiet < 2 {
		var busy bool
		if err := k.Pool.QueryRow(ctx, kitBusySQL).Scan(&busy); err != nil {
			return fmt.Errorf("testutil: kit: %w", err)
		}
		if busy {
			quiet = 0
		} else {
			quiet++
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testutil: kit: still busy at %s: %w", k.now.Format(time.RFC3339Nano), context.Cause(ctx))
		case <-time.After(kitIdlePoll):
		}
	}
	return nil
}

// kitBusySQL says whether anything is due or running.
const kitBusySQL = `
	SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'pending')
	                                          OR (state IN ('scheduled', 'retryable') AND scheduled_at <= now()))
	    OR EXISTS (SELECT 1 FROM braid_steps WHERE status = 'waiting' AND resume_at <= braid_now())
	    OR EXISTS (SELECT 1 FROM braid_runs WHERE deadline_at <= braid_now() AND status IN ('pending', 'running', 'waiting'))
	    OR EXISTS (SELECT 1 FROM braid_schedules WHERE enabled AND next_run_at <= braid_now())
	    OR EXISTS (SELECT 1 FROM braid_recurring
	                WHERE enabled AND dead_at IS NULL AND (next_run_at <= braid_now() OR running_since IS NOT NULL))`
