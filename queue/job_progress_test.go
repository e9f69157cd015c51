package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

type stallArgs struct{}

func (stallArgs) Kind() string { return "hb_stall" }

// stallOnFirstAttempt is a worker of stallArgs whose first attempt waits,
// silent, until its context ends, and whose later attempts succeed.
func stallOnFirstAttempt() *river.Workers {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[stallArgs]) error {
		if job.Attempt > 1 {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}))
	return workers
}

type liveArgs struct{}

func (liveArgs) Kind() string { return "hb_live" }

// TestHeartbeatRescue: an attempt that stops heartbeating is taken back,
// its context is cancelled, and the job runs again.
func TestHeartbeatRescue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
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
	q := startQueue(t, testdb.DB(t), &Config{
		Workers:                workers,
		Heartbeats:             map[string]time.Duration{"hb_stall": 100 * time.Millisecond},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
		RetryPolicy:            Backoff{Strategy: Fixed, Base: time.Millisecond},
	})
	res, err := q.Insert(ctx, stallArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, causes, "the stalled attempt's cancellation"); !errors.Is(cause, ErrJobNotRunning) {
		t.Errorf("stalled attempt's context cause = %v, want ErrJobNotRunning", cause)
	}
	job := waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if job.Attempt < 2 {
		t.Errorf("job completed at attempt %d; the rescue should have run it again", job.Attempt)
	}
	if len(job.Errors) == 0 || job.Errors[0].Attempt != 1 || !strings.Contains(job.Errors[0].Error, "heartbeat lost") {
		t.Errorf("errors = %+v, want attempt 1 recorded as a lost heartbeat", job.Errors)
	}
	p, err := q.JobProgress(ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.HeartbeatAt != nil {
		t.Errorf("heartbeat still set after the job completed: %v", p.HeartbeatAt)
	}
}

// TestHeartbeatRescueDiscardsSpentJob: a silent last attempt makes the job
// a dead letter.
func TestHeartbeatRescueDiscardsSpentJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[stallArgs]) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	q := startQueue(t, testdb.DB(t), &Config{
		Workers:                workers,
		Heartbeats:             map[string]time.Duration{"hb_stall": 50 * time.Millisecond},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
	})
	res, err := q.Insert(ctx, stallArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, res.Job.ID, rivertype.JobStateDiscarded)
	dead, err := q.DeadLetters(ctx, DeadLetterFilter{Kind: "hb_stall"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || !strings.Contains(dead[0].LastError.Error, "heartbeat lost") {
		t.Fatalf("dead letters = %+v, want the job with a lost heartbeat", dead)
	}
}

// TestShortHeartbeatJobWritesNothing: declaring a heartbeat costs a short
// attempt no write.
func TestShortHeartbeatJobWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[liveArgs]) error { return nil }))
	q := startQueue(t, testdb.DB(t), &Config{
		Workers:    workers,
		Heartbeats: map[string]time.Duration{"hb_live": time.Minute},
	})
	res, err := q.Insert(ctx, liveArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if p, err := q.JobProgress(ctx, res.Job.ID); !errors.Is(err, rivertype.ErrNotFound) {
		t.Errorf("JobProgress = %+v, %v; want no row for an attempt that never reported", p, err)
	}
}

// TestHeartbeatingJobNotRescued: a job that keeps heartbeating runs well
// past the rescue threshold and completes in its first attempt.
func TestHeartbeatingJobNotRescued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const interval = 200 * time.Millisecond
	var beats atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[liveArgs]) error {
		start := time.Now()
		// Three times the rescue threshold (2 intervals).
		for time.Since(start) < 6*interval {
			if err := Heartbeat(ctx); err != nil {
				return err
			}
			beats.Add(1)
			time.Sleep(interval / 10)
		}
		return nil
	}))
	q := startQueue(t, testdb.DB(t), &Config{
		Workers:                workers,
		Heartbeats:             map[string]time.Duration{"hb_live": interval},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 10 * time.Millisecond,
	})
	res, err := q.Insert(ctx, liveArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var job *rivertype.JobRow
	eventually(t, "the job to finish or be rescued", func() (bool, error) {
		var err error
		job, err = q.River().JobGet(ctx, res.Job.ID)
		return err == nil && (job.FinalizedAt != nil || len(job.Errors) > 0), err
	})
	if job.State != rivertype.JobStateCompleted || job.Attempt != 1 || len(job.Errors) != 0 {
		t.Errorf("heartbeating job ended %s at attempt %d with errors %+v; want completed at attempt 1 without errors",
			job.State, job.Attempt, job.Errors)
	}
	if beats.Load() < 10 {
		t.Errorf("only %d heartbeats recorded", beats.Load())
	}
}

