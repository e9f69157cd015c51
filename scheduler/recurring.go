package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
)

// Limits of recurring jobs.
const (
	// KindMaxLength is the longest kind of a recurring job, in characters:
	// River's limit for a job kind (river_job refuses a kind of 128
	// characters or more), since each run is a River job of that kind.
	// It is also the longest River job kind a schedule may target.
	KindMaxLength = 127

	// KeyMaxLength is the longest entity key of a recurring job, in
	// characters.
	KeyMaxLength = 500
)

var (
	// ErrRecurringNotFound is returned (wrapped) when no recurring job has
	// the given kind and key.
	ErrRecurringNotFound = errors.New("scheduler: recurring job not found")

	// ErrRecurringParked matches the *RecurringParkedError of Ensure and
	// EnsureTx when the recurring job is parked as a dead letter.
	ErrRecurringParked = errors.New("scheduler: recurring job parked as a dead letter")
)

// RecurringParkedError is returned by Ensure and EnsureTx when the
// recurring job they ensured is parked as a dead letter. The job is ensured
// all the same (enabled, its args stored; EnsureTx leaves tx usable), but
// it does not run, and its next_run_at does not come, until Revive. It
// matches ErrRecurringParked.
type RecurringParkedError struct {
	// Kind and Key name the recurring job.
	Kind, Key string

	// DeadAt is when it was parked.
	DeadAt time.Time

	// ConsecutiveFailures and LastError are those of the failures that
	// parked it.
	ConsecutiveFailures int
	LastError           string
}

func (e *RecurringParkedError) Error() string {
	return fmt.Sprintf("scheduler: recurring job %s/%s has been parked as a dead letter since %s, after %d consecutive failures; it does not run until revived (Scheduler.Revive)",
		e.Kind, e.Key, e.DeadAt.UTC().Format(time.RFC3339), e.ConsecutiveFailures)
}

// Is reports whether target is ErrRecurringParked.
func (e *RecurringParkedError) Is(target error) bool { return target == ErrRecurringParked }

