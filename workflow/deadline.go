package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TimeoutError says that a run's deadline passed before it finished: the
// run was cancelled, with everything in it. Run.Result and Engine.Wait
// return it wrapped in the run's *RunError (status "cancelled"), so both
// errors.As(err, &timeoutErr) and errors.Is(err, ErrCancelled) hold, and
// errors.As(err, &runErr) still gives the run's status and message.
type TimeoutError struct {
	RunID    string
	Workflow string
	// Timeout is the run's timeout: StartOpts.Timeout, or the definition's
	// WithRunTimeout.
	Timeout time.Duration
	// Deadline is when the timeout passed, by the database's clock.
	Deadline time.Time
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("run %s of workflow %q timed out: its deadline of %s passed at %s",
		e.RunID, e.Workflow, e.Timeout, e.Deadline.Format(time.RFC3339Nano))
}

// Is makes a run that timed out match ErrCancelled: it was cancelled.
func (e *TimeoutError) Is(target error) bool { return target == ErrCancelled }

// errKindTimeout is the kind of the stored error of a run cancelled by
// its deadline, and of its tasks.
const errKindTimeout = "timeout"

// timeoutMessage is the stored error message of a run whose deadline of
// timeout passed.
func timeoutMessage(timeout time.Duration) string {
	return fmt.Sprintf("timed out: the run's deadline of %s passed", timeout)
}

// runTimeout is the timeout of a run of d started with o: o's when set,
// else the definition's; 0 for none. A negative one is an error naming
// it.
func runTimeout(d *definition, o *StartOpts) (time.Duration, error) {
	if o.Timeout < 0 {
		return 0, fmt.Errorf("workflow: run timeout (StartOpts.Timeout) %s is negative; 0 means no deadline", o.Timeout)
	}
	if o.Timeout > 0 {
		return o.Timeout, nil
	}
	return d.runTimeout, nil
}

// timeoutMicros is a timeout as whole microseconds, PostgreSQL's interval
// precision, rounded up so that a positive timeout stays positive.
func timeoutMicros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// timeoutMicrosSQL reads braid_runs.timeout as whole microseconds.
const timeoutMicrosSQL = `(extract(epoch FROM timeout) * 1000000)::bigint`

// overdueRunsSQL lists the unfinished runs whose deadline has passed,
// earliest first, through the partial index braid_runs_deadline_at, which
// the clock's subquery (dueNowSQL) bounds. It leaves out the runs set aside
// ($2).
const overdueRunsSQL = `
	SELECT id, ` + timeoutMicrosSQL + ` FROM braid_runs
	 WHERE deadline_at IS NOT NULL AND deadline_at <= ` + dueNowSQL + `
	   AND status IN ('pending', 'running', 'waiting') AND id <> ALL($2::uuid[])
	 ORDER BY deadline_at
	 LIMIT $1`

// deadlineLockTimeout bounds how long the delay processor waits for a row
// lock while it cancels a run whose deadline passed. A run whose rows are
// held longer (by a turn's outcome, Cancel, Retry, a caller's open
// transaction) is set aside for a moment (setAside.busy) and tried again
// after it, so that it never holds back other deadlines, not even when a
// whole batch of them is held; and once as long has
// passed since the delay processor last woke due delays, it wakes them
// again before the next cancel, so that a pass of cancels that wait on
// locks never holds back due delays either.
const deadlineLockTimeout = 100 * time.Millisecond

