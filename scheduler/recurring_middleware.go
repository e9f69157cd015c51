package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
)

const (
	// RecurringIntervalDefault is when a recurring job runs again after a
	// success, when its handler did not choose (NextRunAt) and its kind has
	// no interval of its own.
	RecurringIntervalDefault = time.Hour

	// RecurringMaxFailuresDefault is how many consecutive failures park a
	// recurring job as a dead letter.
	RecurringMaxFailuresDefault = 10
)

// ErrNotRecurring is returned by NextRunAt outside the run of a recurring
// job.
var ErrNotRecurring = errors.New("scheduler: not running a recurring job")

// RecurringConfig configures a RecurringMiddleware. The zero value is
// valid: every field has a documented default.
type RecurringConfig struct {
	// Interval is when a job runs again after a success, when its handler
	// did not call NextRunAt and Intervals has no entry for its kind.
	//
	// Defaults to RecurringIntervalDefault (1h).
	Interval time.Duration

	// Intervals overrides Interval per kind.
	Intervals map[string]time.Duration

	// MaxFailures is how many consecutive failures park a job as a dead
	// letter. A negative value never parks.
	//
	// Defaults to RecurringMaxFailuresDefault (10).
	MaxFailures int

	// Backoff is the delay before the next run after the n-th consecutive
	// failure: Backoff.Delay(n).
	//
	// Defaults to queue.DefaultBackoff: 1m·2^(n-1), capped at 24h, ±20%.
	Backoff queue.Backoff

	// Logger receives outcomes that could not be recorded.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// RecurringMiddleware is the River worker middleware that records the
// outcome of each run of a recurring job on its row. Add it to the River
// client's (or queue's) Middleware; it passes every other job through
// untouched.
//
// The handler of a recurring job is an ordinary River worker for its kind.
// Its River job is inserted with MaxAttempts 1: River does not retry it,
// because the row's backoff is the retry. After the handler returns:
//
//   - success: next_run_at is the time the handler passed to NextRunAt,
//     or now plus the delay it passed to NextRunIn, or else now plus the
//     kind's interval (now is the database's clock, braid_now());
//     consecutive_failures and last_error are reset;
//   - river.JobSnooze(d): counts as a success that runs again in d; the
//     River job completes rather than snoozing;
//   - an error, a panic or river.JobCancel: consecutive_failures grows,
//     last_error is stored and next_run_at is now plus Backoff; after
//     MaxFailures in a row the job is parked (dead_at) until Revive. The
//     error is returned to River, so the attempt fails (and its River job
//     ends discarded) as any other. A panic never escapes;
//   - a stop: when the queue stops and cancels the running handler (Stop
//     past its deadline), and the handler returns that cancellation, River
//     makes the job available again rather than fail it. Nothing is
//     recorded: the row stays claimed by that job, which runs again as the
//     row's run once a queue works it. A shutdown is no failed run.
//
// A row whose run was reclaimed as stale (the run then counts as a
// failure unless its River job completed; see Config.Recurring), or that
// was deleted, ignores the late outcome of the old run.
//
// Before the handler runs, the middleware checks that the job is its
// row's run. A job retried by hand (from River's dead letters, say) runs
// only if it is the row's last job and the row is idle, enabled and not
// parked; it then runs as the row's run. Any other is cancelled
// (river.JobCancel) with the reason, so that the entity never runs twice
// at once: revive a parked row with Revive. So is a job whose row was
// deleted (DeleteRecurring), even when the same kind and key were ensured
// again since, and a job whose row cannot be read does not run either.
//
// The span of the run (the queue's river.job <kind> span, when the
// middleware is installed after braid's own, as Config.Middleware of the
// queue is) gets the attributes braid.recurring.kind,
// braid.recurring.key and braid.recurring.id, so that the runs of one
// entity can be found in a trace viewer.
type RecurringMiddleware struct {
	river.MiddlewareDefaults

	pool *pgxpool.Pool
	cfg  RecurringConfig
}

var _ rivertype.WorkerMiddleware = (*RecurringMiddleware)(nil)

// NewRecurringMiddleware returns the middleware, writing outcomes through
// pool. A nil cfg means all defaults. It returns an error naming the
// offending field when the configuration is invalid; it never panics.
func NewRecurringMiddleware(pool *pgxpool.Pool, cfg *RecurringConfig) (*RecurringMiddleware, error) {
	if pool == nil {
		return nil, errors.New("scheduler: NewRecurringMiddleware needs a non-nil pool")
	}
	c, err := recurringConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &RecurringMiddleware{pool: pool, cfg: c}, nil
}

// recurringConfig is cfg with its defaults filled in, or an error naming
// the offending field.
func recurringConfig(cfg *RecurringConfig) (RecurringConfig, error) {
	var c RecurringConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval < 0 {
		return c, fmt.Errorf("scheduler: RecurringConfig.Interval is %s; it must be positive (or zero for the default %s)", c.Interval, RecurringIntervalDefault)
	}
	if c.Interval == 0 {
		c.Interval = RecurringIntervalDefault
	}
	for kind, d := range c.Intervals {
		if d <= 0 {
			return c, fmt.Errorf("scheduler: RecurringConfig.Intervals[%q] is %s; it must be positive", kind, d)
		}
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = RecurringMaxFailuresDefault
	}
	if c.Backoff == (queue.Backoff{}) {
		c.Backoff = queue.DefaultBackoff
	}
	if err := c.Backoff.Validate(); err != nil {
		return c, fmt.Errorf("scheduler: RecurringConfig.Backoff: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

type runStateKey struct{}

// runState carries the handler's choice of next run: a time (NextRunAt),
// or a delay from the database's clock (NextRunIn).
type runState struct {
	mu       sync.Mutex
	next     time.Time
	in       time.Duration
	relative bool
}

// NextRunAt sets when the recurring job whose handler is running runs next
// after this run succeeds: at t, an absolute time, stored as given. Call it
// from the handler with the context River passed to Work. It returns
// ErrNotRecurring outside the run of a recurring job, and an error for a t
// outside RunAtMin to RunAtMax, which then has no effect. A failed run
// ignores it and backs off. The last call of NextRunAt or NextRunIn wins.
//
// The database's clock (braid_now()) decides when the job is due, so t
// should come from it: a time read in the handler's transaction, say. A
// time computed from the worker's clock (time.Now().Add(d)) carries that
// clock's skew, and, under a test kit that moves the database's clock, is
// in its past; for "d from now" use NextRunIn.
func NextRunAt(ctx context.Context, t time.Time) error {
	st, ok := ctx.Value(runStateKey{}).(*runState)
	if !ok {
		return ErrNotRecurring
	}
	if t.IsZero() {
		return errors.New("scheduler: NextRunAt needs a non-zero time")
	}
	if err := checkRunAt("NextRunAt", t); err != nil {
		return err
	}
	st.mu.Lock()
	st.next, st.relative = t, false
	st.mu.Unlock()
	return nil
}

// NextRunIn sets the recurring job whose handler is running to run next d
// after this run succeeds, on the database's clock: its next_run_at is
// braid_now() + d when the outcome is recorded. Call it from the handler
// with the context River passed to Work. It returns ErrNotRecurring outside
// the run of a recurring job, and an error for a negative d (zero runs
// again at once). A failed run ignores it and backs off. The last call of
// NextRunAt or NextRunIn wins.
func NextRunIn(ctx context.Context, d time.Duration) error {
	st, ok := ctx.Value(runStateKey{}).(*runState)
	if !ok {
		return ErrNotRecurring
	}
	if d < 0 {
		return fmt.Errorf("scheduler: NextRunIn needs a delay of zero or more, got %s", d)
	}
	st.mu.Lock()
	st.in, st.relative = d, true
	st.mu.Unlock()
	return nil
}

// Work implements rivertype.WorkerMiddleware.
func (m *RecurringMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(ctx context.Context) error) error {
	if !bytes.Contains(job.Metadata, []byte(MetadataRecurringID)) {
		return doInner(ctx)
	}
	id, ok := recurringIDOf(job.Metadata)
	if !ok {
		return doInner(ctx)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(recurringAttributes(id, job)...)
	}
	if err := m.admit(ctx, id, job); err != nil {
		return err
	}
	st := &runState{}
	err := callSafely(context.WithValue(ctx, runStateKey{}, st), doInner)

	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	var snooze *rivertype.JobSnoozeError
	switch {
	case err == nil:
		st.mu.Lock()
		next, in, relative := st.next, st.in, st.relative
		st.mu.Unlock()
		interval, ok := m.cfg.Intervals[job.Kind]
		if !ok {
			interval = m.cfg.Interval
		}
		if relative {
			next, interval = time.Time{}, in
		}
		m.succeed(wctx, id, job, next, interval)
	case errors.As(err, &snooze):
		m.succeed(wctx, id, job, time.Time{}, snooze.Duration)
		err = nil
	case stoppedByClient(ctx, err):
		// River puts the job back to available, its attempt given back,
		// and runs it again as the row's run (admit): the row stays
		// claimed by it, and no failure is recorded.
		m.cfg.Logger.InfoContext(wctx, "scheduler: a recurring job's run was interrupted by a stop; it runs again when its job is worked",
			slog.String("kind", job.Kind), slog.Int64("job_id", job.ID), slog.Int64("recurring_id", id))
	default:
		m.fail(wctx, id, job, err)
	}
	return err
}

// stoppedByClient reports whether the handler returned err because the
// River client is stopping and cancelled the job's context (a soft stop:
// Queue.Stop past its deadline, River's StopAndCancel). River then neither
// fails nor discards the job but makes it available again with its attempt
// given back, so the run is not over and is no failure.
//
// River marks such a stop with a context cause of its own that it does not
// export, so this is told apart from the causes that do end the attempt: a
// deadline (the job's timeout), a plain cancellation of River's start
// context, a remote or explicit cancel (river.JobCancel), and braid's
// queue.ErrCancelRequested and queue.ErrJobNotRunning. Should it ever take
// another cancellation for a stop, the row merely stays claimed until the
// job is final and RecurringStaleAfter has passed; the stale reclaim then
// counts the lost run from the job's final state.
func stoppedByClient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() == nil {
		return false
	}
	var jc *rivertype.JobCancelError
	if errors.As(err, &jc) {
		return false
	}
	cause := context.Cause(ctx)
	if cause == nil || errors.As(cause, &jc) || errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) ||
		errors.Is(cause, queue.ErrCancelRequested) || errors.Is(cause, queue.ErrJobNotRunning) {
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, cause)
}

// admitSQL locks a recurring row and reads whether job $2 is its run,
// adopting the job when it is the row's last one, no longer running, and
// the row may run (enabled, not parked): an operator retried that job
// by hand, and it runs as the row's run in place of the next one.
const admitSQL = `
WITH r AS (
    SELECT job_id, running_since IS NOT NULL AS running, dead_at IS NOT NULL AS dead, enabled
    FROM braid_recurring WHERE id = $1 FOR UPDATE
), adopted AS (
    UPDATE braid_recurring b SET running_since = braid_now(), updated_at = braid_now()
    FROM r WHERE b.id = $1 AND r.job_id = $2 AND NOT r.running AND NOT r.dead AND r.enabled
    RETURNING 1
)
SELECT r.job_id, r.running, r.dead, r.enabled, EXISTS (SELECT 1 FROM adopted) FROM r`

// admit decides whether job may run the handler of recurring row id: it
// returns nil when it may, and otherwise the error that ends the attempt
// without running the handler. It runs when it is the row's claimed run,
// or when it is the row's last job retried by hand (see admitSQL). It is
// cancelled (river.JobCancel), with the reason, when another job has since
// run or is running for the row, when the row is parked or disabled, or
// when the row is gone: an old job retried by hand, say from River's dead
// letters, or a job left in the queue by a row that was deleted (and
// perhaps ensured again, under a new ID, with a run of its own), would
// otherwise run the entity beside the row's own runs. When the row cannot
// be read, the job does not run either: the attempt fails with the error
// (or, when its context was cancelled by a stop, ends as River's soft stop,
// and the job runs later).
func (m *RecurringMiddleware) admit(ctx context.Context, id int64, job *rivertype.JobRow) error {
	var (
		current                         *int64
		running, dead, enabled, adopted bool
	)
	err := m.pool.QueryRow(ctx, admitSQL, id, job.ID).Scan(&current, &running, &dead, &enabled, &adopted)
	if errors.Is(err, pgx.ErrNoRows) {
		return river.JobCancel(fmt.Errorf("recurring job %d was deleted; its job does not run", id))
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("scheduler: cannot read whether job %d is the run of recurring job %d, so it does not run: %w", job.ID, id, err)
	}
	mine := current != nil && *current == job.ID
	switch {
	case mine && (running || adopted):
		return nil
	case !mine && current != nil:
		return river.JobCancel(fmt.Errorf("recurring job %d has run since as job %d; this older job does not run", id, *current))
	case dead:
		return river.JobCancel(fmt.Errorf("recurring job %d is parked as a dead letter; revive it (Scheduler.Revive) to run it again", id))
	case !enabled:
		return river.JobCancel(fmt.Errorf("recurring job %d is disabled", id))
	default:
		return river.JobCancel(fmt.Errorf("recurring job %d has no run to adopt this job as", id))
	}
}

// Attribute keys that name a recurring job on the span of its run.
const (
	// AttributeRecurringKind is the recurring job's kind.
	AttributeRecurringKind = "braid.recurring.kind"
	// AttributeRecurringKey is its entity key (a feed, a tenant), the key
	// given to Ensure.
	AttributeRecurringKey = "braid.recurring.key"
	// AttributeRecurringID is the ID of its row.
	AttributeRecurringID = "braid.recurring.id"
)

// recurringAttributes name the recurring job that job runs: its kind, its
// entity key and its row, so that the runs of one entity can be found
// among the river.job spans of its kind.
func recurringAttributes(id int64, job *rivertype.JobRow) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String(AttributeRecurringKind, job.Kind),
		attribute.Int64(AttributeRecurringID, id),
	}
	var md map[string]json.RawMessage
	var key string
	if json.Unmarshal(job.Metadata, &md) == nil && json.Unmarshal(md[MetadataRecurringKey], &key) == nil {
		attrs = append(attrs, attribute.String(AttributeRecurringKey, key))
	}
	return attrs
}

