package queue

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

// TestStartContextBoundsStartOnly: cancelling Start's context after Start
// returned stops neither working nor the maintenance loop.
func TestStartContextBoundsStartOnly(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[emailArgs]) error { return nil }))
	q := newQueue(t, testdb.DB(t), &Config{
		Workers: workers,
		Maintenance: []MaintenanceTask{{Name: "count", Interval: 10 * time.Millisecond, Run: func(context.Context) error {
			runs.Add(1)
			return nil
		}}},
	})
	startCtx, cancel := context.WithCancel(context.Background())
	if err := q.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	cancel()
	t.Cleanup(func() {
		if err := q.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	res, err := q.Insert(ctx, emailArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	n := runs.Load()
	eventually(t, "the maintenance task to keep running", func() (bool, error) { return runs.Load() > n+2, nil })

	// A context already cancelled starts nothing.
	q2 := newQueue(t, testdb.DB(t), &Config{Workers: workers})
	if err := q2.Start(startCtx); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context = %v, want context.Canceled", err)
	}
}

type stopArgs struct {
	IgnoreContext bool `json:"ignore_context"`
}

func (stopArgs) Kind() string { return "stop" }

// TestStopWaitsForJobs: at Stop's deadline a job that honours its context
// is cancelled and Stop returns after it returned; a job still running
// user code keeps Stop waiting until it returns.
func TestStopWaitsForJobs(t *testing.T) {
	t.Parallel()
	for _, ignore := range []bool{false, true} {
		name := "honours context"
		if ignore {
			name = "ignores context"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{})
			release := make(chan struct{})
			var returned atomic.Bool
			workers := river.NewWorkers()
			river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[stopArgs]) error {
				defer returned.Store(true)
				close(started)
				if job.Args.IgnoreContext {
					<-release
					return nil
				}
				<-ctx.Done()
				return ctx.Err()
			}))
			q := newQueue(t, testdb.DB(t), &Config{Workers: workers, JobTimeout: -1})
			if err := q.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Insert(context.Background(), stopArgs{IgnoreContext: ignore}, nil); err != nil {
				t.Fatal(err)
			}
			recv(t, started, "the job to start")

			stopCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			stopped := make(chan error, 1)
			go func() { stopped <- q.Stop(stopCtx) }()
			if ignore {
				<-stopCtx.Done()
				select {
				case err := <-stopped:
					t.Fatalf("Stop returned (%v) while a job still ran", err)
				case <-time.After(300 * time.Millisecond):
				}
				close(release)
			}
			if err := recv(t, stopped, "Stop to return"); err != nil {
				t.Errorf("Stop = %v", err)
			}
			if !returned.Load() {
				t.Error("Stop returned before the job did")
			}
		})
	}
}

// TestMaintenanceTasks: every task runs at once and then every Interval;
// a failing task is logged with its name and stops neither the others nor
// the heartbeat rescuer, whatever a slow task does; Stop waits for them.
func TestMaintenanceTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &logBuffer{}
	var counts, fails atomic.Int64
	slowStarted := make(chan struct{})
	var slowReturned atomic.Bool
	workers := stallOnFirstAttempt()
	q := newQueue(t, testdb.DB(t), &Config{
		Workers:                workers,
		Heartbeats:             map[string]time.Duration{"hb_stall": 300 * time.Millisecond},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
		Logger:                 slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError})),
		Maintenance: []MaintenanceTask{
			{Name: "slow", Interval: time.Hour, Run: func(ctx context.Context) error {
				close(slowStarted)
				<-ctx.Done()
				slowReturned.Store(true)
				return ctx.Err()
			}},
			{Name: "failing", Interval: 10 * time.Millisecond, Run: func(context.Context) error {
				fails.Add(1)
				return errors.New("reconcile failed")
			}},
			{Name: "count", Interval: 10 * time.Millisecond, Run: func(context.Context) error {
				counts.Add(1)
				return nil
			}},
		},
	})
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, slowStarted, "the slow task")
	eventually(t, "the tasks to run again and again", func() (bool, error) {
		return counts.Load() >= 3 && fails.Load() >= 3, nil
	})
	res, err := q.Insert(ctx, stallArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	job := waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if job.Attempt != 2 {
		t.Errorf("stalled job completed at attempt %d; want rescued and completed at 2", job.Attempt)
	}
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !slowReturned.Load() {
		t.Error("Stop returned before the slow task did")
	}
	if out := logs.String(); !strings.Contains(out, "task=failing") || !strings.Contains(out, "reconcile failed") {
		t.Errorf("logs do not name the failing task:\n%s", out)
	}
}

func TestMaintenanceTaskValidation(t *testing.T) {
	t.Parallel()
	run := func(context.Context) error { return nil }
	pool := testdb.DB(t)
	for _, tc := range []struct {
		tasks []MaintenanceTask
		want  string
	}{
		{[]MaintenanceTask{{Interval: time.Second, Run: run}}, "no Name"},
		{[]MaintenanceTask{{Name: "a", Interval: time.Second, Run: run}, {Name: "a", Interval: time.Second, Run: run}}, `"a" is used twice`},
		{[]MaintenanceTask{{Name: "b", Run: run}}, `("b"): Interval`},
		{[]MaintenanceTask{{Name: "c", Interval: -time.Second, Run: run}}, `("c"): Interval`},
		{[]MaintenanceTask{{Name: "d", Interval: time.Second}}, `("d"): Run is nil`},
	} {
		_, err := New(pool, testConfig(&Config{Maintenance: tc.tasks}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with %+v = %v; want an error containing %q", tc.tasks, err, tc.want)
		}
	}
	for _, cfg := range []*Config{{RescueRetryDelay: -1}, {MaxErrorBytes: -1}} {
		if _, err := New(pool, testConfig(cfg)); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}
