package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// IDsMax is the most job IDs one Retry or Cancel call accepts.
const IDsMax = 10_000

// MaxAttemptsMax is the most attempts a job can have: River stores
// max_attempts as a smallint.
const MaxAttemptsMax = 32767

// ErrJobFinalized is returned (wrapped, with the job's ID and state) by
// SetPriority for a job that is completed, cancelled or discarded.
var ErrJobFinalized = errors.New("queue: job is finalized")

// finalizedError is the error of an operation that only an unfinished job
// takes: it names the job, its state and what was refused, says "queue: "
// once, and matches ErrJobFinalized.
type finalizedError struct {
	id    int64
	state string
	// refused completes "only an unfinished job …", such as "takes a new
	// priority".
	refused string
}

func (e *finalizedError) Error() string {
	return fmt.Sprintf("queue: job %d is %s; only an unfinished job %s", e.id, e.state, e.refused)
}

func (e *finalizedError) Unwrap() error { return ErrJobFinalized }

// JobFilter selects jobs for Jobs. Empty fields match everything.
type JobFilter struct {
	// State keeps only jobs in this state.
	State rivertype.JobState
	// Kind keeps only jobs of this kind.
	Kind string
	// Queue keeps only jobs of this queue.
	Queue string
	// Limit is the most jobs returned, newest first. Defaults to
	// ListLimitDefault; at most ListLimitMax.
	Limit int
}

// Jobs lists jobs matching filter, newest (highest ID) first.
func (q *Queue) Jobs(ctx context.Context, filter JobFilter) ([]*rivertype.JobRow, error) {
	limit, err := listLimit(filter.Limit)
	if err != nil {
		return nil, err
	}
	params := river.NewJobListParams().OrderBy(river.JobListOrderByID, river.SortOrderDesc).First(limit)
	if filter.State != "" {
		if !slices.Contains(rivertype.JobStates(), filter.State) {
			return nil, fmt.Errorf("queue: unknown job state %q; states are %v", filter.State, rivertype.JobStates())
		}
		params = params.States(filter.State)
	}
	if filter.Kind != "" {
		params = params.Kinds(filter.Kind)
	}
	if filter.Queue != "" {
		params = params.Queues(filter.Queue)
	}
	res, err := q.client.JobList(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("queue: listing jobs: %w", err)
	}
	return res.Jobs, nil
}

// Retry makes the given jobs available to run again at once, whatever
// state they are in (dead letters included), except running jobs, which it
// leaves alone. A job that exhausted its attempts gets one more. All or
// none: an unknown ID fails the whole call with an error matching
// rivertype.ErrNotFound. It returns the updated jobs in the order of ids.
func (q *Queue) Retry(ctx context.Context, ids ...int64) ([]*rivertype.JobRow, error) {
	return inTx(ctx, q, func(tx pgx.Tx) ([]*rivertype.JobRow, error) { return q.RetryTx(ctx, tx, ids...) })
}

// RetryTx is Retry within tx.
func (q *Queue) RetryTx(ctx context.Context, tx pgx.Tx, ids ...int64) ([]*rivertype.JobRow, error) {
	if err := checkIDs("Retry", ids); err != nil {
		return nil, err
	}
	out := make([]*rivertype.JobRow, 0, len(ids))
	for _, id := range ids {
		job, err := q.client.JobRetryTx(ctx, tx, id)
		if err != nil {
			return nil, fmt.Errorf("queue: retrying job %d: %w", id, err)
		}
		out = append(out, job)
	}
	return out, nil
}

// Cancel cancels the given jobs. A waiting job is cancelled at once; a
// running job is marked for cancellation and its context cancelled by the
// process working it (River's remote cancel); a finished job is left as
// is. All or none: an unknown ID fails the whole call with an error
// matching rivertype.ErrNotFound. It returns the jobs in the order of ids.
func (q *Queue) Cancel(ctx context.Context, ids ...int64) ([]*rivertype.JobRow, error) {
	return inTx(ctx, q, func(tx pgx.Tx) ([]*rivertype.JobRow, error) { return q.CancelTx(ctx, tx, ids...) })
}

// CancelTx is Cancel within tx; running jobs are told once tx commits.
func (q *Queue) CancelTx(ctx context.Context, tx pgx.Tx, ids ...int64) ([]*rivertype.JobRow, error) {
	if err := checkIDs("Cancel", ids); err != nil {
		return nil, err
	}
	out := make([]*rivertype.JobRow, 0, len(ids))
	for _, id := range ids {
		job, err := q.client.JobCancelTx(ctx, tx, id)
		if err != nil {
			return nil, fmt.Errorf("queue: cancelling job %d: %w", id, err)
		}
		out = append(out, job)
	}
	return out, nil
}

// SetPriority sets an unfinished job's priority level. Aging, when on,
// raises it again only after a full AgeInterval. A finished job gives an
// error matching ErrJobFinalized; an unknown one, rivertype.ErrNotFound.
func (q *Queue) SetPriority(ctx context.Context, id int64, p Priority) (*rivertype.JobRow, error) {
	return inTx(ctx, q, func(tx pgx.Tx) (*rivertype.JobRow, error) { return q.SetPriorityTx(ctx, tx, id, p) })
}

// SetPriorityTx is SetPriority within tx.
func (q *Queue) SetPriorityTx(ctx context.Context, tx pgx.Tx, id int64, p Priority) (*rivertype.JobRow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var state string
	err := tx.QueryRow(ctx, `
		WITH target AS (
			SELECT id, state FROM river_job WHERE id = $1 FOR UPDATE
		), updated AS (
			UPDATE river_job j
			SET priority = $2,
			    metadata = j.metadata || jsonb_build_object('`+metadataAgedAt+`', now())
			FROM target
			WHERE j.id = target.id AND target.state NOT IN ('completed', 'cancelled', 'discarded')
			RETURNING j.id
		)
		SELECT target.state::text FROM target`, id, int(p)).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("queue: setting the priority of job %d: %w", id, rivertype.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: setting the priority of job %d: %w", id, err)
	}
	switch rivertype.JobState(state) {
	case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
		return nil, &finalizedError{id: id, state: state, refused: "takes a new priority"}
	}
	job, err := q.client.JobGetTx(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("queue: reading job %d: %w", id, err)
	}
	return job, nil
}

func checkIDs(op string, ids []int64) error {
	switch {
	case len(ids) == 0:
		return fmt.Errorf("queue: %s needs at least one job ID", op)
	case len(ids) > IDsMax:
		return fmt.Errorf("queue: %s got %d job IDs; the limit is %d", op, len(ids), IDsMax)
	}
	return nil
}

// inTx runs fn in a transaction on q's pool and commits when it succeeds.
func inTx[T any](ctx context.Context, q *Queue, fn func(pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := q.pool.Begin(ctx)
	if err != nil {
		return zero, fmt.Errorf("queue: beginning a transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	v, err := fn(tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, fmt.Errorf("queue: committing: %w", err)
	}
	return v, nil
}
