package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/leases"
)

// modeArgs is a job whose worker behaves as Mode says.
type modeArgs struct {
	Mode string `json:"mode"`
}

func (modeArgs) Kind() string { return "mode" }

// modeWorker works modeArgs. A failed attempt of mode "retry_once" is
// retried at once; other failures in a day.
type modeWorker struct {
	river.WorkerDefaults[modeArgs]
	maxBytes int
}

func (w *modeWorker) NextRetry(job *river.Job[modeArgs]) time.Time {
	if job.Args.Mode == "retry_once" {
		return time.Now()
	}
	return time.Now().Add(24 * time.Hour)
}

func (w *modeWorker) Work(ctx context.Context, job *river.Job[modeArgs]) error {
	switch job.Args.Mode {
	case "nul":
		return errors.New("bad\x00byte \xff here")
	case "big":
		return errors.New(strings.Repeat("é", 1<<19)) // 1 MiB
	case "panic":
		panic("boom\x00" + strings.Repeat("x", 2*w.maxBytes))
	case "retry_once":
		if job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
	case "snooze_once":
		if !bytes.Contains(job.Metadata, []byte(`"snoozes"`)) {
			return river.JobSnooze(time.Millisecond)
		}
	case "output_nul":
		return river.RecordOutput(ctx, map[string]string{"key\x00": "value\x00 \\u0000 kept"})
	}
	return nil
}

// TestAttemptErrorsSanitized: errors with a NUL byte, with invalid UTF-8,
// of 1 MiB, and a panic with a NUL byte and a long value are recorded
// sanitised and capped, and the jobs completed beside them (one after a
// retry, one after a snooze) are recorded as usual.
func TestAttemptErrorsSanitized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const maxBytes = 4096
	workers := river.NewWorkers()
	river.AddWorker(workers, &modeWorker{maxBytes: maxBytes})
	q := startQueue(t, testdb.DB(t), &Config{Workers: workers, MaxErrorBytes: maxBytes})

	modes := []string{"nul", "big", "panic", "ok", "retry_once", "snooze_once", "ok", "big", "nul", "output_nul"}
	var params []InsertManyParams
	for _, m := range modes {
		params = append(params, InsertManyParams{Args: modeArgs{Mode: m}, InsertOpts: &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 2}}})
	}
	// The failing ones end on their first attempt: nul and panic are
	// discarded, big waits a day as retryable.
	params[0].InsertOpts.MaxAttempts = 1
	params[2].InsertOpts.MaxAttempts = 1
	params[8].InsertOpts.MaxAttempts = 1
	res, err := q.InsertMany(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		mode := modes[i]
		var job *rivertype.JobRow
		switch mode {
		case "nul", "panic":
			job = waitState(t, q, r.Job.ID, rivertype.JobStateDiscarded)
		case "big":
			job = waitState(t, q, r.Job.ID, rivertype.JobStateRetryable)
		default:
			job = waitState(t, q, r.Job.ID, rivertype.JobStateCompleted)
		}
		for _, e := range job.Errors {
			for what, text := range map[string]string{"error": e.Error, "trace": e.Trace} {
				if len(text) > maxBytes || strings.IndexByte(text, 0) >= 0 || !utf8.ValidString(text) {
					t.Errorf("%s job: recorded %s is %d bytes, valid UTF-8 %v, NUL %v; want sanitised within %d bytes",
						mode, what, len(text), utf8.ValidString(text), strings.IndexByte(text, 0) >= 0, maxBytes)
				}
			}
		}
		switch mode {
		case "nul":
			if len(job.Errors) != 1 || !strings.HasPrefix(job.Errors[0].Error, "badbyte") {
				t.Errorf("nul job errors = %+v, want the text without its NUL byte", job.Errors)
			}
		case "big":
			if len(job.Errors) != 1 || !strings.Contains(job.Errors[0].Error, "bytes cut") {
				t.Errorf("big job errors = %d, want one, marked as cut", len(job.Errors))
			}
		case "panic":
			if len(job.Errors) != 1 || !strings.Contains(job.Errors[0].Error, "boom") || job.Errors[0].Trace == "" {
				t.Errorf("panic job errors = %+v, want the panic with its stack", job.Errors)
			}
		case "retry_once":
			if job.Attempt != 2 || len(job.Errors) != 1 {
				t.Errorf("retry_once job: attempt %d, %d errors; want completed at attempt 2 after one error", job.Attempt, len(job.Errors))
			}
		case "snooze_once":
			if job.Attempt != 1 || len(job.Errors) != 0 {
				t.Errorf("snooze_once job: attempt %d, %d errors; want completed at attempt 1 without errors", job.Attempt, len(job.Errors))
			}
		case "output_nul":
			// Recorded output with NUL characters is kept without them
			// (an escaped backslash followed by "u0000" is text, and stays).
			var md struct {
				Output map[string]string `json:"output"`
			}
			if err := json.Unmarshal(job.Metadata, &md); err != nil || md.Output["key"] != `value \u0000 kept` {
				t.Errorf("output_nul job: metadata %s (%v), want its output without NUL characters", job.Metadata, err)
			}
		}
	}
	// The completer keeps recording outcomes afterwards.
	r, err := q.Insert(ctx, modeArgs{Mode: "ok"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, r.Job.ID, rivertype.JobStateCompleted)
}