// Recurring is one durable recurring job: a row of braid_recurring, one per
// (kind, entity key).
type Recurring struct {
	ID       int64           `json:"id"`
	Kind     string          `json:"kind"`
	Key      string          `json:"key"`
	Args     json.RawMessage `json:"args"`
	Queue    string          `json:"queue"`
	Priority int             `json:"priority"`
	Enabled  bool            `json:"enabled"`

	// NextRunAt is when the job runs next. A disabled job keeps it.
	NextRunAt time.Time `json:"next_run_at"`

	// RunningSince is when the current run was claimed, nil when idle.
	RunningSince *time.Time `json:"running_since,omitempty"`

	// JobID is the River job of the current or last run.
	JobID *int64 `json:"job_id,omitempty"`

	// LastRunAt is when the last run finished.
	LastRunAt *time.Time `json:"last_run_at,omitempty"`

	// LastError is the error of the last run, cleared by a success.
	LastError string `json:"last_error,omitempty"`

	// ConsecutiveFailures counts failed runs since the last success.
	ConsecutiveFailures int `json:"consecutive_failures"`

	// DeadAt is when the job was parked as a dead letter; nil while live.
	DeadAt *time.Time `json:"dead_at,omitempty"`

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// RecurringListParams filters and pages ListRecurring.
type RecurringListParams struct {
	// Kind, when set, lists only jobs of that kind.
	Kind string

	// Enabled, when set, lists only jobs with that state.
	Enabled *bool

	// Dead, when set, lists only dead letters (true) or live jobs (false).
	Dead *bool

	// Limit is the most jobs returned.
	//
	// Defaults to 100.
	Limit int

	// Offset skips that many jobs, in (kind, key) order.
	Offset int
}

const recurringColumns = `id, kind, key, args, queue, priority, enabled, next_run_at, running_since, job_id,
    last_run_at, last_error, consecutive_failures, dead_at, created_at, updated_at`

func scanRecurring(row pgx.Row) (*Recurring, error) {
	var (
		r         Recurring
		priority  int16
		lastError *string
		failures  int32
	)
	err := row.Scan(&r.ID, &r.Kind, &r.Key, &r.Args, &r.Queue, &priority, &r.Enabled, &r.NextRunAt, &r.RunningSince,
		&r.JobID, &r.LastRunAt, &lastError, &failures, &r.DeadAt, &r.CreatedAt, &r.UpdatedAt)
	if err != nil {
		return nil, err
	}
	r.Priority, r.ConsecutiveFailures = int(priority), int(failures)
	if lastError != nil {
		r.LastError = *lastError
	}
	return &r, nil
}

func validateKindKey(kind, key string) error {
	if err := checkText("recurring job kind", kind, KindMaxLength, " (River's limit for a job kind)"); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if err := checkText("recurring job "+kind+" key", key, KeyMaxLength, ""); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	return nil
}

// checkText checks that s, the what of a schedule or a recurring job, is
// 1 to max characters of UTF-8 text without NUL characters, which is what
// PostgreSQL's text stores. Its error names what and, but for a value over
// the limit, which it counts instead, the value; limit says whose limit max
// is, when not braid's own.
func checkText(what, s string, max int, limit string) error {
	switch n := utf8.RuneCountInString(s); {
	case s == "":
		return fmt.Errorf("%s is empty; it must be 1 to %d characters%s", what, max, limit)
	case n > max:
		return fmt.Errorf("%s is %d characters; the limit is %d%s", what, n, max, limit)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%s %q holds a NUL character, which PostgreSQL cannot store", what, s)
	}
	return nil
}

func notFound(kind, key string) error {
	return &wrappedError{fmt.Sprintf("scheduler: recurring job %s/%s not found", kind, key), ErrRecurringNotFound}
}

// Ensure makes sure the recurring job (kind, key) exists and is enabled,
// and returns its next_run_at so the application can mirror it. See
// EnsureTx. A parked job is ensured (the change commits) and reported with
// a *RecurringParkedError.
func (s *Scheduler) Ensure(ctx context.Context, kind, key string, args any, firstRunAt time.Time) (time.Time, error) {
	var (
		next   time.Time
		parked error
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		next, err = s.EnsureTx(ctx, tx, kind, key, args, firstRunAt)
		if errors.Is(err, ErrRecurringParked) {
			parked, err = err, nil
		}
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return next, parked
}

// EnsureTx is idempotent: it creates the recurring job (kind, key), first
// due at firstRunAt (zero means now; otherwise from RunAtMin to
// RunAtMax), or, when the job exists, enables it
// again and stores args, keeping its next_run_at. It returns next_run_at.
//
// A dead letter stays parked; Revive brings it back. EnsureTx then still
// enables it and stores args, and returns its next_run_at with a
// *RecurringParkedError (matching ErrRecurringParked), since that time
// does not come until the job is revived: the caller can tell the job is
// not running (mirror no next run, or call ReviveTx), and tx stays usable.
//
// kind and key are UTF-8 text without NUL characters, at most
// KindMaxLength and KeyMaxLength characters. args are the River job's
// args: anything encoding/json accepts, a json.RawMessage as is, that
// PostgreSQL's jsonb can store (queue.CheckJSONB: no \u0000, say), at most
// Config.MaxArgsBytes once encoded (larger args are an
// *ArgsTooLargeError naming the kind, the key and the limit). When args is a river.JobArgs, kind may be empty
// and is taken from it, and the Queue and Priority of its InsertOpts, if it
// has any, apply to the job.
func (s *Scheduler) EnsureTx(ctx context.Context, tx pgx.Tx, kind, key string, args any, firstRunAt time.Time) (time.Time, error) {
	queue, priority := QueueDefault, PriorityDefault
	if ja, ok := args.(river.JobArgs); ok {
		if kind == "" {
			kind = ja.Kind()
		} else if kind != ja.Kind() {
			return time.Time{}, fmt.Errorf("scheduler: recurring job kind %q does not match the kind %q of its args", kind, ja.Kind())
		}
		if wo, ok := args.(river.JobArgsWithInsertOpts); ok {
			opts := wo.InsertOpts()
			queue, priority = orDefault(opts.Queue, queue), orDefault(opts.Priority, priority)
		}
	}
	if err := validateKindKey(kind, key); err != nil {
		return time.Time{}, err
	}
	if err := validateQueue(queue); err != nil {
		return time.Time{}, fmt.Errorf("scheduler: recurring job %s/%s: %w", kind, key, err)
	}
	if err := validatePriority(priority); err != nil {
		return time.Time{}, fmt.Errorf("scheduler: recurring job %s/%s: %w", kind, key, err)
	}
	encoded, err := encodeArgs(args)
	if err != nil {
		return time.Time{}, fmt.Errorf("scheduler: recurring job %s/%s: %w", kind, key, err)
	}
	if len(encoded) > s.cfg.MaxArgsBytes {
		return time.Time{}, &ArgsTooLargeError{Kind: kind, Key: key, Size: len(encoded), Limit: s.cfg.MaxArgsBytes}
	}
	if len(encoded) == 0 || encoded[0] != '{' {
		return time.Time{}, fmt.Errorf("scheduler: recurring job %s/%s: args must be a JSON object, got %s", kind, key, encoded)
	}
	var first *time.Time
	if !firstRunAt.IsZero() {
		if err := checkRunAt(fmt.Sprintf("recurring job %s/%s: the first run", kind, key), firstRunAt); err != nil {
			return time.Time{}, err
		}
		first = &firstRunAt
	}
	var (
		next      time.Time
		deadAt    *time.Time
		failures  int32
		lastError *string
	)
	err = tx.QueryRow(ctx, `
INSERT INTO braid_recurring (kind, key, args, queue, priority, next_run_at)
VALUES ($1, $2, $3, $4, $5, coalesce($6, braid_now()))
ON CONFLICT (kind, key) DO UPDATE
SET enabled = true, args = excluded.args, queue = excluded.queue, priority = excluded.priority, updated_at = braid_now()
RETURNING next_run_at, dead_at, consecutive_failures, last_error`, kind, key, encoded, queue, priority, first).Scan(&next, &deadAt, &failures, &lastError)
	if err != nil {
		return time.Time{}, fmt.Errorf("scheduler: ensuring recurring job %s/%s: %w", kind, key, err)
	}
	if err := notify(ctx, tx); err != nil {
		return time.Time{}, err
	}
	if deadAt != nil {
		parked := &RecurringParkedError{Kind: kind, Key: key, DeadAt: *deadAt, ConsecutiveFailures: int(failures)}
		if lastError != nil {
			parked.LastError = *lastError
		}
		return next, parked
	}
	return next, nil
}

// SetEnabled enables or disables the recurring job (kind, key) and returns
// it. See SetEnabledTx.
func (s *Scheduler) SetEnabled(ctx context.Context, kind, key string, enabled bool) (*Recurring, error) {
	var r *Recurring
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		r, err = s.SetEnabledTx(ctx, tx, kind, key, enabled)
		return err
	})
	return r, err
}

