package scheduler

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/leases"
)

// schedulerGoroutines returns the stacks of goroutines running code of a
// Scheduler or of its lease manager.
func schedulerGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "braid/scheduler.(*Scheduler)") || strings.Contains(g, "braid/leases.(*Manager)") {
			found = append(found, g)
		}
	}
	return found
}

// TestStopWaitsForItsGoroutines is not parallel: it looks at every
// goroutine of the process, so no other test's scheduler may run meanwhile.
// (Parallel tests start only after the sequential ones.)
func TestStopWaitsForItsGoroutines(t *testing.T) {
	ctx := context.Background()
	url := testdb.URL(t)
	pool := testdb.Pool(t, url)
	if g := schedulerGoroutines(); len(g) != 0 {
		t.Fatalf("scheduler goroutines before the test:\n%s", strings.Join(g, "\n\n"))
	}
	lm, err := leases.New(pool, &leases.Config{Holder: "lifecycle", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Leases: lm, PollInterval: 50 * time.Millisecond})
	if _, err := s.Create(ctx, &ScheduleParams{TargetType: TargetJob, Name: "often", Expression: "@every 1s", Target: "ping",
		OverlapPolicy: OverlapAllow, CatchUpPolicy: CatchUpAll}); err != nil {
		t.Fatal(err)
	}
	leading := func() bool {
		return queryValue[bool](t, pool, `SELECT EXISTS (SELECT 1 FROM braid_leases WHERE name = $1 AND holder = 'lifecycle' AND expires_at > now())`, LeaseNameDefault)
	}
	fired := func() int { return len(firedJobs(t, pool, "often")) }

	for round := range 2 {
		// Start's context bounds start-up only: cancelling it afterwards
		// does not stop the scheduler.
		startCtx, cancelStart := context.WithCancel(ctx)
		if err := s.Start(startCtx); err != nil {
			t.Fatalf("round %d: Start: %v", round, err)
		}
		cancelStart()
		if err := s.Start(ctx); err == nil || !strings.Contains(err.Error(), "already started") {
			t.Errorf("second Start: %v", err)
		}
		waitFor(t, 10*time.Second, "the lease", leading)
		before := fired()
		setDue(t, s, "often", "date_trunc('second', now()) - interval '1 second'")
		waitFor(t, 10*time.Second, "a fire after Start's context ended", func() bool { return fired() > before })

		var stopCtx context.Context = ctx
		if round == 1 {
			// A context that has already ended: Stop cancels what is in
			// flight, still waits for its goroutines, and says so.
			c, cancel := context.WithCancel(ctx)
			cancel()
			stopCtx = c
		}
		err := s.Stop(stopCtx)
		switch {
		case round == 0 && err != nil:
			t.Fatalf("Stop: %v", err)
		case round == 1 && !errors.Is(err, context.Canceled):
			t.Fatalf("Stop with an ended context: %v, want context.Canceled", err)
		}
		// Checked at once: Stop returns only after its goroutines did. The
		// leader goroutine may still be in its last statement, the deferred
		// close that tells Stop it is done; it must then be gone shortly.
		for i := 0; ; i++ {
			var busy, exiting []string
			for _, g := range schedulerGoroutines() {
				if lines := strings.SplitN(g, "\n", 3); len(lines) > 1 && strings.Contains(lines[1], "scheduler.(*Scheduler).Start.func1(") {
					exiting = append(exiting, g)
				} else {
					busy = append(busy, g)
				}
			}
			if len(busy) != 0 {
				t.Fatalf("round %d: %d scheduler goroutines still working after Stop:\n%s", round, len(busy), strings.Join(busy, "\n\n"))
			}
			if len(exiting) == 0 {
				break
			}
			if i == 100 {
				t.Fatalf("round %d: the leader goroutine did not exit:\n%s", round, strings.Join(exiting, "\n\n"))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if round == 0 && leading() {
			t.Error("the lease is still held after Stop")
		}
		// No further ticks: a due slot stays due.
		n := fired()
		setDue(t, s, "often", "date_trunc('second', now()) - interval '1 second'")
		time.Sleep(300 * time.Millisecond)
		if got := fired(); got != n {
			t.Fatalf("round %d: %d fires after Stop", round, got-n)
		}
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop of a stopped scheduler: %v", err)
		}
	}
	if err := newScheduler(t, pool, nil).Start(ctx); err == nil {
		t.Error("Start without a queue succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool)}).Start(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with an ended context: %v", err)
	}
}

// TestConcurrentStopsBothWait: a Stop called while another is stopping
// the Scheduler returns, as the first does, only once the lease has been
// released, here held up by a transaction that locks the lease's row.
func TestConcurrentStopsBothWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	pool := testdb.Pool(t, url)
	lm, err := leases.New(pool, &leases.Config{Holder: "twice", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, pool, &Config{Queue: insertOnlyQueue(t, pool), Leases: lm, PollInterval: 50 * time.Millisecond})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	leading := func() bool {
		return queryValue[bool](t, pool, `SELECT EXISTS (SELECT 1 FROM braid_leases WHERE name = $1 AND holder = 'twice' AND expires_at > now())`, LeaseNameDefault)
	}
	waitFor(t, 10*time.Second, "the lease", leading)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM braid_leases WHERE name = $1 FOR UPDATE`, LeaseNameDefault); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 2)
	go func() { stopped <- s.Stop(ctx) }()
	waitFor(t, 10*time.Second, "the first Stop to wait on the lease's row", func() bool {
		return queryValue[bool](t, pool, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%braid_leases%')`)
	})
	go func() { stopped <- s.Stop(ctx) }()
	select {
	case err := <-stopped:
		t.Fatalf("a Stop returned (%v) while the lease was still held", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-stopped; err != nil {
			t.Errorf("Stop: %v", err)
		}
		if leading() {
			t.Error("a Stop returned while the lease was held")
		}
	}
}