// TestRescueFenced drives the rescuer by hand between listing a silent
// attempt and rescuing it: an attempt that heartbeats, or completes, in
// between is left untouched.
func TestRescueFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	beat := make(chan chan error)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[stallArgs]) error {
		if err := Heartbeat(ctx); err != nil {
			return err
		}
		started <- struct{}{}
		for {
			select {
			case reply := <-beat:
				reply <- Heartbeat(ctx)
			case <-release:
				return nil
			}
		}
	}))
	q := startQueue(t, testdb.DB(t), &Config{
		Workers:             workers,
		Heartbeats:          map[string]time.Duration{"hb_stall": 50 * time.Millisecond},
		HeartbeatMisses:     2,
		MaintenanceDisabled: true, // the test is the rescuer
	})
	res, err := q.Insert(ctx, stallArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the job to start")

	listed := func() []staleAttempt {
		var stale []staleAttempt
		eventually(t, "the attempt to go silent", func() (bool, error) {
			var err error
			stale, err = q.findStale(ctx)
			return len(stale) == 1 && stale[0].id == res.Job.ID && stale[0].attempt == 1, err
		})
		return stale
	}

	// Listed as silent, then it heartbeats: no rescue.
	stale := listed()
	reply := make(chan error)
	beat <- reply
	if err := recv(t, reply, "the heartbeat"); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if n, err := q.rescue(ctx, stale); err != nil || n != 0 {
		t.Fatalf("rescue after a fresh heartbeat = %d, %v; want 0", n, err)
	}
	if job, _ := q.River().JobGet(ctx, res.Job.ID); job.State != rivertype.JobStateRunning || len(job.Errors) != 0 {
		t.Fatalf("job after the fenced rescue: %s with %+v; want running, untouched", job.State, job.Errors)
	}

	// Listed as silent again, then it completes: no rescue.
	stale = listed()
	close(release)
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if n, err := q.rescue(ctx, stale); err != nil || n != 0 {
		t.Fatalf("rescue after completion = %d, %v; want 0", n, err)
	}
	job, err := q.River().JobGet(ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != rivertype.JobStateCompleted || job.Attempt != 1 || len(job.Errors) != 0 {
		t.Errorf("completed job after the fenced rescue: %s, attempt %d, errors %+v; want untouched",
			job.State, job.Attempt, job.Errors)
	}
}

type progressArgs struct{}

func (progressArgs) Kind() string { return "progress" }

func TestProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	listen, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Release()
	if _, err := listen.Exec(ctx, "LISTEN "+ProgressChannel); err != nil {
		t.Fatal(err)
	}

	reported := make(chan struct{})
	finish := make(chan struct{})
	inputErrs := make(chan []error, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[progressArgs]) error {
		inputErrs <- []error{
			Progress(ctx, 101, "too far"),
			Progress(ctx, -1, ""),
			Progress(ctx, 10, strings.Repeat("é", ProgressMessageMaxLength+1)),
			Progress(ctx, 10, "nul\x00byte"),
		}
		if err := Progress(ctx, 50, "halfway"); err != nil {
			return err
		}
		close(reported)
		<-finish
		return Progress(ctx, 100, "done")
	}))
	q := startQueue(t, pool, &Config{Workers: workers})
	res, err := q.Insert(ctx, progressArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}

	for i, err := range recv(t, inputErrs, "the input checks") {
		if err == nil {
			t.Errorf("bad progress input %d accepted", i)
		}
	}
	recv(t, reported, "the first report")
	// Another connection sees it while the job runs.
	p, err := q.JobProgress(ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Percent != 50 || p.Message != "halfway" || p.Attempt != 1 || p.Kind != "progress" || p.HeartbeatAt == nil {
		t.Errorf("JobProgress while running = %+v, want 50%% halfway, attempt 1, with a heartbeat", p)
	}
	close(finish)

	for _, want := range []JobProgress{{Percent: 50, Message: "halfway"}, {Percent: 100, Message: "done"}} {
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		n, err := listen.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var got JobProgress
		if err := json.Unmarshal([]byte(n.Payload), &got); err != nil {
			t.Fatalf("payload %s: %v", n.Payload, err)
		}
		if got.JobID != res.Job.ID || got.Kind != "progress" || got.Attempt != 1 ||
			got.Percent != want.Percent || got.Message != want.Message || got.UpdatedAt.IsZero() {
			t.Errorf("notification %s, want job %d at %d%% %q", n.Payload, res.Job.ID, want.Percent, want.Message)
		}
	}
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if _, err := q.JobProgress(ctx, 999_999); !errors.Is(err, rivertype.ErrNotFound) {
		t.Errorf("JobProgress of an unknown job = %v, want ErrNotFound", err)
	}
}