// cancelOverdueRuns is the delay processor's second duty: it cancels the
// unfinished runs whose deadline has passed, up to DelayBatchSize of them,
// each in its own transaction through the same path as Cancel, so that
// one run that cannot be cancelled never holds back the others: a run
// whose cancel fails with a fault of its own (rowFault) is set aside. It
// returns how many it cancelled, how many overdue runs it found (a full
// batch: more may be due), and whether the database failed: the runs
// could not be listed, or a cancel failed for a reason that is neither a
// held lock nor the run's own.
//
// It does not wait for the runs' running turns to end as Cancel does:
// they learn of the cancel through their context (River's remote
// cancel), and their outcomes find their tasks cancelled and record
// nothing.
func (p *delayPass) cancelOverdueRuns(ctx context.Context) (cancelled, found int, failed bool) {
	e := p.e
	held, _ := p.runs.held(time.Now())
	type overdue struct {
		id      uuid.UUID
		timeout int64 // microseconds
	}
	runs, err := func() ([]overdue, error) {
		ctx, cancel := p.bounded(ctx)
		defer cancel()
		rows, err := e.pool.Query(ctx, overdueRunsSQL, e.cfg.DelayBatchSize, pgIDs(held))
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (overdue, error) {
			var o overdue
			return o, r.Scan(&o.id, &o.timeout)
		})
	}()
	if err != nil {
		if ctx.Err() == nil {
			e.logger.WarnContext(ctx, "workflow: listing runs whose deadline passed", "error", err)
		}
		return 0, 0, true
	}
	woke := time.Now()
	for _, r := range runs {
		if time.Since(woke) >= deadlineLockTimeout {
			// Cancels that wait on locks must not hold back the delays
			// that fall due meanwhile: wake them between two cancels.
			if _, err := p.fireDueDelays(ctx, nil); err != nil && ctx.Err() == nil {
				e.logger.WarnContext(ctx, "workflow: waking due delays between deadline cancels; the next tick retries them", "error", err)
			}
			woke = time.Now()
		}
		cause := storedError{Kind: errKindTimeout, Message: timeoutMessage(time.Duration(r.timeout) * time.Microsecond)}
		// The cancel is bounded, as a turn's outcome is, by
		// OutcomeTimeout, doubled at each cancel of the run that took
		// longer: a run wide enough may need more, and gets it.
		bound := e.cfg.OutcomeTimeout << min(p.runs.failures(r.id), deadlineBoundDoublings)
		err := func() error {
			ctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			return e.withTx(ctx, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, deadlineLockTimeout.Milliseconds())); err != nil {
					return err
				}
				return e.cancelTx(ctx, tx, r.id, r.id.String(), cause, false)
			})
		}()
		switch {
		case err == nil:
			p.runs.done(r.id)
			cancelled++
			// Turn jobs that the transaction skipped because another one
			// held them are cancelled now, as Cancel does.
			err := func() error {
				ctx, cancel := context.WithTimeout(ctx, e.cfg.OutcomeTimeout)
				defer cancel()
				return e.cancelSkippedTurns(ctx, r.id, r.id.String())
			}()
			if err != nil && ctx.Err() == nil {
				e.logger.WarnContext(ctx, "workflow: run timed out; cancelling its remaining turn jobs", "run.id", r.id, "error", err)
			}
		case ctx.Err() != nil:
			return cancelled, len(runs), false
		case errors.Is(err, ErrRunFinished), errors.Is(err, ErrRunNotFound):
			// It finished (or was deleted), or Retry moved its deadline,
			// meanwhile.
		case isLockNotAvailable(err):
			// Left out for a moment, so that runs that others hold do
			// not fill every look ahead of the overdue runs after them.
			p.runs.busy(r.id, time.Now())
			e.logger.DebugContext(ctx, "workflow: a run whose deadline passed is locked; it is set aside for a moment and the others go on", "run.id", r.id)
		case errors.Is(err, context.DeadlineExceeded):
			p.runs.fail(r.id, time.Now())
			e.logger.WarnContext(ctx, "workflow: cancelling a run whose deadline passed took longer than its bound; it is set aside and tried again with twice as long",
				"run.id", r.id, "bound", bound, "error", err)
		case rowFault(err):
			p.runs.fail(r.id, time.Now())
			e.logger.ErrorContext(ctx, "workflow: cancelling a run whose deadline passed failed; it is set aside and the others go on", "run.id", r.id, "error", err)
		default:
			failed = true
			e.logger.WarnContext(ctx, "workflow: cancelling a run whose deadline passed failed; the next tick retries it", "run.id", r.id, "error", err)
		}
	}
	return cancelled, len(runs), failed
}

// deadlineBoundDoublings bounds how often the time given a run's deadline
// cancel doubles: 64 times OutcomeTimeout at most.
const deadlineBoundDoublings = 6

// newTimeoutError is the *TimeoutError of a run that its deadline
// cancelled, from its row's timeout (in microseconds) and deadline.
func newTimeoutError(runID, workflow string, micros *int64, deadline *time.Time) *TimeoutError {
	te := &TimeoutError{RunID: runID, Workflow: workflow}
	if micros != nil {
		te.Timeout = time.Duration(*micros) * time.Microsecond
	}
	if deadline != nil {
		te.Deadline = *deadline
	}
	return te
}
