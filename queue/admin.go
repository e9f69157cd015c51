package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Operator operations: paged job listings, fenced state transitions and
// priority boosts, as an admin surface (braid serve, the CLI) needs them.

// JobOrder orders the jobs of JobsPage.
type JobOrder int

const (
	// JobOrderID lists the newest jobs (highest ID) first. The default.
	JobOrderID JobOrder = iota
	// JobOrderFinalized lists the most recently finalized jobs first, then
	// unfinished jobs, newest first: the order of dead letters.
	JobOrderFinalized
)

// JobPageFilter selects one page of jobs for JobsPage. Empty fields match
// everything.
type JobPageFilter struct {
	// State keeps only jobs in this state.
	State rivertype.JobState
	// Kind keeps only jobs of this kind.
	Kind string
	// Queue keeps only jobs of this queue.
	Queue string
	// Limit is the most jobs returned. Defaults to ListLimitDefault; at
	// most ListLimitMax.
	Limit int
	// Offset skips this many matching jobs first, for paging. It must not
	// be negative.
	Offset int
	// Order orders the jobs. Defaults to JobOrderID, newest first.
	Order JobOrder
}

// JobPage is one page of jobs and the number of jobs matching the filter.
type JobPage struct {
	// Jobs are the page's jobs, in the filter's order.
	Jobs []*rivertype.JobRow
	// Total counts every job that matches the filter, on every page.
	Total int64
}