func TestProgressOutsideJob(t *testing.T) {
	t.Parallel()
	if err := Progress(context.Background(), 1, "x"); !errors.Is(err, ErrNotJobContext) {
		t.Errorf("Progress outside a job = %v, want ErrNotJobContext", err)
	}
	if err := Heartbeat(context.Background()); !errors.Is(err, ErrNotJobContext) {
		t.Errorf("Heartbeat outside a job = %v, want ErrNotJobContext", err)
	}
	if _, ok := JobFromContext(context.Background()); ok {
		t.Error("JobFromContext found a job in a background context")
	}
}

// TestRestartLeavesAReturnedAttemptToTheCompleter: the database stops
// while an attempt heartbeats; its worker returns, successfully, while the
// server is down, and the server comes back after longer than the
// attempt's HeartbeatMisses intervals. The rescuer must not take the job
// back before River's completer writes the outcome: the job completes at
// its first attempt, with no error recorded.
func TestRestartLeavesAReturnedAttemptToTheCompleter(t *testing.T) {
	t.Parallel()
	server, q, w, id := startBeating(t, 500*time.Millisecond, 3)

	server.Stop(t)
	close(w.release)
	// Down for longer than the 2 intervals of 500 ms the rescuer allows.
	time.Sleep(2 * time.Second)
	server.Start(t)

	job := waitState(t, q, id, rivertype.JobStateCompleted, rivertype.JobStateAvailable,
		rivertype.JobStateRetryable, rivertype.JobStateDiscarded)
	if job.State != rivertype.JobStateCompleted || job.Attempt != 1 || len(job.Errors) != 0 {
		t.Fatalf("after the restart: %s at attempt %d with errors %+v; want completed at attempt 1 with none",
			job.State, job.Attempt, job.Errors)
	}
}

// TestLongOutageKeepsAnUnconfirmedAttemptsOutcome: the database stops
// while an attempt heartbeats, and the worker returns, successfully, once
// it has gone more than a heartbeat interval unconfirmed; the server stays
// down longer than the attempt may spend checking its ownership. While the
// server is down nothing can take the job, so the outcome must not be
// dropped: the job completes at its first attempt once the server is back.
func TestLongOutageKeepsAnUnconfirmedAttemptsOutcome(t *testing.T) {
	t.Parallel()
	server, q, w, id := startBeating(t, 300*time.Millisecond, 1)

	server.Stop(t)
	time.Sleep(time.Second) // more than the 300 ms interval: unconfirmed
	close(w.release)
	recv(t, w.returned, "the worker to return")
	// Down for longer than the 5 s the return may spend on its check.
	time.Sleep(6 * time.Second)
	server.Start(t)

	job := waitState(t, q, id, rivertype.JobStateCompleted, rivertype.JobStateDiscarded)
	if job.State != rivertype.JobStateCompleted || len(job.Errors) != 0 {
		t.Fatalf("after the outage: %s with errors %+v; want completed with none", job.State, job.Errors)
	}
}

// beater works liveArgs: it heartbeats every 50 ms, sending on beats
// (without blocking) each time a heartbeat is recorded, until release is
// closed; then it returns successfully and closes returned.
type beater struct {
	workers           *river.Workers
	beats             chan struct{}
	release, returned chan struct{}
}

func newBeater() *beater {
	w := &beater{workers: river.NewWorkers(), beats: make(chan struct{}, 1), release: make(chan struct{}), returned: make(chan struct{})}
	river.AddWorker(w.workers, river.WorkFunc(func(ctx context.Context, job *river.Job[liveArgs]) error {
		defer close(w.returned)
		for {
			select {
			case <-w.release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			if Heartbeat(ctx) == nil { // fails while the database is down
				select {
				case w.beats <- struct{}{}:
				default:
				}
			}
		}
	}))
	return w
}

// startBeating starts, on a private server, a Queue whose beater works a
// job of HeartbeatMisses 2 intervals and maxAttempts attempts, and returns
// once the job has heartbeated.
func startBeating(t *testing.T, interval time.Duration, maxAttempts int) (*testdb.Server, *Queue, *beater, int64) {
	t.Helper()
	server := testdb.Private(t)
	w := newBeater()
	q := startQueue(t, testdb.Pool(t, server.URL), &Config{
		Workers:                w.workers,
		Heartbeats:             map[string]time.Duration{"hb_live": interval},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
		RescueRetryDelay:       time.Millisecond,
	})
	res, err := q.Insert(context.Background(), liveArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: maxAttempts}})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, w.beats, "a heartbeat")
	return server, q, w, res.Job.ID
}
