package testutil_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestKitSeventyTwoHourDelay: a workflow that waits 72 hours completes
// once the kit's time has moved 72 hours, in the seconds the test takes;
// an hour earlier it still waits.
func TestKitSeventyTwoHourDelay(t *testing.T) {
	t.Parallel()
	trial := workflow.Define("kit_trial", func(t *workflow.Task, user string) (string, error) {
		if err := t.Delay("trial", 72*time.Hour); err != nil {
			return "", err
		}
		return "trial of " + user + " ended", nil
	})
	kit := testutil.NewKit(t, trial)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := kit.Now()
	run, err := trial.Start(ctx, kit.Engine, "ada", nil)
	if err != nil {
		t.Fatal(err)
	}
	kit.Advance(71 * time.Hour)
	if info, err := kit.Engine.Run(ctx, run.ID); err != nil || info.Status != "waiting" {
		t.Fatalf("after 71 hours the run is %v (%v), want waiting", info.Status, err)
	}
	kit.Advance(time.Hour)
	out, err := run.Result(ctx)
	if err != nil || out != "trial of ada ended" {
		t.Fatalf("after 72 hours: %q, %v", out, err)
	}
	if got := kit.Now().Sub(start); got != 72*time.Hour {
		t.Errorf("the kit's clock moved %s, want 72h", got)
	}
	var resume, fired time.Time
	if err := kit.Pool.QueryRow(ctx, `SELECT resume_at, finished_at FROM braid_steps WHERE name = 'trial'`).Scan(&resume, &fired); err != nil {
		t.Fatal(err)
	}
	if !resume.Equal(start.Add(72*time.Hour)) || !fired.Equal(resume) {
		t.Errorf("the delay was due at %s and fired at %s; want both at %s", resume, fired, start.Add(72*time.Hour))
	}
}

// TestKitDailyScheduleAndHourlyRecurringJob: seven days of a @daily
// schedule fire seven slots, at midnight by the database's clock; a day of
// a recurring job with an interval of one hour runs it 24 times.
func TestKitDailyScheduleAndHourlyRecurringJob(t *testing.T) {
	t.Parallel()
	report := workflow.Define("kit_daily_report", func(t *workflow.Task, _ struct{}) (string, error) {
		return "reported", nil
	})
	var fetches atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[kitFetchArgs]) error {
		fetches.Add(1)
		return nil
	}))
	// The middleware needs a pool on the database before the kit's
	// engine does.
	url := testutil.URL(t)
	mw, err := scheduler.NewRecurringMiddleware(testutil.Pool(t, url), &scheduler.RecurringConfig{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	kit := testutil.NewKitConfig(t, &testutil.KitConfig{
		URL: url,
		Engine: &workflow.Config{Queue: &queue.Config{Workers: workers, Middleware: []rivertype.Middleware{mw},
			Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}}},
		Scheduler: &scheduler.Config{},
	}, report)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := kit.Now()
	if _, err := kit.Scheduler.Create(ctx, &scheduler.ScheduleParams{Name: "report", Expression: "@daily", TimeZone: "UTC",
		TargetType: scheduler.TargetWorkflow, Target: "kit_daily_report", Args: struct{}{}}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, kit.Pool, func(tx pgx.Tx) error {
		_, err := kit.Scheduler.EnsureTx(ctx, tx, "", "feed-1", kitFetchArgs{Feed: "feed-1"}, start.Add(time.Hour))
		return err
	}); err != nil {
		t.Fatal(err)
	}

	kit.Advance(24 * time.Hour)
	if n := fetches.Load(); n != 24 {
		t.Errorf("a recurring job every hour ran %d times in a day, want 24", n)
	}
	if _, err := kit.Scheduler.Disable(ctx, "kit_fetch", "feed-1"); err != nil {
		t.Fatal(err)
	}
	kit.Advance(6 * 24 * time.Hour)

	rows, err := kit.Pool.Query(ctx, `SELECT created_at FROM braid_runs WHERE workflow = 'kit_daily_report' ORDER BY created_at`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	var want []time.Time
	midnight := start.UTC().Truncate(24 * time.Hour)
	for i := 1; i <= 7; i++ {
		want = append(want, midnight.Add(time.Duration(i)*24*time.Hour))
	}
	for i := range got {
		got[i] = got[i].UTC()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runs of the @daily schedule over 7 days (-want +got):\n%s", diff)
	}
	if n := countRows(t, kit, `SELECT count(*) FROM braid_runs WHERE workflow = 'kit_daily_report' AND status <> 'completed'`); n != 0 {
		t.Errorf("%d reports did not complete", n)
	}
}

type kitFetchArgs struct {
	Feed string `json:"feed"`
}

func (kitFetchArgs) Kind() string { return "kit_fetch" }

// TestKitLeaseExpires: a lease whose holder stopped renewing passes to
// another process once the kit's time moves past its TTL, and not before.
func TestKitLeaseExpires(t *testing.T) {
	t.Parallel()
	kit := testutil.NewKit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newManager := func(holder string) *leases.Manager {
		m, err := leases.New(kit.Pool, &leases.Config{Holder: holder, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := newManager("a"), newManager("b")
	held, err := a.TryAcquire(ctx, "report-writer")
	if err != nil {
		t.Fatal(err)
	}
	// a stops renewing. A minute less a second later, b still cannot
	// take the lease.
	kit.Advance(59 * time.Second)
	if _, err := b.TryAcquire(ctx, "report-writer"); err == nil {
		t.Fatal("b took the lease before its TTL passed")
	}
	kit.Advance(time.Second)
	got, err := b.TryAcquire(ctx, "report-writer")
	if err != nil {
		t.Fatalf("b after the TTL: %v", err)
	}
	if got.Holder != "b" || got.Generation != held.Generation+1 {
		t.Errorf("b holds %+v, want generation %d", got, held.Generation+1)
	}
	if !got.ExpiresAt.Equal(kit.Now().Add(time.Minute)) {
		t.Errorf("the lease expires at %s, want the kit's time plus its TTL, %s", got.ExpiresAt, kit.Now().Add(time.Minute))
	}
}

func countRows(t *testing.T, kit *testutil.Kit, sql string) int {
	t.Helper()
	var n int
	if err := kit.Pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