// JobsPage lists one page of the jobs matching filter, with limit and
// offset, and counts all of them. River's own JobList pages with cursors;
// an operator's table pages by offset, as the classic job-queue admin API does.
// Offset paging reads and skips the rows before the page, so deep pages
// of a large table cost more than the first.
func (q *Queue) JobsPage(ctx context.Context, filter JobPageFilter) (*JobPage, error) {
	limit, err := listLimit(filter.Limit)
	if err != nil {
		return nil, err
	}
	if filter.Offset < 0 {
		return nil, fmt.Errorf("queue: list offset %d is negative", filter.Offset)
	}
	var (
		where []string
		args  []any
	)
	if filter.State != "" {
		if !slices.Contains(rivertype.JobStates(), filter.State) {
			return nil, fmt.Errorf("queue: unknown job state %q; states are %v", filter.State, rivertype.JobStates())
		}
		args = append(args, string(filter.State))
		where = append(where, "state = $"+strconv.Itoa(len(args))+"::river_job_state")
	}
	if filter.Kind != "" {
		args = append(args, filter.Kind)
		where = append(where, "kind = $"+strconv.Itoa(len(args)))
	}
	if filter.Queue != "" {
		args = append(args, filter.Queue)
		where = append(where, "queue = $"+strconv.Itoa(len(args)))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	order := " ORDER BY id DESC"
	if filter.Order == JobOrderFinalized {
		order = " ORDER BY finalized_at DESC NULLS LAST, id DESC"
	}
	page := &JobPage{}
	if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM river_job`+cond, args...).Scan(&page.Total); err != nil {
		return nil, fmt.Errorf("queue: counting jobs: %w", err)
	}
	if page.Total <= int64(filter.Offset) {
		page.Jobs = []*rivertype.JobRow{}
		return page, nil
	}
	args = append(args, limit, filter.Offset)
	rows, err := q.pool.Query(ctx, `SELECT id FROM river_job`+cond+order+
		` LIMIT $`+strconv.Itoa(len(args)-1)+` OFFSET $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("queue: listing jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("queue: listing jobs: %w", err)
	}
	page.Jobs, err = q.jobsByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	return page, nil
}

// jobsByID reads the jobs of ids through River, in the order of ids. A job
// deleted meanwhile is left out.
func (q *Queue) jobsByID(ctx context.Context, ids []int64) ([]*rivertype.JobRow, error) {
	out := make([]*rivertype.JobRow, 0, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	res, err := q.client.JobList(ctx, river.NewJobListParams().IDs(ids...).First(len(ids)))
	if err != nil {
		return nil, fmt.Errorf("queue: reading jobs: %w", err)
	}
	byID := make(map[int64]*rivertype.JobRow, len(res.Jobs))
	for _, j := range res.Jobs {
		byID[j.ID] = j
	}
	for _, id := range ids {
		if j, ok := byID[id]; ok {
			out = append(out, j)
		}
	}
	return out, nil
}

// JobsProgress returns the latest progress and heartbeat of each job among
// ids that reported any, keyed by job ID: JobProgress for many jobs in one
// query, for a list of running jobs.
func (q *Queue) JobsProgress(ctx context.Context, ids []int64) (map[int64]*JobProgress, error) {
	out := map[int64]*JobProgress{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.pool.Query(ctx, `
		SELECT job_id, kind, attempt, coalesce(percent, 0), coalesce(message, ''), heartbeat_at, updated_at
		FROM braid_job_progress WHERE job_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("queue: reading progress of %d jobs: %w", len(ids), err)
	}
	var p JobProgress
	_, err = pgx.ForEachRow(rows, []any{&p.JobID, &p.Kind, &p.Attempt, &p.Percent, &p.Message, &p.HeartbeatAt, &p.UpdatedAt}, func() error {
		c := p
		out[c.JobID] = &c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: reading progress of %d jobs: %w", len(ids), err)
	}
	return out, nil
}

// ErrTransitionNotAllowed is matched (errors.Is) by the *TransitionError
// that SetState returns for a state change it does not make.
var ErrTransitionNotAllowed = errors.New("queue: job state transition not allowed")

// ErrUniqueConflict is returned (wrapped, with the job's ID) when making a
// job available again would give it the unique key of another live job of
// its kind (see river.UniqueOpts). Nothing is changed.
var ErrUniqueConflict = errors.New("queue: another job with the same unique key is live")

// TransitionError is the error of a state change SetState does not make:
// From is the job's state, To the one asked for, Allowed the states it may
// be moved to.
type TransitionError struct {
	JobID   int64
	From    rivertype.JobState
	To      rivertype.JobState
	Allowed []rivertype.JobState
}

func (e *TransitionError) Error() string {
	if len(e.Allowed) == 0 {
		return fmt.Sprintf("queue: job %d is %s, and a %s job cannot be moved to %s (or any state)", e.JobID, e.From, e.From, e.To)
	}
	return fmt.Sprintf("queue: job %d is %s, and a %s job cannot be moved to %s; it can be moved to %s", e.JobID, e.From, e.From, e.To, joinStates(e.Allowed))
}

// Is makes a *TransitionError match ErrTransitionNotAllowed.
func (e *TransitionError) Is(target error) bool { return target == ErrTransitionNotAllowed }

func joinStates(states []rivertype.JobState) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// transitions are the safe state changes an operator may make.
var transitions = map[rivertype.JobState][]rivertype.JobState{
	rivertype.JobStateAvailable: {rivertype.JobStateCancelled},
	rivertype.JobStatePending:   {rivertype.JobStateCancelled},
	rivertype.JobStateScheduled: {rivertype.JobStateAvailable, rivertype.JobStateCancelled},
	rivertype.JobStateRetryable: {rivertype.JobStateAvailable, rivertype.JobStateCancelled},
	rivertype.JobStateRunning:   {rivertype.JobStateCancelled},
	rivertype.JobStateCompleted: {rivertype.JobStateAvailable},
	rivertype.JobStateCancelled: {rivertype.JobStateAvailable},
	rivertype.JobStateDiscarded: {rivertype.JobStateAvailable},
}

// Transitions returns the states SetState may move a job in state from
// to, in a stable order; none for an unknown state. They are the safe
// ones:
//
//   - available, pending, scheduled, retryable → cancelled: the job will
//     not run;
//   - running → cancelled: River's remote cancel; the process working the
//     job cancels its context, and River records it as cancelled when the
//     worker returns;
//   - scheduled, retryable → available: run now rather than at its time;
//   - completed, cancelled, discarded (a dead letter) → available: a retry,
//     as River's JobRetry makes it: the job keeps its attempts and errors,
//     and gets one more attempt when it has used them all.
//
// Anything else (finishing a job by hand, or taking a running job back)
// would contradict what its worker does or did, and is refused.
func Transitions(from rivertype.JobState) []rivertype.JobState {
	return slices.Clone(transitions[from])
}

// setStateTries bounds how often SetStateTx reads the state again when the
// job changed state between its read and its fenced update.
const setStateTries = 3

// SetState moves job id to state to, if Transitions allows it from the
// job's current state. Each change is one UPDATE fenced on the state the
// job leaves (WHERE state = …), so a job that changed state meanwhile is
// judged again from its new state; a change that is not allowed returns a
// *TransitionError (matching ErrTransitionNotAllowed) and changes nothing.
// An unknown job gives an error matching rivertype.ErrNotFound. It returns
// the updated job.
func (q *Queue) SetState(ctx context.Context, id int64, to rivertype.JobState) (*rivertype.JobRow, error) {
	return inTx(ctx, q, func(tx pgx.Tx) (*rivertype.JobRow, error) { return q.SetStateTx(ctx, tx, id, to) })
}

// SetStateTx is SetState within tx: the change holds only if tx commits,
// and a running job's worker is told to cancel only then. A refused change
// leaves tx usable: the update runs under a savepoint.
func (q *Queue) SetStateTx(ctx context.Context, tx pgx.Tx, id int64, to rivertype.JobState) (*rivertype.JobRow, error) {
	if !slices.Contains(rivertype.JobStates(), to) {
		return nil, fmt.Errorf("queue: unknown job state %q; states are %v", to, rivertype.JobStates())
	}
	for range setStateTries {
		var from rivertype.JobState
		err := tx.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&from)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("queue: job %d: %w", id, rivertype.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("queue: reading job %d: %w", id, err)
		}
		if !slices.Contains(transitions[from], to) {
			return nil, &TransitionError{JobID: id, From: from, To: to, Allowed: Transitions(from)}
		}
		moved, err := q.moveTx(ctx, tx, id, from, to)
		if err != nil {
			return nil, err
		}
		if !moved {
			continue // the job left from meanwhile: judge it again
		}
		job, err := q.client.JobGetTx(ctx, tx, id)
		if err != nil {
			return nil, fmt.Errorf("queue: reading job %d: %w", id, err)
		}
		return job, nil
	}
	return nil, fmt.Errorf("queue: job %d kept changing state; try again", id)
}

// moveTx makes one fenced transition under a savepoint. It reports false
// when the job is no longer in state from.
func (q *Queue) moveTx(ctx context.Context, tx pgx.Tx, id int64, from, to rivertype.JobState) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("queue: job %d: %w", id, err)
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	var n int64
	switch {
	case from == rivertype.JobStateRunning && to == rivertype.JobStateCancelled:
		// River's remote cancel, on the row locked while it is running.
		var locked bool
		err = sp.QueryRow(ctx, `SELECT true FROM river_job WHERE id = $1 AND state = 'running' FOR UPDATE`, id).Scan(&locked)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("queue: cancelling job %d: %w", id, err)
		}
		if _, err := q.client.JobCancelTx(ctx, sp, id); err != nil {
			return false, fmt.Errorf("queue: cancelling job %d: %w", id, err)
		}
		n = 1
	case to == rivertype.JobStateCancelled:
		tag, err := sp.Exec(ctx, `
			UPDATE river_job
			   SET state = 'cancelled', finalized_at = now(),
			       metadata = jsonb_set(metadata, '{cancel_attempted_at}', to_jsonb(now()), true)
			 WHERE id = $1 AND state = $2::river_job_state`, id, string(from))
		if err != nil {
			return false, fmt.Errorf("queue: cancelling job %d: %w", id, err)
		}
		n = tag.RowsAffected()
	case to == rivertype.JobStateAvailable && (from == rivertype.JobStateScheduled || from == rivertype.JobStateRetryable):
		tag, err := sp.Exec(ctx, `
			UPDATE river_job SET state = 'available', scheduled_at = now()
			 WHERE id = $1 AND state = $2::river_job_state`, id, string(from))
		if err != nil {
			return false, fmt.Errorf("queue: making job %d available: %w", id, err)
		}
		n = tag.RowsAffected()
	case to == rivertype.JobStateAvailable:
		// A retry of a finished job, as River's JobRetry makes it.
		tag, err := sp.Exec(ctx, `
			UPDATE river_job
			   SET state = 'available', scheduled_at = now(), finalized_at = NULL,
			       max_attempts = CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END,
			       metadata = metadata - 'cancel_attempted_at'
			 WHERE id = $1 AND state = $2::river_job_state`, id, string(from))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return false, fmt.Errorf("queue: retrying job %d: %w", id, ErrUniqueConflict)
		}
		if err != nil {
			return false, fmt.Errorf("queue: retrying job %d: %w", id, err)
		}
		n = tag.RowsAffected()
	default:
		return false, fmt.Errorf("queue: job %d: no transition from %s to %s", id, from, to)
	}
	if n == 0 {
		return false, nil
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("queue: job %d: %w", id, err)
	}
	return true, nil
}

// Boost raises an unfinished job's priority by levels toward
// PriorityCritical, and stops there: a normal job boosted by 1 becomes
// high, by 2 or more critical. Like SetPriority it restarts the aging
// interval. levels must be at least 1. A finished job gives an error
// matching ErrJobFinalized; an unknown one, rivertype.ErrNotFound.
func (q *Queue) Boost(ctx context.Context, id int64, levels int) (*rivertype.JobRow, error) {
	return inTx(ctx, q, func(tx pgx.Tx) (*rivertype.JobRow, error) { return q.BoostTx(ctx, tx, id, levels) })
}

// BoostTx is Boost within tx.
func (q *Queue) BoostTx(ctx context.Context, tx pgx.Tx, id int64, levels int) (*rivertype.JobRow, error) {
	if levels < 1 {
		return nil, fmt.Errorf("queue: boost of %d levels; it must be at least 1", levels)
	}
	levels = min(levels, int(PriorityLow-PriorityCritical))
	var state string
	err := tx.QueryRow(ctx, `
		WITH target AS (
			SELECT id, state FROM river_job WHERE id = $1 FOR UPDATE
		), updated AS (
			UPDATE river_job j
			SET priority = greatest($3::smallint, j.priority - $2::smallint),
			    metadata = j.metadata || jsonb_build_object('`+metadataAgedAt+`', now())
			FROM target
			WHERE j.id = target.id AND target.state NOT IN ('completed', 'cancelled', 'discarded')
			RETURNING j.id
		)
		SELECT target.state::text FROM target`, id, levels, int(PriorityCritical)).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("queue: boosting job %d: %w", id, rivertype.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: boosting job %d: %w", id, err)
	}
	switch rivertype.JobState(state) {
	case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
		return nil, &finalizedError{id: id, state: state, refused: "can be boosted"}
	}
	job, err := q.client.JobGetTx(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("queue: reading job %d: %w", id, err)
	}
	return job, nil
}