type supersedeArgs struct{}

func (supersedeArgs) Kind() string { return "supersede" }

// TestSupersededByWatch: an attempt of a heartbeat kind goes silent and is
// rescued; its watch cancels it; the job runs again as attempt 2; the
// first attempt then returns nil, late. Attempt 2 keeps running, and its
// own outcome is recorded.
func TestSupersededByWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	causes := make(chan error, 1)
	releaseFirst := make(chan struct{})
	secondStarted := make(chan struct{})
	releaseSecond := make(chan struct{})
	firstReturned := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[supersedeArgs]) error {
		if job.Attempt == 1 {
			defer close(firstReturned)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			<-releaseFirst // still running user code after its rescue
			return nil
		}
		close(secondStarted)
		for {
			select {
			case <-releaseSecond:
				return errors.New("second attempt's own error")
			case <-time.After(20 * time.Millisecond):
				if err := Heartbeat(ctx); err != nil {
					return err
				}
			}
		}
	}))
	q := startQueue(t, testdb.DB(t), &Config{
		Workers:                workers,
		Heartbeats:             map[string]time.Duration{"supersede": 100 * time.Millisecond},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
		RescueRetryDelay:       time.Millisecond,
	})
	res, err := q.Insert(ctx, supersedeArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	if cause := recv(t, causes, "the first attempt's cancellation"); !errors.Is(cause, ErrJobNotRunning) {
		t.Fatalf("first attempt's cause = %v, want ErrJobNotRunning", cause)
	}
	recv(t, secondStarted, "the second attempt")
	close(releaseFirst)
	recv(t, firstReturned, "the first attempt to return")
	eventually(t, "the first attempt's outcome to be dropped", func() (bool, error) {
		return q.pilot.dropped.Load() == 1 && !q.pilot.isSuperseded(id, 1), nil
	})
	job, err := q.River().JobGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != rivertype.JobStateRunning || job.Attempt != 2 || len(job.Errors) != 1 {
		t.Fatalf("after the late return: %s at attempt %d with %d errors; want running at attempt 2 with the rescue's error",
			job.State, job.Attempt, len(job.Errors))
	}
	if bytes.Contains(job.Metadata, []byte(metadataSuperseded)) {
		t.Errorf("metadata %s carries the superseded tag", job.Metadata)
	}
	close(releaseSecond)
	job = waitState(t, q, id, rivertype.JobStateRetryable, rivertype.JobStateAvailable)
	if job.Attempt != 2 || len(job.Errors) != 2 || job.Errors[1].Error != "second attempt's own error" {
		t.Errorf("after the second attempt: attempt %d, errors %+v; want its own error recorded", job.Attempt, job.Errors)
	}
}