// SetEnabledTx enables or disables the recurring job (kind, key) inside tx
// and returns it. Its next_run_at is kept either way: a job enabled again
// runs at that time, or at once if it has passed. Disabling a running job
// lets the run finish normally; the job is just not claimed again. It
// returns an error matching ErrRecurringNotFound when there is no such job.
func (s *Scheduler) SetEnabledTx(ctx context.Context, tx pgx.Tx, kind, key string, enabled bool) (*Recurring, error) {
	r, err := scanRecurring(tx.QueryRow(ctx, `
UPDATE braid_recurring SET enabled = $3, updated_at = braid_now()
WHERE kind = $1 AND key = $2
RETURNING `+recurringColumns, kind, key, enabled))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(kind, key)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: setting recurring job %s/%s enabled=%t: %w", kind, key, enabled, err)
	}
	if err := notify(ctx, tx); err != nil {
		return nil, err
	}
	return r, nil
}

// Enable is SetEnabled(ctx, kind, key, true).
func (s *Scheduler) Enable(ctx context.Context, kind, key string) (*Recurring, error) {
	return s.SetEnabled(ctx, kind, key, true)
}

// EnableTx is SetEnabledTx(ctx, tx, kind, key, true).
func (s *Scheduler) EnableTx(ctx context.Context, tx pgx.Tx, kind, key string) (*Recurring, error) {
	return s.SetEnabledTx(ctx, tx, kind, key, true)
}

