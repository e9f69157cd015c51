package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/uniquestates"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

type claimedArgs struct{}

func (claimedArgs) Kind() string { return "claimed" }

type unclaimedArgs struct{}

func (unclaimedArgs) Kind() string { return "unclaimed" }

// claimQueue is a Queue, not started, that works "claimed" jobs (with a
// declared heartbeat, so claimable) and "unclaimed" ones (without).
func claimQueue(t *testing.T) *Queue {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[claimedArgs]) error { return nil }))
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[unclaimedArgs]) error { return nil }))
	return newQueue(t, testdb.DB(t), &Config{Workers: workers, Heartbeats: map[string]time.Duration{"claimed": time.Second}})
}

func claimAvailable(t *testing.T, q *Queue, n int) []*rivertype.JobRow {
	t.Helper()
	var jobs []*rivertype.JobRow
	var txStart time.Time
	err := pgx.BeginFunc(context.Background(), q.pool, func(tx pgx.Tx) error {
		// The claim comes well after the transaction's start: attempted_at
		// must be the claim's moment, as River's fetch records it.
		if err := tx.QueryRow(context.Background(), `SELECT now(), pg_sleep(0.05)::text`).Scan(&txStart, new(string)); err != nil {
			return err
		}
		var err error
		jobs, err = q.ClaimAvailableTx(context.Background(), tx, river.QueueDefault, n, []string{"claimed", "unclaimed"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.AttemptedAt == nil || j.AttemptedAt.Sub(txStart) < 50*time.Millisecond {
			t.Fatalf("job %d attempted at %v, the claiming transaction began at %v; want the moment of the claim", j.ID, j.AttemptedAt, txStart)
		}
	}
	return jobs
}

// ClaimAvailableTx takes the queue's jobs in River's order and claims only
// claimable kinds: a job of another kind ahead of them is left for River's
// fetch, so a slot never jumps the queue's priorities.
func TestClaimAvailableKeepsPriorities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	first, err := q.Insert(ctx, unclaimedArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Priority: 1}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := q.Insert(ctx, claimedArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Priority: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if jobs := claimAvailable(t, q, 1); len(jobs) != 0 {
		t.Fatalf("claimed %d jobs past a job of another kind with a higher priority", len(jobs))
	}
	jobs := claimAvailable(t, q, 2)
	if len(jobs) != 1 || jobs[0].ID != second.Job.ID || jobs[0].Attempt != 1 || jobs[0].AttemptedAt == nil ||
		len(jobs[0].AttemptedBy) != 1 || jobs[0].AttemptedBy[0] != q.client.ID() {
		t.Fatalf("claimed %+v; want job %d at attempt 1, attempted by this client", jobs, second.Job.ID)
	}
	got, err := q.River().JobGet(ctx, first.Job.ID)
	if err != nil || got.State != rivertype.JobStateAvailable {
		t.Fatalf("the other kind's job is %v (%v); want it left available", got.State, err)
	}
	if jobs := claimAvailable(t, q, 5); len(jobs) != 0 {
		t.Fatalf("claimed the running job again: %+v", jobs)
	}
}

// WorkClaimed records a claimed job's outcome as River's executor would,
// fenced on the attempt.
func TestWorkClaimedRecordsOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	claimOne := func(t *testing.T, maxAttempts int) *rivertype.JobRow {
		t.Helper()
		res, err := q.Insert(ctx, claimedArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: maxAttempts}})
		if err != nil {
			t.Fatal(err)
		}
		var jobs []*rivertype.JobRow
		err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
			jobs, err = q.ClaimTx(ctx, tx, []int64{res.Job.ID})
			return err
		})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claiming job %d: %v, %d claimed", res.Job.ID, err, len(jobs))
		}
		return jobs[0]
	}
	work := func(t *testing.T, job *rivertype.JobRow, w ClaimedWork) *rivertype.JobRow {
		t.Helper()
		_ = q.WorkClaimed(ctx, job, w)
		got, err := q.River().JobGet(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	t.Run("completed", func(t *testing.T) {
		got := work(t, claimOne(t, 3), ClaimedWork{Work: func(context.Context) error { return nil }})
		if got.State != rivertype.JobStateCompleted || got.FinalizedAt == nil {
			t.Fatalf("%s; want completed", got.State)
		}
	})
	t.Run("error retried", func(t *testing.T) {
		retryAt := time.Now().Add(time.Hour)
		got := work(t, claimOne(t, 3), ClaimedWork{
			Work:      func(context.Context) error { return errors.New("boom\x00") },
			NextRetry: func(*rivertype.JobRow) time.Time { return retryAt },
		})
		if got.State != rivertype.JobStateRetryable || len(got.Errors) != 1 || got.Errors[0].Error != "boom" || got.Errors[0].Attempt != 1 ||
			got.ScheduledAt.Sub(retryAt).Abs() > time.Second {
			t.Fatalf("%s, errors %+v, scheduled %s; want retryable at the worker's time with the sanitised error", got.State, got.Errors, got.ScheduledAt)
		}
	})
	t.Run("last attempt discarded", func(t *testing.T) {
		got := work(t, claimOne(t, 1), ClaimedWork{Work: func(context.Context) error { panic("kaput") }})
		if got.State != rivertype.JobStateDiscarded || len(got.Errors) != 1 || got.Errors[0].Error != "kaput" || got.Errors[0].Trace == "" {
			t.Fatalf("%s, errors %+v; want discarded with the panic and its stack", got.State, got.Errors)
		}
	})
	t.Run("snoozed", func(t *testing.T) {
		got := work(t, claimOne(t, 3), ClaimedWork{Work: func(context.Context) error { return river.JobSnooze(time.Minute) }})
		if got.State != rivertype.JobStateScheduled || got.Attempt != 0 || !strings.Contains(string(got.Metadata), `"snoozes": 1`) {
			t.Fatalf("%s at attempt %d, metadata %s; want scheduled, the attempt given back, one snooze", got.State, got.Attempt, got.Metadata)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		got := work(t, claimOne(t, 3), ClaimedWork{Work: func(context.Context) error { return river.JobCancel(errors.New("no")) }})
		if got.State != rivertype.JobStateCancelled {
			t.Fatalf("%s; want cancelled", got.State)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		got := work(t, claimOne(t, 3), ClaimedWork{Timeout: 50 * time.Millisecond, Work: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}})
		if len(got.Errors) != 1 || !strings.Contains(got.Errors[0].Error, "deadline") {
			t.Fatalf("errors %+v; want the timeout recorded", got.Errors)
		}
	})
	t.Run("superseded records nothing", func(t *testing.T) {
		job := claimOne(t, 3)
		got := work(t, job, ClaimedWork{Work: func(context.Context) error {
			// A rescuer takes the job back, and another attempt claims it.
			if _, err := q.pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 2, attempted_at = now() WHERE id = $1`, job.ID); err != nil {
				return err
			}
			return errors.New("late failure")
		}})
		if got.State != rivertype.JobStateRunning || got.Attempt != 2 || len(got.Errors) != 0 {
			t.Fatalf("%s at attempt %d, errors %+v; want the later attempt untouched", got.State, got.Attempt, got.Errors)
		}
	})
}

// CompleteTx completes a job only while it runs the attempt given: an
// attempt that lost its job (rescued, then claimed again) completes
// nothing, and the attempt that holds it completes it.
func TestCompleteTxFencesOnTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	res, err := q.Insert(ctx, claimedArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	claim := func() *rivertype.JobRow {
		t.Helper()
		var jobs []*rivertype.JobRow
		err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
			jobs, err = q.ClaimTx(ctx, tx, []int64{res.Job.ID})
			return err
		})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claiming job %d: %v, %d claimed", res.Job.ID, err, len(jobs))
		}
		return jobs[0]
	}
	complete := func(job *rivertype.JobRow) rivertype.JobState {
		t.Helper()
		if err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error { return q.CompleteTx(ctx, tx, []*rivertype.JobRow{job}) }); err != nil {
			t.Fatal(err)
		}
		got, err := q.River().JobGet(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	lost := claim()
	// The rescuer gives the job back, and another attempt takes it.
	if _, err := q.pool.Exec(ctx, `UPDATE river_job SET state = 'available' WHERE id = $1`, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	held := claim()
	if held.Attempt != 2 {
		t.Fatalf("the second claim is attempt %d, want 2", held.Attempt)
	}
	if state := complete(lost); state != rivertype.JobStateRunning {
		t.Fatalf("the lost attempt's completion left the job %s; want it still running", state)
	}
	if state := complete(held); state != rivertype.JobStateCompleted {
		t.Fatalf("the holding attempt's completion left the job %s; want it completed", state)
	}
}

// QueueClaim and QueueClaimAvailable share one round trip: the jobs the
// first claims are running when the second looks, so no job is claimed
// twice, and both callbacks get their jobs once the batch is sent.
func TestQueuedClaimsShareARoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	var ids []int64
	for range 3 {
		res, err := q.Insert(ctx, claimedArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Job.ID)
	}
	var byID, available []*rivertype.JobRow
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if !q.QueueClaim(b, ids[2:], func(jobs []*rivertype.JobRow) { byID = jobs }) {
			t.Fatal("QueueClaim queued nothing")
		}
		if !q.QueueClaimAvailable(b, river.QueueDefault, 5, []string{"claimed"}, func(jobs []*rivertype.JobRow) { available = jobs }) {
			t.Fatal("QueueClaimAvailable queued nothing")
		}
		if q.QueueClaim(b, nil, func([]*rivertype.JobRow) {}) || q.QueueClaimAvailable(b, river.QueueDefault, 0, []string{"claimed"}, func([]*rivertype.JobRow) {}) {
			t.Fatal("a claim of nothing queued a statement")
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(byID) != 1 || byID[0].ID != ids[2] {
		t.Fatalf("claimed by ID %+v; want job %d", byID, ids[2])
	}
	if len(available) != 2 || available[0].ID != ids[0] || available[1].ID != ids[1] {
		t.Fatalf("claimed from the queue %+v; want jobs %d and %d, in order", available, ids[0], ids[1])
	}
}

// A job inserted pending, which River's fetch never takes, is claimed by
// ID like an available one; one whose kind is not claimable is made
// available instead, so that no job the caller meant to claim stays
// pending.
func TestClaimTakesPendingJobsAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	if !q.Claims("claimed") || q.Claims("unclaimed") {
		t.Fatalf("Claims: claimed %t, unclaimed %t; want true, false", q.Claims("claimed"), q.Claims("unclaimed"))
	}
	var claimable, other int64
	var jobs []*rivertype.JobRow
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		a, err := q.River().InsertTx(ctx, tx, claimedArgs{}, &river.InsertOpts{Pending: true})
		if err != nil {
			return err
		}
		b, err := q.River().InsertTx(ctx, tx, unclaimedArgs{}, &river.InsertOpts{Pending: true})
		if err != nil {
			return err
		}
		claimable, other = a.Job.ID, b.Job.ID
		jobs, err = q.ClaimTx(ctx, tx, []int64{claimable, other})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != claimable || jobs[0].Attempt != 1 {
		t.Fatalf("claimed %+v; want the pending job %d at attempt 1", jobs, claimable)
	}
	for id, want := range map[int64]rivertype.JobState{claimable: rivertype.JobStateRunning, other: rivertype.JobStateAvailable} {
		got, err := q.River().JobGet(ctx, id)
		if err != nil || got.State != want {
			t.Fatalf("job %d is %v (%v); want %s", id, got.State, err, want)
		}
	}
}

// A Queue claims only jobs of the queues it works, as River's fetch takes
// only those: a pending job of another queue is made available for the
// processes that work that queue, and ClaimAvailableTx claims nothing
// from a queue it does not work.
func TestClaimsKeepToTheQueuesWorked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	if !q.Works(river.QueueDefault) || q.Works("elsewhere") {
		t.Fatalf("Works: default %t, elsewhere %t; want true, false", q.Works(river.QueueDefault), q.Works("elsewhere"))
	}
	var here, elsewhere int64
	var jobs []*rivertype.JobRow
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		a, err := q.River().InsertTx(ctx, tx, claimedArgs{}, &river.InsertOpts{Pending: true})
		if err != nil {
			return err
		}
		b, err := q.River().InsertTx(ctx, tx, claimedArgs{}, &river.InsertOpts{Pending: true, Queue: "elsewhere"})
		if err != nil {
			return err
		}
		here, elsewhere = a.Job.ID, b.Job.ID
		jobs, err = q.ClaimTx(ctx, tx, []int64{here, elsewhere})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != here {
		t.Fatalf("claimed %+v; want only job %d, of the queue worked here", jobs, here)
	}
	got, err := q.River().JobGet(ctx, elsewhere)
	if err != nil || got.State != rivertype.JobStateAvailable {
		t.Fatalf("the other queue's job is %v (%v); want it made available", got.State, err)
	}
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		var err error
		jobs, err = q.ClaimAvailableTx(ctx, tx, "elsewhere", 5, []string{"claimed"})
		return err
	})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("ClaimAvailableTx on a queue not worked here: %+v, %v; want nothing", jobs, err)
	}
}

// QueueInsertClaimed inserts jobs as River's insert and a claim in the same
// transaction would leave them: running on their first attempt, attempted
// at the moment of the statement by this client. A job whose unique key a
// live job holds is left out, and a job this Queue may not claim is
// refused before anything is queued.
func TestInsertClaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	live := uniquestates.UniqueStatesToBitmask([]rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	})
	held, err := q.River().Insert(ctx, claimedArgs{}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
	if err != nil {
		t.Fatal(err)
	}
	job := func(key string) ClaimedInsert {
		return ClaimedInsert{Kind: "claimed", EncodedArgs: []byte(`{"n":1}`), Queue: river.QueueDefault, Priority: 2, MaxAttempts: 7,
			Tags: []string{"alpha", "beta-2"}, UniqueKey: []byte(key), UniqueStates: live}
	}
	var jobs []*rivertype.JobRow
	var txStart time.Time
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now(), pg_sleep(0.05)::text`).Scan(&txStart, new(string)); err != nil {
			return err
		}
		b := &pgx.Batch{}
		if err := q.QueueInsertClaimed(b, []ClaimedInsert{job("first"), job(string(held.Job.UniqueKey))}, func(j []*rivertype.JobRow) { jobs = j }); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Fatalf("inserted %d jobs; want 1: the second one's key is held by job %d", len(jobs), held.Job.ID)
	}
	got, err := q.River().JobGet(ctx, jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{rivertype.JobStateRunning, 1, []string{q.client.ID()}, 2, 7, []string{"alpha", "beta-2"}, "first", river.QueueDefault, "claimed", `{"n": 1}`}
	have := []any{got.State, got.Attempt, got.AttemptedBy, got.Priority, got.MaxAttempts, got.Tags, string(got.UniqueKey), got.Queue, got.Kind, string(got.EncodedArgs)}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Fatalf("the inserted job (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(uniquestates.UniqueBitmaskToStates(live), got.UniqueStates); diff != "" {
		t.Fatalf("the inserted job's unique states, as River reads them (-want +got):\n%s", diff)
	}
	if got.AttemptedAt == nil || got.AttemptedAt.Sub(txStart) < 50*time.Millisecond {
		t.Fatalf("attempted at %v with the transaction begun at %v; want the statement's moment", got.AttemptedAt, txStart)
	}
	if jobs[0].ID != got.ID || jobs[0].Attempt != 1 || jobs[0].State != rivertype.JobStateRunning {
		t.Fatalf("the job handed back: %+v", jobs[0])
	}
	// While it runs, its key stays taken.
	var again []*rivertype.JobRow
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if err := q.QueueInsertClaimed(b, []ClaimedInsert{job("first")}, func(j []*rivertype.JobRow) { again = j }); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil || len(again) != 0 {
		t.Fatalf("a second job with a running job's key: %+v, %v; want none inserted", again, err)
	}

	for name, bad := range map[string]ClaimedInsert{
		"unclaimable kind":  {Kind: "unclaimed", Queue: river.QueueDefault, Priority: 1, MaxAttempts: 1, EncodedArgs: []byte(`{}`)},
		"queue not worked":  {Kind: "claimed", Queue: "elsewhere", Priority: 1, MaxAttempts: 1, EncodedArgs: []byte(`{}`)},
		"no attempts":       {Kind: "claimed", Queue: river.QueueDefault, Priority: 1, MaxAttempts: 0, EncodedArgs: []byte(`{}`)},
		"priority too high": {Kind: "claimed", Queue: river.QueueDefault, Priority: 5, MaxAttempts: 1, EncodedArgs: []byte(`{}`)},
		"tag with a comma":  {Kind: "claimed", Queue: river.QueueDefault, Priority: 1, MaxAttempts: 1, EncodedArgs: []byte(`{}`), Tags: []string{"a,b"}},
		"tag too long":      {Kind: "claimed", Queue: river.QueueDefault, Priority: 1, MaxAttempts: 1, EncodedArgs: []byte(`{}`), Tags: []string{strings.Repeat("t", 256)}},
	} {
		b := &pgx.Batch{}
		err := q.QueueInsertClaimed(b, []ClaimedInsert{job("ok"), bad}, func([]*rivertype.JobRow) {})
		if err == nil || b.Len() != 0 {
			t.Errorf("%s: error %v with %d statements queued; want an error and nothing queued", name, err, b.Len())
		}
	}
}

// No claim takes a job of a queue that River has paused, as River's fetch
// takes none: ClaimAvailableTx and ClaimTx claim nothing from it (a
// pending job is made available), and QueueInsertClaimed inserts its jobs
// available, unclaimed. Once the queue is resumed, they are claimed.
func TestClaimsTakeNothingFromAPausedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claimQueue(t)
	if _, err := q.pool.Exec(ctx, `INSERT INTO river_queue (name, metadata, created_at, updated_at) VALUES ($1, '{}', now(), now())`, river.QueueDefault); err != nil {
		t.Fatal(err)
	}
	if err := q.River().QueuePause(ctx, river.QueueDefault, nil); err != nil {
		t.Fatal(err)
	}
	available, err := q.River().Insert(ctx, claimedArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var claimed, inserted []*rivertype.JobRow
	var pending int64
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		res, err := q.River().InsertTx(ctx, tx, claimedArgs{}, &river.InsertOpts{Pending: true})
		if err != nil {
			return err
		}
		pending = res.Job.ID
		byID, err := q.ClaimTx(ctx, tx, []int64{available.Job.ID, pending})
		if err != nil {
			return err
		}
		next, err := q.ClaimAvailableTx(ctx, tx, river.QueueDefault, 5, []string{"claimed"})
		if err != nil {
			return err
		}
		claimed = append(byID, next...)
		b := &pgx.Batch{}
		if err := q.QueueInsertClaimed(b, []ClaimedInsert{{Kind: "claimed", EncodedArgs: []byte(`{}`), Queue: river.QueueDefault,
			Priority: 1, MaxAttempts: 3}}, func(j []*rivertype.JobRow) { inserted = j }); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 0 {
		t.Fatalf("claimed %d jobs of a paused queue; want none", len(claimed))
	}
	if len(inserted) != 1 || inserted[0].State != rivertype.JobStateAvailable {
		t.Fatalf("inserted %+v into a paused queue; want one job, available", inserted)
	}
	for _, id := range []int64{available.Job.ID, pending, inserted[0].ID} {
		got, err := q.River().JobGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != rivertype.JobStateAvailable || got.Attempt != 0 || len(got.AttemptedBy) != 0 || got.AttemptedAt != nil {
			t.Fatalf("job %d of the paused queue: state %s, attempt %d, attempted by %v at %v; want available and never attempted",
				id, got.State, got.Attempt, got.AttemptedBy, got.AttemptedAt)
		}
	}
	if err := q.River().QueueResume(ctx, river.QueueDefault, nil); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		var err error
		claimed, err = q.ClaimAvailableTx(ctx, tx, river.QueueDefault, 5, []string{"claimed"})
		return err
	})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d jobs once the queue was resumed (%v); want all 3", len(claimed), err)
	}
}