// callSafely calls fn, turning a panic into an error with the stack.
func callSafely(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &queue.PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return fn(ctx)
}

const succeedSQL = `
WITH u AS (
    UPDATE braid_recurring SET running_since = NULL, last_run_at = braid_now(),
        next_run_at = coalesce($3::timestamptz, braid_now() + $4::bigint * interval '1 microsecond'),
        last_error = NULL, consecutive_failures = 0, updated_at = braid_now()
    WHERE id = $1 AND job_id = $2 AND running_since IS NOT NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM u), pg_notify($5, '')`

func (m *RecurringMiddleware) succeed(ctx context.Context, id int64, job *rivertype.JobRow, next time.Time, interval time.Duration) {
	var chosen *time.Time
	if !next.IsZero() {
		chosen = &next
	}
	var n int64
	err := m.pool.QueryRow(ctx, succeedSQL, id, job.ID, chosen, interval.Microseconds(), NotifyChannel).Scan(&n, nil)
	m.recorded(ctx, job, n, err)
}

func (m *RecurringMiddleware) fail(ctx context.Context, id int64, job *rivertype.JobRow, runErr error) {
	var n int64
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		var failures int32
		err := tx.QueryRow(ctx, `SELECT consecutive_failures FROM braid_recurring
WHERE id = $1 AND job_id = $2 AND running_since IS NOT NULL FOR UPDATE`, id, job.ID).Scan(&failures)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := m.cfg.recordFailure(ctx, tx, id, job.Kind, int(failures)+1, runErr.Error()); err != nil {
			return err
		}
		n = 1
		return notify(ctx, tx)
	})
	m.recorded(ctx, job, n, err)
}