// Disable is SetEnabled(ctx, kind, key, false).
func (s *Scheduler) Disable(ctx context.Context, kind, key string) (*Recurring, error) {
	return s.SetEnabled(ctx, kind, key, false)
}

// DisableTx is SetEnabledTx(ctx, tx, kind, key, false).
func (s *Scheduler) DisableTx(ctx context.Context, tx pgx.Tx, kind, key string) (*Recurring, error) {
	return s.SetEnabledTx(ctx, tx, kind, key, false)
}

// SyncEnabledTx sets whether the recurring job (kind, key) is enabled from
// the application's own data, atomically. It locks the job's row, then
// calls wanted, which queries inside tx (for example whether any
// subscription of the entity is left), and stores the answer.
//
// Because wanted runs after the lock, in a statement of its own, it sees
// every change committed by a transaction that held the lock before, such
// as a concurrent subscribe that called EnsureTx. So when the last
// subscriber leaves while another arrives, the job ends up enabled; a bare
// UPDATE … SET enabled = EXISTS (…) can miss the arrival under READ
// COMMITTED. Call it after writing the change (the unsubscribe) in the same
// tx.
func (s *Scheduler) SyncEnabledTx(ctx context.Context, tx pgx.Tx, kind, key string, wanted func(ctx context.Context, tx pgx.Tx) (bool, error)) (*Recurring, error) {
	if wanted == nil {
		return nil, errors.New("scheduler: SyncEnabledTx needs a non-nil wanted function")
	}
	if _, err := getRecurring(ctx, tx, kind, key, "FOR UPDATE"); err != nil {
		return nil, err
	}
	enabled, err := wanted(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("scheduler: deciding whether recurring job %s/%s is wanted: %w", kind, key, err)
	}
	return s.SetEnabledTx(ctx, tx, kind, key, enabled)
}

// Revive brings the recurring job (kind, key) back from the dead letters
// and returns it. See ReviveTx.
func (s *Scheduler) Revive(ctx context.Context, kind, key string) (*Recurring, error) {
	var r *Recurring
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		r, err = s.ReviveTx(ctx, tx, kind, key)
		return err
	})
	return r, err
}

// ReviveTx clears the dead letter mark of the recurring job (kind, key),
// resets its consecutive failures and makes it due now. last_error is kept
// until the next success. Reviving a live job just makes it due now.
func (s *Scheduler) ReviveTx(ctx context.Context, tx pgx.Tx, kind, key string) (*Recurring, error) {
	r, err := scanRecurring(tx.QueryRow(ctx, `
UPDATE braid_recurring SET dead_at = NULL, consecutive_failures = 0, next_run_at = braid_now(), updated_at = braid_now()
WHERE kind = $1 AND key = $2
RETURNING `+recurringColumns, kind, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(kind, key)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: reviving recurring job %s/%s: %w", kind, key, err)
	}
	if err := notify(ctx, tx); err != nil {
		return nil, err
	}
	return r, nil
}

// DeleteRecurring removes the recurring job (kind, key), for when its
// entity is gone for good. A run in progress finishes; its outcome is
// dropped. A job of the row still waiting in its queue never runs its
// handler: the middleware cancels it when it is worked, even when the same
// kind and key have been ensured again since, so that the old job never
// runs beside the new row's. It returns an error matching ErrRecurringNotFound when there is
// no such job.
func (s *Scheduler) DeleteRecurring(ctx context.Context, kind, key string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return s.DeleteRecurringTx(ctx, tx, kind, key) })
}

