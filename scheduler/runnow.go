package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrCannotFire matches the error of RunNow and RunNowTx when this
// Scheduler has no way to fire the schedule's target: a job target without
// Config.Queue, or a workflow target without Config.Workflows.
var ErrCannotFire = errors.New("scheduler: cannot fire this target from this scheduler")

// Fire is one fire of a schedule made by RunNow.
type Fire struct {
	// Schedule is the schedule after the fire: LastRunAt, LastJobID or
	// LastRunID name this fire, and NextRunAt is unchanged.
	Schedule *Schedule

	// At is the moment of the fire on the database clock. It stands as the
	// fire's slot: the job's MetadataSlot and the idempotency key of the
	// job or run (IdempotencyKey(name, At)).
	At time.Time

	// JobID is the River job inserted for a job target.
	JobID *int64

	// RunID is the workflow run started for a workflow target.
	RunID string
}

// RunNow fires the named schedule once, now, outside its cron grid: it
// inserts the job or starts the workflow run exactly as a slot does, and
// records the fire as the schedule's last one, all in one transaction.
// See RunNowTx.
func (s *Scheduler) RunNow(ctx context.Context, name string) (*Fire, error) {
	var f *Fire
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		f, err = s.RunNowTx(ctx, tx, name)
		return err
	})
	return f, err
}

// RunNowTx is RunNow inside tx: the job or run exists only if tx commits.
//
// The schedule's regular slots are untouched: next_run_at does not move,
// and a failed slot keeps its error and its backoff. A run now fires
// whether the schedule is enabled or not, and whatever its overlap policy,
// because an operator asked for it; under OverlapSkip the next slots are
// then skipped while this fire, or a slot's fire before it, is
// unfinished. The fire takes the moment of the transaction on the database
// clock as its slot, so two RunNowTx of the same schedule in one
// transaction make one job or run.
//
// It returns an error matching ErrScheduleNotFound when there is no such
// schedule, and one matching ErrCannotFire when this Scheduler cannot fire
// the target (see ErrCannotFire). When the job cannot be inserted or the
// run cannot be started the error says why, and tx should be rolled back.
func (s *Scheduler) RunNowTx(ctx context.Context, tx pgx.Tx, name string) (*Fire, error) {
	sch, err := getSchedule(ctx, tx, name, "FOR UPDATE")
	if err != nil {
		return nil, err
	}
	switch {
	case sch.TargetType == TargetJob && s.cfg.Queue == nil:
		return nil, fmt.Errorf("%w: schedule %q inserts job kind %q, and Config.Queue is nil", ErrCannotFire, name, sch.Target)
	case sch.TargetType == TargetWorkflow && s.cfg.Workflows == nil:
		return nil, fmt.Errorf("%w: schedule %q starts workflow %q, and Config.Workflows is nil (give the scheduler the workflow engine)", ErrCannotFire, name, sch.Target)
	}
	now, err := dbNow(ctx, tx)
	if err != nil {
		return nil, err
	}
	jobID, runID, err := s.insertTarget(ctx, tx, sch, now, now)
	if err != nil {
		return nil, fmt.Errorf("scheduler: running schedule %q now: %w", name, err)
	}
	updated, err := scanSchedule(tx.QueryRow(ctx, `
UPDATE braid_schedules SET last_run_at = braid_now(),
    last_job_id = $2, last_run_id = $3,
    updated_at = braid_now()
WHERE id = $1
RETURNING `+scheduleColumns, sch.ID, jobID, runID))
	if err != nil {
		return nil, fmt.Errorf("scheduler: recording the fire of schedule %q: %w", name, err)
	}
	if err := notify(ctx, tx); err != nil {
		return nil, err
	}
	f := &Fire{Schedule: updated, At: now, JobID: jobID}
	if runID != nil {
		f.RunID = runID.String()
	}
	return f, nil
}
