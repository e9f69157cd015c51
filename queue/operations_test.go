package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

type blockArgs struct{}

func (blockArgs) Kind() string { return "block" }

func TestStatsJobsAndOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	running := make(chan struct{}, 1)
	causes := make(chan error, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[blockArgs]) error {
		running <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}))
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[emailArgs]) error { return nil }))
	q := startQueue(t, testdb.DB(t), &Config{Workers: workers})

	done, err := q.Insert(ctx, emailArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, done.Job.ID, rivertype.JobStateCompleted)
	later := time.Now().Add(time.Hour)
	sched, err := q.Insert(ctx, emailArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{ScheduledAt: later}})
	if err != nil {
		t.Fatal(err)
	}
	parked, err := q.Insert(ctx, emailArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Queue: "parked"}})
	if err != nil {
		t.Fatal(err)
	}
	blocked, err := q.Insert(ctx, blockArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, running, "the blocking job to run")

	stats, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantByState := zeroStates()
	wantByState[rivertype.JobStateCompleted] = 1
	wantByState[rivertype.JobStateScheduled] = 1
	wantByState[rivertype.JobStateAvailable] = 1
	wantByState[rivertype.JobStateRunning] = 1
	defaultQ, parkedQ := zeroStates(), zeroStates()
	defaultQ[rivertype.JobStateCompleted] = 1
	defaultQ[rivertype.JobStateScheduled] = 1
	defaultQ[rivertype.JobStateRunning] = 1
	parkedQ[rivertype.JobStateAvailable] = 1
	want := &Stats{Total: 4, ByState: wantByState, ByQueue: map[string]map[rivertype.JobState]int64{"default": defaultQ, "parked": parkedQ}}
	if diff := cmp.Diff(want, stats); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}

	ids := func(jobs []*rivertype.JobRow) []int64 {
		var out []int64
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	for _, tc := range []struct {
		filter JobFilter
		want   []int64
	}{
		{JobFilter{}, []int64{blocked.Job.ID, parked.Job.ID, sched.Job.ID, done.Job.ID}},
		{JobFilter{Limit: 2}, []int64{blocked.Job.ID, parked.Job.ID}},
		{JobFilter{State: rivertype.JobStateScheduled}, []int64{sched.Job.ID}},
		{JobFilter{Kind: "block"}, []int64{blocked.Job.ID}},
		{JobFilter{Queue: "parked"}, []int64{parked.Job.ID}},
		{JobFilter{Kind: "email", State: rivertype.JobStateRunning}, nil},
	} {
		jobs, err := q.Jobs(ctx, tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, ids(jobs)); diff != "" {
			t.Errorf("Jobs(%+v) (-want +got):\n%s", tc.filter, diff)
		}
	}
	if _, err := q.Jobs(ctx, JobFilter{State: "sleeping"}); err == nil || !strings.Contains(err.Error(), `"sleeping"`) {
		t.Errorf("Jobs with an unknown state = %v, want an error naming it", err)
	}

	// SetPriority: waiting and running jobs take it; finished ones refuse.
	job, err := q.SetPriority(ctx, parked.Job.ID, PriorityCritical)
	if err != nil || Priority(job.Priority) != PriorityCritical {
		t.Errorf("SetPriority = %v, %v; want critical", job, err)
	}
	if _, err := q.SetPriority(ctx, done.Job.ID, PriorityHigh); !errors.Is(err, ErrJobFinalized) || !strings.Contains(err.Error(), "completed") {
		t.Errorf("SetPriority of a completed job = %v, want ErrJobFinalized naming the state", err)
	}
	if _, err := q.SetPriority(ctx, 999_999, PriorityHigh); !errors.Is(err, rivertype.ErrNotFound) {
		t.Errorf("SetPriority of an unknown job = %v, want ErrNotFound", err)
	}
	if _, err := q.SetPriority(ctx, parked.Job.ID, 0); err == nil {
		t.Error("SetPriority to level 0 succeeded")
	}

	// Cancel: a waiting job at once, a running one through its context.
	cancelled, err := q.Cancel(ctx, sched.Job.ID, blocked.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cancelled[0].State != rivertype.JobStateCancelled {
		t.Errorf("cancelled scheduled job is %s", cancelled[0].State)
	}
	if cause := recv(t, causes, "the running job's cancellation"); !errors.Is(cause, rivertype.ErrJobCancelledRemotely) {
		t.Errorf("running job's context cause = %v, want River's remote cancel", cause)
	}
	waitState(t, q, blocked.Job.ID, rivertype.JobStateCancelled)
}
