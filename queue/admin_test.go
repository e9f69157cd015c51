package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

type pageArgs struct {
	N int `json:"n"`
}

func (pageArgs) Kind() string { return "page" }

type otherPageArgs struct{}

func (otherPageArgs) Kind() string { return "other_page" }

type holdArgs struct{}

func (holdArgs) Kind() string { return "hold" }

func jobIDs(jobs []*rivertype.JobRow) []int64 {
	out := []int64{}
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

func TestJobsPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	q := newQueue(t, pool, nil)
	var ids []int64
	for i := range 5 {
		res, err := q.Insert(ctx, pageArgs{N: i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Job.ID)
	}
	other, err := q.Insert(ctx, otherPageArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Queue: "side"}})
	if err != nil {
		t.Fatal(err)
	}
	// ids[0] finished last, ids[1] first.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() - (id - $1) * interval '1 minute' WHERE id = ANY($2)`,
		ids[0], []int64{ids[0], ids[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET finalized_at = now() + interval '1 minute' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		filter    JobPageFilter
		wantIDs   []int64
		wantTotal int64
	}{
		{"all, newest first", JobPageFilter{}, []int64{other.Job.ID, ids[4], ids[3], ids[2], ids[1], ids[0]}, 6},
		{"limit and offset", JobPageFilter{Limit: 2, Offset: 1}, []int64{ids[4], ids[3]}, 6},
		{"offset past the end", JobPageFilter{Offset: 6}, []int64{}, 6},
		{"by kind", JobPageFilter{Kind: "page", Limit: 1}, []int64{ids[4]}, 5},
		{"by queue", JobPageFilter{Queue: "side"}, []int64{other.Job.ID}, 1},
		{"by state", JobPageFilter{State: rivertype.JobStateDiscarded}, []int64{ids[1], ids[0]}, 2},
		{"by state, finalized first", JobPageFilter{State: rivertype.JobStateDiscarded, Order: JobOrderFinalized}, []int64{ids[0], ids[1]}, 2},
		{"no match", JobPageFilter{Kind: "page'; DROP TABLE river_job; --"}, []int64{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, err := q.JobsPage(ctx, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantIDs, jobIDs(page.Jobs)); diff != "" {
				t.Errorf("IDs (-want +got):\n%s", diff)
			}
			if page.Total != tc.wantTotal {
				t.Errorf("Total = %d, want %d", page.Total, tc.wantTotal)
			}
		})
	}
	for _, f := range []JobPageFilter{{Limit: -1}, {Limit: ListLimitMax + 1}, {Offset: -1}, {State: "nope"}} {
		if _, err := q.JobsPage(ctx, f); err == nil {
			t.Errorf("JobsPage(%+v): no error", f)
		}
	}
}