// TestSupersededWhileCutOff: an attempt whose process is cut off from
// the database goes unconfirmed, its job is rescued by another process and
// taken by a second attempt there, and the first attempt returns while
// still cut off. Once the link is back, the first attempt's outcome must
// not land on the second attempt: River's completer would write it, since
// the job is running, and the job would complete under the second
// attempt's feet. When the link is back at once, the returning attempt's
// check finds it superseded; when it is back only after the check gave up
// (5 s), the pilot's fence drops the outcome River's completer still
// holds.
func TestSupersededWhileCutOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after time.Duration // from the first attempt's return to the link's return
	}{
		{"the check finds it superseded", 0},
		{"the pilot's fence drops it", clearTimeout + 500*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			supersededWhileCutOff(t, tc.after)
		})
	}
}

func supersededWhileCutOff(t *testing.T, after time.Duration) {
	ctx := context.Background()
	u := testdb.URL(t)
	cutPool, link := testdb.LinkedPool(t, u)
	pool := testdb.Pool(t, u)

	firstStarted := make(chan struct{})
	releaseFirst := make(chan struct{})
	firstReturned := make(chan struct{})
	secondStarted := make(chan struct{})
	releaseSecond := make(chan struct{})
	heartbeats := map[string]time.Duration{"supersede": 100 * time.Millisecond}

	// The process that runs the first attempt: no maintenance, so that
	// the rescue is the other process's.
	cutWorkers := river.NewWorkers()
	river.AddWorker(cutWorkers, river.WorkFunc(func(ctx context.Context, job *river.Job[supersedeArgs]) error {
		defer close(firstReturned)
		close(firstStarted)
		<-releaseFirst // no heartbeat, no look at ctx: its code just ends
		return nil
	}))
	cut := startQueue(t, cutPool, &Config{
		Workers:             cutWorkers,
		Heartbeats:          heartbeats,
		MaintenanceDisabled: true,
	})
	res, err := cut.Insert(ctx, supersedeArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	recv(t, firstStarted, "the first attempt")
	link.Cut()

	// The process that rescues the job and runs the second attempt.
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[supersedeArgs]) error {
		if job.Attempt != 2 {
			return fmt.Errorf("attempt %d reached the second process", job.Attempt)
		}
		close(secondStarted)
		for {
			select {
			case <-releaseSecond:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
				if err := Heartbeat(ctx); err != nil {
					return err
				}
			}
		}
	}))
	startQueue(t, pool, &Config{
		Workers:                workers,
		Heartbeats:             heartbeats,
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
		RescueRetryDelay:       time.Millisecond,
	})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(releaseSecond) }) }
	t.Cleanup(release) // before the Queue stops, should the test fail first
	recv(t, secondStarted, "the second attempt, after the rescue")

	close(releaseFirst)
	recv(t, firstReturned, "the first attempt to return")
	time.Sleep(after)
	link.Restore()
	dropped := func() int64 { return cut.pilot.dropped.Load() + cut.pilot.fenceDropped.Load() }
	eventually(t, "the first attempt's outcome to be dropped or written", func() (bool, error) {
		if dropped() > 0 {
			return true, nil
		}
		var state string
		err := pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state)
		return state != string(rivertype.JobStateRunning), err
	})
	job, err := cut.River().JobGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != rivertype.JobStateRunning || job.Attempt != 2 {
		t.Fatalf("after the cut-off attempt returned: %s at attempt %d; want running at attempt 2", job.State, job.Attempt)
	}
	if got := dropped(); got != 1 {
		t.Errorf("the cut-off process dropped %d outcomes, want 1", got)
	}
	if after > clearTimeout && cut.pilot.fenceDropped.Load() != 1 {
		t.Errorf("the pilot's fence dropped %d outcomes, want 1", cut.pilot.fenceDropped.Load())
	}

	release()
	job = waitState(t, cut, id, rivertype.JobStateCompleted)
	if job.Attempt != 2 || len(job.Errors) != 1 {
		t.Errorf("completed at attempt %d with errors %+v; want attempt 2 with the rescue's error only", job.Attempt, job.Errors)
	}
}

type claimArgs struct{}

func (claimArgs) Kind() string { return "claim" }

