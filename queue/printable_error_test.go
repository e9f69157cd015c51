package queue

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

// panickyErr is an error whose Error method panics, as a typed nil
// pointer's does.
type panickyErr struct{}

func (panickyErr) Error() string { panic("Error() exploded") }

// lastErrorText is the text of the last error recorded on job id.
func lastErrorText(t *testing.T, q *Queue, id int64) string {
	t.Helper()
	job, err := q.River().JobGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Errors) == 0 {
		t.Fatalf("job %d (%s) has no error recorded", id, job.State)
	}
	return job.Errors[len(job.Errors)-1].Error
}

// WorkClaimed runs in its caller's goroutine (in the workflow engine, one
// without a recover): an attempt's error whose Error panics fails the
// attempt, with a text that says so, and never panics out. The kind is
// untraced, as braid's turn kind is, so no span reads the text first.
func TestWorkClaimedErrorWhoseErrorPanics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[claimedArgs]) error { return nil }))
	q := newQueue(t, testdb.DB(t), &Config{
		Workers:       workers,
		Heartbeats:    map[string]time.Duration{"claimed": time.Second},
		UntracedKinds: []string{"claimed"},
	})
	res, err := q.Insert(ctx, claimedArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*rivertype.JobRow
	if err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		jobs, err = q.ClaimTx(ctx, tx, []int64{res.Job.ID})
		return err
	}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %d jobs", err, len(jobs))
	}
	var pv any
	var werr error
	func() {
		defer func() { pv = recover() }()
		werr = q.WorkClaimed(ctx, jobs[0], ClaimedWork{Work: func(context.Context) error { return panickyErr{} }})
	}()
	if pv != nil {
		t.Fatalf("WorkClaimed panicked with %v; want the attempt failed and recorded", pv)
	}
	if !errors.As(werr, new(panickyErr)) {
		t.Errorf("WorkClaimed returned %v; want it to unwrap to the worker's error", werr)
	}
	job := waitState(t, q, res.Job.ID, rivertype.JobStateRetryable, rivertype.JobStateAvailable)
	if text := lastErrorText(t, q, job.ID); !strings.Contains(text, "queue.panickyErr.Error() panicked: Error() exploded") {
		t.Errorf("the recorded error is %q; want it to say that the error's Error panicked", text)
	}
}

// panickyArgs is the kind of TestAttemptErrorWhoseErrorPanics.
type panickyArgs struct{}

func (panickyArgs) Kind() string { return "panicky" }

// River's executor reads an attempt's error text outside any recover: an
// error whose Error panics, from a job of an untraced kind, would kill the
// process and leave the job running. The attempt is recorded instead, in
// a child process that the test watches die or not.
func TestAttemptErrorWhoseErrorPanics(t *testing.T) {
	if os.Getenv("BRAID_PANICKY_CHILD") == "1" {
		ctx := context.Background()
		workers := river.NewWorkers()
		river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[panickyArgs]) error { return panickyErr{} }))
		q := startQueue(t, testdb.DB(t), &Config{Workers: workers, UntracedKinds: []string{"panicky"}})
		res, err := q.Insert(ctx, panickyArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		job := waitState(t, q, res.Job.ID, rivertype.JobStateDiscarded)
		if text := lastErrorText(t, q, job.ID); !strings.Contains(text, "Error() panicked: Error() exploded") {
			t.Errorf("the recorded error is %q; want it to say that the error's Error panicked", text)
		}
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttemptErrorWhoseErrorPanics$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BRAID_PANICKY_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		s := string(out)
		if i := strings.Index(s, "panic: "); i >= 0 {
			s = s[i:min(len(s), i+1500)]
		}
		t.Fatalf("the child process failed (%v):\n%s", err, s)
	}
}