// recordFailure records the count-th consecutive failure of the recurring
// row id, locked by tx, with its error: the row backs off (Backoff), or is
// parked as a dead letter at MaxFailures. The outcome of a failed run and
// a run lost with its process (reclaimed by the scheduler) both go
// through it.
func (c *RecurringConfig) recordFailure(ctx context.Context, tx pgx.Tx, id int64, kind string, count int, errText string) error {
	dead := c.MaxFailures > 0 && count >= c.MaxFailures
	if _, err := tx.Exec(ctx, `
UPDATE braid_recurring SET running_since = NULL, last_run_at = braid_now(), consecutive_failures = $2, last_error = $3,
    next_run_at = braid_now() + $4::bigint * interval '1 microsecond',
    dead_at = CASE WHEN $5 THEN braid_now() ELSE dead_at END, updated_at = braid_now()
WHERE id = $1`, id, count, queue.SanitizeErrorText(errText, 0), c.Backoff.Delay(count).Microseconds(), dead); err != nil {
		return fmt.Errorf("scheduler: recording the failure of recurring job %d: %w", id, err)
	}
	if dead {
		c.Logger.WarnContext(ctx, "scheduler: recurring job parked as a dead letter", slog.String("kind", kind),
			slog.Int64("recurring_id", id), slog.Int("consecutive_failures", count), slog.String("error", errText))
	}
	return nil
}

func (m *RecurringMiddleware) recorded(ctx context.Context, job *rivertype.JobRow, n int64, err error) {
	switch {
	case err != nil:
		m.cfg.Logger.ErrorContext(ctx, "scheduler: recording the outcome of a recurring job failed; it will be reclaimed when stale",
			slog.String("kind", job.Kind), slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
	case n == 0:
		m.cfg.Logger.WarnContext(ctx, "scheduler: outcome of a recurring job ignored: its row was reclaimed or deleted",
			slog.String("kind", job.Kind), slog.Int64("job_id", job.ID))
	}
}