// TestSupersededByReturnedError: a worker that returns an error wrapping
// ErrJobNotRunning after its job was taken by another attempt leaves that
// attempt alone; one that says so wrongly, while it still owns its job,
// has its error recorded.
func TestSupersededByReturnedError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	started := make(chan int, 2)
	release := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[claimArgs]) error {
		started <- job.Attempt
		<-release[job.Attempt]
		return fmt.Errorf("turn's fence failed: %w", ErrJobNotRunning)
	}))
	pool := testdb.DB(t)
	q := startQueue(t, pool, &Config{Workers: workers})
	res, err := q.Insert(ctx, claimArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 5}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	if a := recv(t, started, "attempt 1"); a != 1 {
		t.Fatalf("first attempt is %d", a)
	}
	// Someone else (a rescuer) takes the job back while attempt 1 runs.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if a := recv(t, started, "attempt 2"); a != 2 {
		t.Fatalf("second attempt is %d", a)
	}
	close(release[1])
	eventually(t, "attempt 1's outcome to be dropped", func() (bool, error) {
		return q.pilot.dropped.Load() == 1 && !q.pilot.isSuperseded(id, 1), nil
	})
	job, err := q.River().JobGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != rivertype.JobStateRunning || job.Attempt != 2 || len(job.Errors) != 0 {
		t.Fatalf("after attempt 1 returned: %s at attempt %d with %+v; want running at attempt 2, no errors", job.State, job.Attempt, job.Errors)
	}
	// Attempt 2 still owns its job: its claim is wrong, its error recorded.
	close(release[2])
	job = waitState(t, q, id, rivertype.JobStateRetryable, rivertype.JobStateAvailable)
	if job.Attempt != 2 || len(job.Errors) != 1 || !strings.Contains(job.Errors[0].Error, "fence failed") {
		t.Errorf("after attempt 2 returned: attempt %d, errors %+v; want its error recorded", job.Attempt, job.Errors)
	}
}

type snoozeDieArgs struct{}

func (snoozeDieArgs) Kind() string { return "snooze_die" }

// TestRescueAfterSnooze: a job heartbeats, snoozes, is fetched again with
// the same attempt number, and then goes silent (its process "died"). The
// rescuer judges the new execution from its start, not by the leftover
// progress row of the one before the snooze, and rescues it.
func TestRescueAfterSnooze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var runs atomic.Int32
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[snoozeDieArgs]) error {
		switch runs.Add(1) {
		case 1:
			if err := Heartbeat(ctx); err != nil {
				return err
			}
			return river.JobSnooze(time.Millisecond)
		case 2:
			<-ctx.Done() // silent until rescued
			return ctx.Err()
		}
		return nil
	}))
	q := startQueue(t, testdb.DB(t), &Config{
		Workers:                workers,
		Heartbeats:             map[string]time.Duration{"snooze_die": 300 * time.Millisecond},
		HeartbeatMisses:        2,
		HeartbeatCheckInterval: 20 * time.Millisecond,
		RescueRetryDelay:       time.Millisecond,
	})
	res, err := q.Insert(ctx, snoozeDieArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if runs.Load() != 3 || job.Attempt != 2 || len(job.Errors) != 1 ||
		job.Errors[0].Attempt != 1 || !strings.Contains(job.Errors[0].Error, "heartbeat lost") {
		t.Errorf("job ran %d times, completed at attempt %d with errors %+v; want 3 runs, attempt 2, attempt 1 rescued",
			runs.Load(), job.Attempt, job.Errors)
	}
}

// TestRescueRetryDelay: a rescued job is available again RescueRetryDelay
// after its rescue, on the database clock, whatever the retry policy; a
// short delay runs it again at once after that.
func TestRescueRetryDelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, delay := range []time.Duration{time.Hour, 300 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			workers := stallOnFirstAttempt()
			q := startQueue(t, testdb.DB(t), &Config{
				Workers:                workers,
				Heartbeats:             map[string]time.Duration{"hb_stall": 300 * time.Millisecond},
				HeartbeatMisses:        2,
				HeartbeatCheckInterval: 20 * time.Millisecond,
				RescueRetryDelay:       delay,
				RetryPolicy:            Backoff{Strategy: Fixed, Base: 10 * time.Hour},
			})
			res, err := q.Insert(ctx, stallArgs{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var job *rivertype.JobRow
			eventually(t, "the rescue", func() (bool, error) {
				var err error
				job, err = q.River().JobGet(ctx, res.Job.ID)
				return err == nil && len(job.Errors) > 0, err
			})
			rescuedAt := job.Errors[0].At
			if delay > schedulerInterval {
				if job.State != rivertype.JobStateRetryable || !job.ScheduledAt.Equal(rescuedAt.Add(delay)) {
					t.Errorf("rescued job: %s, scheduled at %s; want retryable at the rescue (%s) + %s", job.State, job.ScheduledAt, rescuedAt, delay)
				}
				return
			}
			job = waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
			if !job.ScheduledAt.Equal(rescuedAt.Add(delay)) || job.AttemptedAt.Before(job.ScheduledAt) {
				t.Errorf("attempt 2 scheduled at %s, started at %s; want scheduled at the rescue (%s) + %s, started no earlier",
					job.ScheduledAt, job.AttemptedAt, rescuedAt, delay)
			}
		})
	}
}