func TestSetState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	running := make(chan struct{}, 1)
	causes := make(chan error, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[holdArgs]) error {
		running <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}))
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[pageArgs]) error { return nil }))
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[otherPageArgs]) error { return nil }))
	q := startQueue(t, pool, &Config{Workers: workers})
	parked := &InsertOpts{InsertOpts: river.InsertOpts{Queue: "parked"}}

	insertIn := func(state rivertype.JobState) int64 {
		t.Helper()
		res, err := q.Insert(ctx, pageArgs{}, parked)
		if err != nil {
			t.Fatal(err)
		}
		if state != rivertype.JobStateAvailable {
			_, err := pool.Exec(ctx, `
				UPDATE river_job SET state = $2::river_job_state, attempt = 1, max_attempts = 1,
				       scheduled_at = CASE WHEN $2 IN ('scheduled', 'retryable') THEN now() + interval '1 hour' ELSE scheduled_at END,
				       finalized_at = CASE WHEN $2 IN ('completed', 'cancelled', 'discarded') THEN now() END
				 WHERE id = $1`, res.Job.ID, string(state))
			if err != nil {
				t.Fatal(err)
			}
		}
		return res.Job.ID
	}

	for _, tc := range []struct {
		from, to rivertype.JobState
		ok       bool
	}{
		{rivertype.JobStateAvailable, rivertype.JobStateCancelled, true},
		{rivertype.JobStatePending, rivertype.JobStateCancelled, true},
		{rivertype.JobStateScheduled, rivertype.JobStateAvailable, true},
		{rivertype.JobStateScheduled, rivertype.JobStateCancelled, true},
		{rivertype.JobStateRetryable, rivertype.JobStateAvailable, true},
		{rivertype.JobStateRetryable, rivertype.JobStateCancelled, true},
		{rivertype.JobStateCompleted, rivertype.JobStateAvailable, true},
		{rivertype.JobStateCancelled, rivertype.JobStateAvailable, true},
		{rivertype.JobStateDiscarded, rivertype.JobStateAvailable, true},
		{rivertype.JobStateAvailable, rivertype.JobStateCompleted, false},
		{rivertype.JobStateAvailable, rivertype.JobStateAvailable, false},
		{rivertype.JobStateCompleted, rivertype.JobStateDiscarded, false},
		{rivertype.JobStateDiscarded, rivertype.JobStateCancelled, false},
		{rivertype.JobStateScheduled, rivertype.JobStateRunning, false},
	} {
		t.Run(string(tc.from)+"_to_"+string(tc.to), func(t *testing.T) {
			id := insertIn(tc.from)
			job, err := q.SetState(ctx, id, tc.to)
			if !tc.ok {
				var te *TransitionError
				if !errors.As(err, &te) || !errors.Is(err, ErrTransitionNotAllowed) {
					t.Fatalf("SetState: %v, want a *TransitionError", err)
				}
				want := &TransitionError{JobID: id, From: tc.from, To: tc.to, Allowed: Transitions(tc.from)}
				if diff := cmp.Diff(want, te); diff != "" {
					t.Errorf("TransitionError (-want +got):\n%s", diff)
				}
				got, err := q.River().JobGet(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if got.State != tc.from {
					t.Errorf("a refused change moved the job to %s", got.State)
				}
				return
			}
			if err != nil {
				t.Fatalf("SetState: %v", err)
			}
			if job.State != tc.to {
				t.Errorf("state %s, want %s", job.State, tc.to)
			}
			if tc.to == rivertype.JobStateAvailable && tc.from != rivertype.JobStateScheduled && tc.from != rivertype.JobStateRetryable {
				if job.MaxAttempts != 2 || job.FinalizedAt != nil {
					t.Errorf("retried job: max attempts %d, finalized at %v; want 2 and none", job.MaxAttempts, job.FinalizedAt)
				}
			}
			if tc.to == rivertype.JobStateCancelled && job.FinalizedAt == nil {
				t.Error("cancelled job has no finalized_at")
			}
		})
	}

	// A running job is cancelled through River's remote cancel.
	hold, err := q.Insert(ctx, holdArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, running, "the holding job to run")
	if _, err := q.SetState(ctx, hold.Job.ID, rivertype.JobStateCancelled); err != nil {
		t.Fatalf("cancelling a running job: %v", err)
	}
	if cause := recv(t, causes, "the running job's context to be cancelled"); cause == nil {
		t.Error("no cause")
	}
	waitState(t, q, hold.Job.ID, rivertype.JobStateCancelled)

	// A retry that would duplicate a live unique job is refused, and the tx
	// stays usable.
	uniq := &InsertOpts{InsertOpts: river.InsertOpts{Queue: "parked", UniqueOpts: river.UniqueOpts{ByArgs: true}}}
	first, err := q.Insert(ctx, otherPageArgs{}, uniq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetState(ctx, first.Job.ID, rivertype.JobStateCancelled); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(ctx, otherPageArgs{}, uniq); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := q.SetStateTx(ctx, tx, first.Job.ID, rivertype.JobStateAvailable); !errors.Is(err, ErrUniqueConflict) {
		t.Fatalf("retrying a duplicate: %v, want ErrUniqueConflict", err)
	}
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Errorf("tx after a refused change: %v", err)
	}

	if _, err := q.SetState(ctx, 1<<40, rivertype.JobStateCancelled); !errors.Is(err, rivertype.ErrNotFound) {
		t.Errorf("unknown job: %v, want ErrNotFound", err)
	}
	if _, err := q.SetState(ctx, first.Job.ID, "bogus"); err == nil {
		t.Error("unknown state: no error")
	}
}

func TestBoost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	q := newQueue(t, pool, nil)
	res, err := q.Insert(ctx, pageArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Priority: int(PriorityLow)}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	for _, tc := range []struct {
		levels int
		want   Priority
	}{{1, PriorityNormal}, {1, PriorityHigh}, {20, PriorityCritical}, {1, PriorityCritical}} {
		job, err := q.Boost(ctx, id, tc.levels)
		if err != nil {
			t.Fatal(err)
		}
		if Priority(job.Priority) != tc.want {
			t.Errorf("after a boost of %d: %s, want %s", tc.levels, Priority(job.Priority), tc.want)
		}
	}
	if _, err := q.Boost(ctx, id, 0); err == nil {
		t.Error("a boost of 0: no error")
	}
	if _, err := q.Boost(ctx, 1<<40, 1); !errors.Is(err, rivertype.ErrNotFound) {
		t.Errorf("unknown job: %v, want ErrNotFound", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Boost(ctx, id, 1); !errors.Is(err, ErrJobFinalized) {
		t.Errorf("finished job: %v, want ErrJobFinalized", err)
	}
}

func TestJobsProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	q := newQueue(t, pool, nil)
	a, err := q.Insert(ctx, pageArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Insert(ctx, pageArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO braid_job_progress (job_id, kind, attempt, percent, message) VALUES ($1, 'page', 1, 40, 'almost')`, a.Job.ID); err != nil {
		t.Fatal(err)
	}
	got, err := q.JobsProgress(ctx, []int64{a.Job.ID, b.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[a.Job.ID] == nil || got[a.Job.ID].Percent != 40 || got[a.Job.ID].Message != "almost" {
		t.Errorf("JobsProgress = %+v", got)
	}
	one, err := q.JobProgress(ctx, a.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(one, got[a.Job.ID]); diff != "" {
		t.Errorf("JobsProgress differs from JobProgress (-one +many):\n%s", diff)
	}
}