// DeleteRecurringTx is DeleteRecurring inside tx.
func (s *Scheduler) DeleteRecurringTx(ctx context.Context, tx pgx.Tx, kind, key string) error {
	tag, err := tx.Exec(ctx, `DELETE FROM braid_recurring WHERE kind = $1 AND key = $2`, kind, key)
	if err != nil {
		return fmt.Errorf("scheduler: deleting recurring job %s/%s: %w", kind, key, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound(kind, key)
	}
	return nil
}

// GetRecurring returns the recurring job (kind, key), or an error matching
// ErrRecurringNotFound.
func (s *Scheduler) GetRecurring(ctx context.Context, kind, key string) (*Recurring, error) {
	return getRecurring(ctx, s.pool, kind, key, "")
}

func getRecurring(ctx context.Context, db dbtx, kind, key, lock string) (*Recurring, error) {
	r, err := scanRecurring(db.QueryRow(ctx, `SELECT `+recurringColumns+` FROM braid_recurring WHERE kind = $1 AND key = $2 `+lock, kind, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(kind, key)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: reading recurring job %s/%s: %w", kind, key, err)
	}
	return r, nil
}

// ListRecurring returns recurring jobs in (kind, key) order.
func (s *Scheduler) ListRecurring(ctx context.Context, params *RecurringListParams) ([]*Recurring, error) {
	var p RecurringListParams
	if params != nil {
		p = *params
	}
	if p.Limit < 0 || p.Offset < 0 {
		return nil, fmt.Errorf("scheduler: list limit %d and offset %d must not be negative", p.Limit, p.Offset)
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+recurringColumns+` FROM braid_recurring
WHERE ($1 = '' OR kind = $1)
  AND ($2::boolean IS NULL OR enabled = $2)
  AND ($3::boolean IS NULL OR (dead_at IS NOT NULL) = $3)
ORDER BY kind, key LIMIT $4 OFFSET $5`, p.Kind, p.Enabled, p.Dead, p.Limit, p.Offset)
	if err != nil {
		return nil, fmt.Errorf("scheduler: listing recurring jobs: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Recurring, error) { return scanRecurring(row) })
	if err != nil {
		return nil, fmt.Errorf("scheduler: listing recurring jobs: %w", err)
	}
	return list, nil
}

// RunAtMin and RunAtMax bound the times a recurring job is given to run at
// (NextRunAt, EnsureTx's firstRunAt): the range of PostgreSQL's
// timestamptz, queue.TimeMin to queue.TimeMax. A time outside it cannot be
// stored, or would be stored as another time.
var (
	RunAtMin = queue.TimeMin
	RunAtMax = queue.TimeMax
)

// checkRunAt refuses a time outside RunAtMin to RunAtMax, naming what it
// is the time of.
func checkRunAt(what string, t time.Time) error {
	if !queue.InTimeRange(t) {
		return fmt.Errorf("scheduler: %s at %s is outside the times PostgreSQL stores (%s to %s)",
			what, t.UTC().Format(time.RFC3339), RunAtMin.Format(time.RFC3339), RunAtMax.Format(time.RFC3339))
	}
	return nil
}

// Metadata keys of the River jobs of recurring jobs.
const (
	// MetadataRecurringID holds the ID of the row; the middleware finds
	// the row of a run through it.
	MetadataRecurringID = "braid_recurring_id"

	// MetadataRecurringKey holds the entity key, for operators.
	MetadataRecurringKey = "braid_recurring_key"
)

// A row whose River job cannot be inserted (say its kind has no worker in
// this process) is released and tried again after insertFailureRetry, with
// the error in last_error. It does not count as a failed run.
const (
	insertFailureRetry  = time.Minute
	insertFailurePrefix = "inserting the River job failed: "
)

// claimedRow is a recurring job claimed for a run.
type claimedRow struct {
	id       int64
	kind     string
	key      string
	args     json.RawMessage
	queue    string
	priority int16
	enabled  bool       // false for a disabled row whose lost run is reclaimed: it is released, not run
	previous *time.Time // running_since before the claim: set when reclaimed
	failures int32      // consecutive_failures
	jobState string     // the state of the row's last River job, "deleted" when it is gone
	jobError *string    // that job's last error
}

// claimRecurring claims due recurring jobs and inserts their River jobs in
// the same transaction. It returns how many rows it claimed.
func (s *Scheduler) claimRecurring(ctx context.Context, lease *leases.Lease) (int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("scheduler: beginning: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if lease != nil {
		if err := s.cfg.Leases.CheckTx(ctx, tx, lease); err != nil {
			return 0, err
		}
	}
	rows, err := tx.Query(ctx, `
WITH due AS (
    SELECT r.id, r.running_since AS previous,
           coalesce(j.state::text, 'deleted') AS job_state, j.errors[cardinality(j.errors)]->>'error' AS job_error
      FROM braid_recurring r LEFT JOIN river_job j ON j.id = r.job_id
    WHERE r.dead_at IS NULL AND r.next_run_at <= braid_now()
      AND ((r.enabled AND r.running_since IS NULL) OR (
          -- A lost run is reclaimed whether or not the row is enabled; a
          -- disabled row is only released, never run.
          r.running_since <= braid_now() - $1::bigint * interval '1 microsecond'
          -- Never while the claimed run's job is live (available, scheduled,
          -- pending, retryable or running), however long it waits.
          AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))))
    ORDER BY r.next_run_at
    LIMIT $2
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE braid_recurring r SET running_since = braid_now(), updated_at = braid_now()
FROM due WHERE r.id = due.id
RETURNING r.id, r.kind, r.key, r.args, r.queue, r.priority, r.enabled, due.previous, r.consecutive_failures,
    due.job_state, due.job_error`,
		s.cfg.RecurringStaleAfter.Microseconds(), s.cfg.RecurringBatchSize)
	if err != nil {
		return 0, fmt.Errorf("scheduler: claiming recurring jobs: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedRow, error) {
		var c claimedRow
		err := row.Scan(&c.id, &c.kind, &c.key, &c.args, &c.queue, &c.priority, &c.enabled, &c.previous, &c.failures, &c.jobState, &c.jobError)
		return c, err
	})
	if err != nil {
		return 0, fmt.Errorf("scheduler: claiming recurring jobs: %w", err)
	}
	n := len(claimed)
	if n == 0 {
		return 0, nil
	}
	// A reclaimed row's run was lost: unless its River job completed (the
	// handler succeeded; only the write of its outcome was lost), it counts
	// as a failed run, and the row backs off (or is parked) rather than
	// run at once. A disabled row is reclaimed too, so that it does not
	// show as running for ever and, enabled again, runs at its time: its
	// lost run counts as a failure as an enabled row's does, but the row
	// is only released, not run.
	var run []claimedRow
	for _, c := range claimed {
		if c.previous == nil || c.jobState == string(rivertype.JobStateCompleted) {
			if !c.enabled {
				s.logger.InfoContext(ctx, "scheduler: released a disabled recurring job whose run completed without a recorded outcome",
					slog.String("kind", c.kind), slog.String("key", c.key), slog.Time("running_since", *c.previous))
				if _, err := tx.Exec(ctx, `UPDATE braid_recurring SET running_since = NULL, updated_at = braid_now() WHERE id = $1`, c.id); err != nil {
					return 0, fmt.Errorf("scheduler: releasing recurring job %s/%s: %w", c.kind, c.key, err)
				}
				continue
			}
			if c.previous != nil {
				s.logger.WarnContext(ctx, "scheduler: reclaimed a recurring job whose run completed without a recorded outcome; running it again",
					slog.String("kind", c.kind), slog.String("key", c.key), slog.Time("running_since", *c.previous))
			}
			run = append(run, c)
			continue
		}
		job := c.jobState
		if c.jobError != nil {
			job += ": " + *c.jobError
		}
		msg := fmt.Sprintf("the run claimed at %s ended without recording an outcome (its River job: %s); its process may have died",
			c.previous.UTC().Format(time.RFC3339), job)
		s.logger.WarnContext(ctx, "scheduler: reclaimed a recurring job whose run ended without a recorded outcome; counting it as a failure",
			slog.String("kind", c.kind), slog.String("key", c.key), slog.Time("running_since", *c.previous), slog.String("river_job", job))
		if err := s.failures.recordFailure(ctx, tx, c.id, c.kind, int(c.failures)+1, msg); err != nil {
			return 0, err
		}
	}
	claimed = run
	if len(claimed) == 0 {
		return n, commit(ctx, tx)
	}

	params := make([]queue.InsertManyParams, len(claimed))
	for i, c := range claimed {
		meta, err := json.Marshal(map[string]any{MetadataRecurringID: c.id, MetadataRecurringKey: c.key})
		if err != nil {
			return 0, err
		}
		params[i] = queue.InsertManyParams{
			Args: rawJobArgs{kind: c.kind, args: c.args},
			// One attempt: the row's backoff is the retry.
			InsertOpts: &queue.InsertOpts{InsertOpts: river.InsertOpts{
				Queue: c.queue, Priority: int(c.priority), MaxAttempts: 1, Metadata: meta,
			}},
		}
	}

	ids := make([]int64, 0, len(claimed))
	jobIDs := make([]int64, 0, len(claimed))
	if results, err := insertManySavepoint(ctx, tx, s.cfg.Queue, params); err == nil {
		for i, r := range results {
			ids, jobIDs = append(ids, claimed[i].id), append(jobIDs, r.Job.ID)
		}
	} else {
		if errors.Is(err, errTxBroken) {
			return 0, err
		}
		// One row's job cannot be inserted (for example its kind has no
		// worker in this process); insert one by one so the others run.
		for i, c := range claimed {
			results, err := insertManySavepoint(ctx, tx, s.cfg.Queue, params[i:i+1])
			if err == nil {
				ids, jobIDs = append(ids, c.id), append(jobIDs, results[0].Job.ID)
				continue
			}
			if errors.Is(err, errTxBroken) {
				return 0, err
			}
			s.logger.ErrorContext(ctx, "scheduler: cannot insert the job of a recurring job; retrying later",
				slog.String("kind", c.kind), slog.String("key", c.key), slog.String("error", err.Error()))
			if _, err := tx.Exec(ctx, `UPDATE braid_recurring SET running_since = NULL, last_error = $2,
    next_run_at = braid_now() + $3::bigint * interval '1 microsecond', updated_at = braid_now() WHERE id = $1`,
				c.id, queue.SanitizeErrorText(insertFailurePrefix+err.Error(), 0), insertFailureRetry.Microseconds()); err != nil {
				return 0, fmt.Errorf("scheduler: releasing recurring job %s/%s: %w", c.kind, c.key, err)
			}
		}
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE braid_recurring r SET job_id = v.job_id
FROM unnest($1::bigint[], $2::bigint[]) AS v(id, job_id) WHERE r.id = v.id`, ids, jobIDs); err != nil {
			return 0, fmt.Errorf("scheduler: recording recurring job IDs: %w", err)
		}
	}
	if err := commit(ctx, tx); err != nil {
		return 0, err
	}
	s.logger.DebugContext(ctx, "scheduler: claimed recurring jobs", slog.Int("count", len(ids)))
	return n, nil
}

func insertManySavepoint(ctx context.Context, tx pgx.Tx, q *queue.Queue, params []queue.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errTxBroken, err)
	}
	results, err := q.InsertManyTx(ctx, sp, params)
	if err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return nil, fmt.Errorf("%w: %w (rolling back: %w)", errTxBroken, err, rbErr)
		}
		return nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", errTxBroken, err)
	}
	return results, nil
}

// recurringIDOf returns the recurring row of a River job from its metadata.
func recurringIDOf(metadata []byte) (int64, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(metadata, &m); err != nil {
		return 0, false
	}
	raw, ok := m[MetadataRecurringID]
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, false
	}
	return id, true
}