// logBuffer is a slog handler's output, safe for concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type selfCompleteArgs struct{}

func (selfCompleteArgs) Kind() string { return "self_complete" }

// TestWatchQuietAfterJobCompleteTx: a worker that completes its own job
// with river.JobCompleteTx (through braid's driver) and keeps running for
// a while is neither cancelled nor reported as having lost its job.
func TestWatchQuietAfterJobCompleteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const interval = 40 * time.Millisecond
	pool := testdb.DB(t)
	logs := &logBuffer{}
	results := make(chan error, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[selfCompleteArgs]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			results <- fmt.Errorf("JobCompleteTx: %w", err)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		// Run on for many watch periods (a quarter interval each).
		time.Sleep(4 * interval)
		results <- context.Cause(ctx)
		return nil
	}))
	q := startQueue(t, pool, &Config{
		Workers:    workers,
		Heartbeats: map[string]time.Duration{"self_complete": interval},
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	res, err := q.Insert(ctx, selfCompleteArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := recv(t, results, "the worker"); err != nil {
		t.Errorf("worker's context after completing its own job: %v; want not cancelled", err)
	}
	job := waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	if job.Attempt != 1 || len(job.Errors) != 0 {
		t.Errorf("job: attempt %d, errors %+v; want completed at attempt 1", job.Attempt, job.Errors)
	}
	if strings.Contains(logs.String(), "lost its job") {
		t.Errorf("logs warn of a lost job:\n%s", logs.String())
	}
}

type beatArgs struct {
	Beat bool `json:"beat"`
}

func (beatArgs) Kind() string { return "beat" }

// TestWatchSkipsWhileHeartbeating: the watch does not poll the job row
// while the attempt's heartbeats (which check the same) are recent, and
// does poll an attempt that does not heartbeat.
func TestWatchSkipsWhileHeartbeating(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const interval = 400 * time.Millisecond
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[beatArgs]) error {
		for end := time.Now().Add(3 * interval); time.Now().Before(end); {
			if job.Args.Beat {
				if err := Heartbeat(ctx); err != nil {
					return err
				}
			}
			time.Sleep(interval / 40)
		}
		return nil
	}))
	for _, beat := range []bool{true, false} {
		q := startQueue(t, testdb.DB(t), &Config{
			Workers:    workers,
			Heartbeats: map[string]time.Duration{"beat": interval},
		})
		res, err := q.Insert(ctx, beatArgs{Beat: beat}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
		polls := q.watchPolls.Load()
		if beat && polls > 2 {
			t.Errorf("the watch polled %d times beside heartbeats; want (nearly) none", polls)
		}
		if !beat && polls < 4 {
			t.Errorf("the watch polled %d times an attempt that does not heartbeat; want about 4 per interval", polls)
		}
	}
}

// TestRescuerWaitsOutAnOutageOfItsOwn: the database is out of reach of
// every process for longer than an attempt's HeartbeatMisses intervals,
// with no restart of the server (a network outage, or a failover to a
// server that started long ago). Once the database is back, the rescuer
// must give the attempt time to heartbeat again rather than take its job
// at its first look: the rescuer that held the maintenance lease
// throughout, and another process that takes the lease because the
// outage outlasted its TTL.
func TestRescuerWaitsOutAnOutageOfItsOwn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		handover bool
	}{{"the same rescuer", false}, {"a new holder of the lease", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outageOfEveryProcess(t, tc.handover)
		})
	}
}

