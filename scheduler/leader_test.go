package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/leases"
)

// instance is one scheduler process of a test: its own pool, lease holder
// and River client. kill makes it unreachable from the database, as a crash
// or a network partition would.
type instance struct {
	name   string
	pool   *pgxpool.Pool
	sched  *Scheduler
	killed atomic.Bool
}

func startInstance(t *testing.T, url, name string) *instance {
	t.Helper()
	in := &instance{name: name}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if in.killed.Load() {
			return errors.New("instance killed")
		}
		return nil
	}
	in.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.pool.Close)
	lm, err := leases.New(in.pool, &leases.Config{Holder: name, TTL: 2 * time.Second, Heartbeat: 400 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	in.sched = newScheduler(t, in.pool, &Config{Queue: insertOnlyQueue(t, in.pool), Leases: lm, PollInterval: 250 * time.Millisecond})
	if err := in.sched.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.stop(t) })
	return in
}

func (in *instance) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := in.sched.Stop(ctx); err != nil {
		t.Errorf("stopping %s: %v", in.name, err)
	}
}

// kill cuts the instance off the database: no new connections, and its
// open ones are terminated. Its lease then expires.
func (in *instance) kill(t *testing.T, admin *pgxpool.Pool) {
	in.killed.Store(true)
	exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, in.name)
}

// TestExactlyOncePerSlot runs three schedulers on separate pools over
// schedules firing every second, kills (or stops) the leader halfway, and
// checks by counting River jobs that each (schedule, slot) fired exactly
// once.
func TestExactlyOncePerSlot(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"crash", "stop"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testExactlyOncePerSlot(t, mode)
		})
	}
}

func testExactlyOncePerSlot(t *testing.T, mode string) {
	const (
		schedules = 4
		slots     = 20
	)
	ctx := context.Background()
	url := testdb.URL(t)
	admin := testdb.Pool(t, url)
	setup := newScheduler(t, admin, nil)

	// CatchUpAll, so slots that pass while no leader is up still fire one
	// by one and every slot can be counted.
	for i := range schedules {
		if _, err := setup.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: fmt.Sprintf("s%d", i), Expression: "@every 1s", Target: "tick",
			OverlapPolicy: OverlapAllow, CatchUpPolicy: CatchUpAll}); err != nil {
			t.Fatal(err)
		}
	}
	exec(t, admin, `UPDATE braid_schedules SET next_run_at = date_trunc('second', now()) + interval '1 second'`)
	first := queryValue[time.Time](t, admin, `SELECT min(next_run_at) FROM braid_schedules`)
	last := first.Add((slots - 1) * time.Second)

	instances := make(map[string]*instance)
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", mode, i)
		instances[name] = startInstance(t, url, name)
	}

	firedUpTo := func(until time.Time) bool {
		n := queryValue[int](t, admin, `SELECT count(*) FROM river_job WHERE (metadata->>'braid_slot')::timestamptz <= $1`, until)
		return n >= schedules*int(until.Sub(first)/time.Second+1)
	}
	half := first.Add(slots / 2 * time.Second)
	waitFor(t, 30*time.Second, "half of the slots", func() bool { return firedUpTo(half) })

	holder := queryValue[string](t, admin, `SELECT holder FROM braid_leases WHERE name = $1`, LeaseNameDefault)
	leader := instances[holder]
	if leader == nil {
		t.Fatalf("lease holder %q is not one of the instances", holder)
	}
	switch mode {
	case "crash":
		leader.kill(t, admin)
	case "stop":
		leader.stop(t)
	}
	waitFor(t, 40*time.Second, "all slots", func() bool { return firedUpTo(last) })
	newHolder := queryValue[string](t, admin, `SELECT holder FROM braid_leases WHERE name = $1`, LeaseNameDefault)
	if newHolder == holder {
		t.Errorf("lease still held by the %s leader %s", mode, holder)
	}
	for _, in := range instances {
		in.stop(t)
	}

	for i := range schedules {
		name := fmt.Sprintf("s%d", i)
		counts := make(map[string]int)
		for _, j := range firedJobs(t, admin, name) {
			counts[j.Slot]++
		}
		want := make(map[string]int)
		for k := range len(counts) {
			want[slotString(first.Add(time.Duration(k)*time.Second))] = 1
		}
		if len(counts) < slots {
			t.Errorf("schedule %s fired %d slots, want at least %d", name, len(counts), slots)
		}
		// Every slot from the first on fired exactly once, without gaps.
		if diff := cmp.Diff(want, counts); diff != "" {
			t.Errorf("schedule %s: jobs per slot (-want +got):\n%s", name, diff)
		}
	}
}

// TestConcurrentTicksFireOnce drives three schedulers at once without the
// lease, as several leaders would during a split brain: the row lock and
// the fence on next_run_at still fire each slot once.
func TestConcurrentTicksFireOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	admin := testdb.Pool(t, url)
	setup := newScheduler(t, admin, nil)
	for i := range 4 {
		if _, err := setup.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: fmt.Sprintf("s%d", i), Expression: "@every 1s", Target: "tick",
			OverlapPolicy: OverlapAllow, CatchUpPolicy: CatchUpAll}); err != nil {
			t.Fatal(err)
		}
	}
	// Thirty slots are already due, so the three compete from the start.
	exec(t, admin, `UPDATE braid_schedules SET next_run_at = date_trunc('second', now()) - interval '29 seconds'`)
	first := queryValue[time.Time](t, admin, `SELECT min(next_run_at) FROM braid_schedules`)

	done := make(chan error, 3)
	stopAt := time.Now().Add(2 * time.Second)
	for range 3 {
		s := newScheduler(t, testdb.Pool(t, url), &Config{Queue: insertOnlyQueue(t, admin)})
		go func() {
			for time.Now().Before(stopAt) {
				if err := s.tick(ctx, ctx, nil); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("tick: %v", err)
		}
	}
	for i := range 4 {
		name := fmt.Sprintf("s%d", i)
		counts := make(map[string]int)
		for _, j := range firedJobs(t, admin, name) {
			counts[j.Slot]++
		}
		want := make(map[string]int)
		for k := range len(counts) {
			want[slotString(first.Add(time.Duration(k)*time.Second))] = 1
		}
		if len(counts) < 30 {
			t.Errorf("schedule %s fired %d slots, want at least 30", name, len(counts))
		}
		if diff := cmp.Diff(want, counts); diff != "" {
			t.Errorf("schedule %s: jobs per slot (-want +got):\n%s", name, diff)
		}
	}
}