func outageOfEveryProcess(t *testing.T, handover bool) {
	ctx := context.Background()
	u := testdb.URL(t)
	workerPool, workerLink := testdb.LinkedPool(t, u)
	rescuerPool, rescuerLink := testdb.LinkedPool(t, u)

	beats := make(chan struct{}, 1)
	release := make(chan struct{})
	var attempts atomic.Int32
	work := river.WorkFunc(func(ctx context.Context, job *river.Job[supersedeArgs]) error {
		attempts.Add(1)
		for {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(150 * time.Millisecond):
			}
			if Heartbeat(ctx) == nil {
				select {
				case beats <- struct{}{}:
				default:
				}
			}
		}
	})
	heartbeats := map[string]time.Duration{"supersede": 300 * time.Millisecond}
	workers := river.NewWorkers()
	river.AddWorker(workers, work)
	q := startQueue(t, workerPool, &Config{Workers: workers, Heartbeats: heartbeats, MaintenanceDisabled: true})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	res, err := q.Insert(ctx, supersedeArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, beats, "a heartbeat")
	// A rescuer, and for a handover a second one that waits for the
	// lease; their leases expire within a second.
	rescuer := func(name string, pool *pgxpool.Pool) {
		lm, err := leases.New(pool, &leases.Config{Holder: name, TTL: time.Second, Heartbeat: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		rescuerWorkers := river.NewWorkers()
		river.AddWorker(rescuerWorkers, work)
		startQueue(t, pool, &Config{
			Workers:                rescuerWorkers,
			Heartbeats:             heartbeats,
			HeartbeatMisses:        2,
			HeartbeatCheckInterval: 10 * time.Millisecond,
			RescueRetryDelay:       time.Millisecond,
			Leases:                 lm,
		})
	}
	holder := func() string {
		var h string
		eventually(t, "a rescuer to hold the maintenance lease", func() (bool, error) {
			err := workerPool.QueryRow(ctx, `SELECT holder FROM braid_leases WHERE name = $1 AND expires_at > now()`, MaintenanceLease).Scan(&h)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			return err == nil, err
		})
		return h
	}
	rescuer("first", rescuerPool)
	if h := holder(); h != "first" {
		t.Fatalf("the maintenance lease is held by %q, want the first rescuer", h)
	}
	links := []*testdb.Link{workerLink, rescuerLink}
	rescuerCheck := testdb.Pool(t, u) // the test's own view, never cut
	if handover {
		standbyPool, standbyLink := testdb.LinkedPool(t, u)
		rescuer("standby", standbyPool)
		links = append(links, standbyLink)
	}

	for _, l := range links {
		l.Cut()
	}
	// More than 2 intervals of 300 ms, and than the lease's TTL of 1 s.
	time.Sleep(2 * time.Second)
	if handover {
		// The standby is back first and takes the lease, and looks
		// for silent attempts a while before the worker is back.
		links[2].Restore()
		eventually(t, "the standby to take the lease", func() (bool, error) {
			var h string
			err := rescuerCheck.QueryRow(ctx, `SELECT holder FROM braid_leases WHERE name = $1 AND expires_at > now()`, MaintenanceLease).Scan(&h)
			return err == nil && h == "standby", nil
		})
		time.Sleep(200 * time.Millisecond) // 20 looks
		workerLink.Restore()
		rescuerLink.Restore()
	} else {
		rescuerLink.Restore()
		workerLink.Restore()
	}
	// The attempt heartbeats again; give the rescuer many looks meanwhile.
	for range 3 {
		recv(t, beats, "a heartbeat after the outage")
	}
	releaseOnce.Do(func() { close(release) })
	job := waitState(t, q, res.Job.ID, rivertype.JobStateCompleted, rivertype.JobStateAvailable, rivertype.JobStateRetryable)
	if job.State != rivertype.JobStateCompleted || job.Attempt != 1 || len(job.Errors) != 0 || attempts.Load() != 1 {
		t.Fatalf("after the outage: %s at attempt %d with errors %+v, %d attempts started; want completed at the first, with none",
			job.State, job.Attempt, job.Errors, attempts.Load())
	}
}
