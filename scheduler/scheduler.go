package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/listen"
	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
)

const (
	// LeaseNameDefault is the lease under which one process, across all
	// processes, fires schedules and claims recurring jobs.
	LeaseNameDefault = "braid:scheduler"

	// PollIntervalDefault is the longest the leader sleeps between looks at
	// the tables. It normally sleeps until the earliest next_run_at, and
	// wakes early on a notification when a schedule or recurring job changes.
	PollIntervalDefault = time.Second

	// MissedSlotGraceDefault is how late a slot may be reached and still
	// fire under CatchUpSkip.
	MissedSlotGraceDefault = time.Minute

	// RecurringStaleAfterDefault is how long a claimed recurring row whose
	// River job has finished or vanished without a recorded outcome waits
	// before it can be claimed again.
	RecurringStaleAfterDefault = 5 * time.Minute

	// RecurringBatchSizeDefault is how many due recurring rows one
	// transaction claims.
	RecurringBatchSizeDefault = 100

	// MaxArgsBytesDefault caps the JSON args of a schedule (its job's args or
	// its workflow's input) and of a recurring job: 64 KiB.
	MaxArgsBytesDefault = 64 << 10

	// QueueDefault is the River queue of jobs that name no queue.
	QueueDefault = "default"

	// PriorityDefault is the River priority (1, most urgent, to 4) of jobs
	// that name none: queue.PriorityNormal, as for every braid insert. It
	// matches the column defaults of braid_schedules and braid_recurring.
	PriorityDefault = int(queue.PriorityDefault)

	// NotifyChannel is the PostgreSQL channel on which every change to a
	// schedule or recurring job is announced, so the leader wakes early.
	NotifyChannel = "braid_scheduler"

	// maxFiresPerTick bounds the schedules processed in one tick, so
	// recurring jobs are claimed even while schedules catch up.
	maxFiresPerTick = 1000

	// busyRetry is the pause when rows are due but could not be taken (they
	// are locked by a writer), so the leader does not spin.
	busyRetry = 20 * time.Millisecond

	// writeTimeout bounds bookkeeping writes that must happen even after
	// their caller's context ended.
	writeTimeout = 10 * time.Second
)

// FireRetryBackoffDefault is the default Config.FireRetryBackoff: 1s·2^(n-1)
// after the n-th failed fire in a row, capped at 1m, ±20%.
var FireRetryBackoffDefault = queue.Backoff{Strategy: queue.Exponential, Base: time.Second, Max: time.Minute, Jitter: 0.2}

// WorkflowStarter starts a workflow run inside a transaction. The workflow
// engine implements it; the scheduler calls it for schedules whose target is
// a workflow. It must return the existing run, not start a second one, when
// idempotencyKey was used before.
type WorkflowStarter interface {
	StartWorkflowTx(ctx context.Context, tx pgx.Tx, workflow string, input json.RawMessage, idempotencyKey string) (runID string, err error)
}

// WorkflowRegistry is implemented by a WorkflowStarter that knows which
// workflows exist; the workflow engine does. When Config.Workflows
// implements it, Create and Update reject a schedule whose target is a
// workflow it does not know.
type WorkflowRegistry interface {
	KnowsWorkflow(name string) bool
}

// Config configures a Scheduler. The zero value is valid for managing
// schedules and recurring jobs; Start also needs Queue.
type Config struct {
	// Queue inserts the jobs of schedules and recurring jobs, in the same
	// transaction that advances them. It is required by Start; otherwise
	// it only checks kinds (below). It need not be started in this
	// process, but its River
	// client must know the kinds of the jobs (or skip that check).
	//
	// When set, Create and Update also check the kind of a job target with
	// queue.Queue.KnowsKind, and reject a kind that the queue's workers do
	// not work (an error matching ErrUnknownTarget). An insert-only queue
	// knows no kinds, so with it, or without a Queue, any kind is accepted.
	Queue *queue.Queue

	// Workflows starts the runs of schedules whose target is a workflow.
	// When nil, such schedules record an error at each slot instead of
	// firing, and retry it (see FireRetryBackoff).
	//
	// When it implements WorkflowRegistry (the workflow engine does),
	// Create and Update reject a workflow it does not know (an error
	// matching ErrUnknownTarget); otherwise any workflow name is accepted.
	Workflows WorkflowStarter

	// Leases elects the one process that fires schedules.
	//
	// Defaults to a leases.Manager on the same pool with default settings.
	Leases *leases.Manager

	// LeaseName is the lease the leader holds.
	//
	// Defaults to LeaseNameDefault ("braid:scheduler").
	LeaseName string

	// PollInterval is the longest the leader sleeps between looks at the
	// tables.
	//
	// Defaults to PollIntervalDefault (1s).
	PollInterval time.Duration

	// MissedSlotGrace is how late a slot may be reached and still fire
	// under CatchUpSkip. A slot reached later counts as missed.
	//
	// Defaults to MissedSlotGraceDefault (1m).
	MissedSlotGrace time.Duration

	// RecurringStaleAfter guards a claimed recurring row whose run ended
	// without its outcome being recorded: its River job finished
	// (completed, cancelled or discarded) or was deleted, say because the
	// process died during the handler or between its end and the write of
	// the outcome. Such a row is reclaimed once it has been claimed for
	// longer than RecurringStaleAfter, and the lost run counts as a
	// failure unless its job completed (see Recurring). A disabled row is
	// reclaimed too, and released without being run, so that it does not
	// show as running for ever. A row whose job is
	// still live
	// (waiting in a backlog, scheduled, retryable or running) is never
	// claimed again, however long it waits, so at most one job per row is
	// ever live.
	//
	// Defaults to RecurringStaleAfterDefault (5m).
	RecurringStaleAfter time.Duration

	// Recurring is the RecurringMiddleware that records the outcomes of
	// recurring jobs (the one in the queue's middleware). A run lost with
	// its process, so that no outcome was recorded, counts as a failed run
	// once RecurringStaleAfter reclaims its row: the row backs off by the
	// middleware's Backoff, or is parked as a dead letter at its
	// MaxFailures, as after a run that failed. A recurring job whose run
	// kills its process every time thus reaches its dead letter rather
	// than be run again, and kill its process again, for ever. A run whose
	// River job completed (the handler succeeded, and only the write of
	// its outcome was lost) is no failure: its row runs again at once.
	//
	// Defaults to the RecurringMiddleware in Queue's middleware
	// (queue.Queue.Middleware), or, when it has none, to the middleware
	// defaults: RecurringMaxFailuresDefault and queue.DefaultBackoff.
	Recurring *RecurringMiddleware

	// RecurringBatchSize is how many due recurring rows one transaction
	// claims.
	//
	// Defaults to RecurringBatchSizeDefault (100).
	RecurringBatchSize int

	// MaxArgsBytes caps the encoded JSON args of a schedule (Create,
	// Update) and of a recurring job (Ensure): larger args are rejected
	// with an *ArgsTooLargeError that names the schedule or the recurring
	// job and the limit.
	//
	// Defaults to MaxArgsBytesDefault (64 KiB).
	MaxArgsBytes int

	// FireRetryBackoff is how long a schedule's slot waits before it is
	// tried again after its job could not be inserted or its run could not
	// be started: FireRetryBackoff.Delay(n) after the n-th failure in a
	// row. The slot stays due, keeps its time (and so its idempotency
	// key), and is never dropped for the failure.
	//
	// Defaults to FireRetryBackoffDefault: 1s·2^(n-1), capped at 1m, ±20%.
	FireRetryBackoff queue.Backoff

	// Logger receives fires, skips and errors.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// Scheduler fires cron schedules and claims recurring jobs, and manages
// both. Its write methods each have a …Tx twin that works inside the
// caller's transaction. A Scheduler is safe for concurrent use.
type Scheduler struct {
	pool   *pgxpool.Pool
	cfg    Config
	logger *slog.Logger
	// failures is how a lost run of a recurring job counts (Recurring).
	failures RecurringConfig

	exprMu    sync.Mutex
	exprCache map[[2]string]*Expression

	mu         sync.Mutex
	cancel     context.CancelFunc // stops the leader loop
	hardCancel context.CancelFunc // cancels the transaction in flight
	done       chan struct{}      // closed once every goroutine of Start returned
}

// New returns a Scheduler on pool. A nil cfg means all defaults. It returns
// an error naming the offending field when the configuration is invalid; it
// never panics.
func New(pool *pgxpool.Pool, cfg *Config) (*Scheduler, error) {
	if pool == nil {
		return nil, errors.New("scheduler: New needs a non-nil pool")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LeaseName == "" {
		c.LeaseName = LeaseNameDefault
	}
	durations := []struct {
		name  string
		value *time.Duration
		def   time.Duration
	}{
		{"PollInterval", &c.PollInterval, PollIntervalDefault},
		{"MissedSlotGrace", &c.MissedSlotGrace, MissedSlotGraceDefault},
		{"RecurringStaleAfter", &c.RecurringStaleAfter, RecurringStaleAfterDefault},
	}
	for _, d := range durations {
		if *d.value < 0 {
			return nil, fmt.Errorf("scheduler: Config.%s is %s; it must be positive (or zero for the default %s)", d.name, *d.value, d.def)
		}
		if *d.value == 0 {
			*d.value = d.def
		}
	}
	if c.PollInterval < time.Millisecond {
		return nil, fmt.Errorf("scheduler: Config.PollInterval is %s; it must be at least 1ms", c.PollInterval)
	}
	if c.RecurringBatchSize < 0 {
		return nil, fmt.Errorf("scheduler: Config.RecurringBatchSize is %d; it must be positive (or zero for the default %d)", c.RecurringBatchSize, RecurringBatchSizeDefault)
	}
	if c.RecurringBatchSize == 0 {
		c.RecurringBatchSize = RecurringBatchSizeDefault
	}
	if c.MaxArgsBytes < 0 {
		return nil, fmt.Errorf("scheduler: Config.MaxArgsBytes is %d; it must be positive (or zero for the default %d)", c.MaxArgsBytes, MaxArgsBytesDefault)
	}
	if c.MaxArgsBytes == 0 {
		c.MaxArgsBytes = MaxArgsBytesDefault
	}
	if c.FireRetryBackoff == (queue.Backoff{}) {
		c.FireRetryBackoff = FireRetryBackoffDefault
	}
	if err := c.FireRetryBackoff.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler: Config.FireRetryBackoff: %w", err)
	}
	if c.Leases == nil {
		m, err := leases.New(pool, &leases.Config{Logger: c.Logger})
		if err != nil {
			return nil, fmt.Errorf("scheduler: creating lease manager: %w", err)
		}
		c.Leases = m
	}
	if c.Recurring == nil && c.Queue != nil {
		for _, m := range c.Queue.Middleware() {
			if rm, ok := m.(*RecurringMiddleware); ok {
				c.Recurring = rm
				break
			}
		}
	}
	failures := RecurringConfig{Logger: c.Logger}
	if c.Recurring != nil {
		failures = c.Recurring.cfg
	}
	failures, err := recurringConfig(&failures)
	if err != nil {
		return nil, err
	}
	return &Scheduler{
		pool:      pool,
		cfg:       c,
		logger:    c.Logger,
		failures:  failures,
		exprCache: make(map[[2]string]*Expression),
	}, nil
}

// Start begins competing for the scheduler lease in the background. While
// this process holds it, it fires due schedules and claims due recurring
// jobs, until Stop.
//
// ctx bounds start-up only: Start returns its error if it has already
// ended, and cancelling it later does not stop the Scheduler (its values,
// such as a logger's or a tracer's, are kept). Start returns an error when
// Config.Queue is nil or the Scheduler is already started.
func (s *Scheduler) Start(ctx context.Context) error {
	if s.cfg.Queue == nil {
		return errors.New("scheduler: Start needs Config.Queue to insert jobs")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("scheduler: starting: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return errors.New("scheduler: already started")
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	hard, hardCancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.cancel, s.hardCancel, s.done = cancel, hardCancel, done
	go func() {
		defer close(done)
		lead := func(ctx context.Context, lease *leases.Lease) error { return s.lead(ctx, hard, lease) }
		if err := s.cfg.Leases.Lead(runCtx, s.cfg.LeaseName, lead); err != nil {
			s.logger.ErrorContext(runCtx, "scheduler: leader loop ended", slog.String("error", err.Error()))
		}
	}()
	return nil
}

// Stop stops firing and returns only after every goroutine that Start
// started has returned, and the lease has been released (or, if that
// failed, left to expire).
//
// The transaction in flight, if any, is allowed to finish; no other is
// begun. If ctx ends first, the transaction in flight is cancelled (it
// rolls back as a whole, so its slot or claim stays due), Stop still waits
// for the goroutines to return, and then returns an error wrapping ctx's.
// Stop on a Scheduler that is not started does nothing; a stopped
// Scheduler can be started again. A Stop called while another stops the
// Scheduler waits for it to end, and returns nil.
func (s *Scheduler) Stop(ctx context.Context) error {
	// The lock is held to the end, so that a Stop called meanwhile
	// returns only once this one has, as Engine.Stop and Queue.Stop do.
	s.mu.Lock()
	defer s.mu.Unlock()
	cancel, hardCancel, done := s.cancel, s.hardCancel, s.done
	if done == nil {
		return nil
	}
	s.cancel, s.hardCancel, s.done = nil, nil, nil
	defer hardCancel()
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	hardCancel()
	<-done
	return fmt.Errorf("scheduler: stopping: the transaction in flight was cancelled: %w", ctx.Err())
}

// lead runs while this process holds the lease: tick, then sleep until the
// earliest next_run_at, the poll interval, or a notification. ctx ends when
// the Scheduler stops or the lease is lost; hard ends when Stop's context
// does.
func (s *Scheduler) lead(ctx, hard context.Context, lease *leases.Lease) error {
	s.logger.InfoContext(ctx, "scheduler: leading", slog.String("lease", lease.Name), slog.Int64("generation", lease.Generation))
	ctx, cancel := context.WithCancel(ctx)
	wake, listening := s.listen(ctx)

	// Ticks run on work, which outlives ctx while Stop lets the
	// transaction in flight finish; a lost lease or a hard stop cancels it
	// at once.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		defer cancelWork()
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), context.Canceled) {
				return // the lease was lost
			}
			select {
			case <-hard.Done():
			case <-work.Done():
			}
		case <-hard.Done():
		}
	}()
	defer func() {
		cancel()
		cancelWork()
		<-watching
		<-listening
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := s.tick(work, ctx, lease); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, leases.ErrLeaseNotHeld) {
				return err
			}
			s.logger.ErrorContext(ctx, "scheduler: tick failed", slog.String("error", err.Error()))
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := s.untilNext(ctx)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake:
			timer.Stop()
		}
	}
}

// listen holds a connection that LISTENs on NotifyChannel until ctx ends,
// opened again whenever it is lost (package listen), and signals wake on
// each notification and each time it starts to listen (a change notified
// while nothing listened was missed); done closes once the connection is
// closed. While it cannot listen, the leader polls alone.
func (s *Scheduler) listen(ctx context.Context) (wake <-chan struct{}, done <-chan struct{}) {
	wakeC, doneC := make(chan struct{}, 1), make(chan struct{})
	nudge := func() {
		select {
		case wakeC <- struct{}{}:
		default:
		}
	}
	l := &listen.Listener{
		Pool:     s.pool,
		Logger:   s.logger,
		Subject:  "scheduler",
		What:     "changes",
		Channels: []string{NotifyChannel},
		Ready:    nudge,
		Note:     func(*pgconn.Notification) { nudge() },
	}
	go func() {
		defer close(doneC)
		l.Run(ctx)
	}()
	return wakeC, doneC
}

// tick fires every due schedule and claims due recurring jobs, each in a
// transaction of its own on ctx. It begins no further transaction once
// stop ends.
func (s *Scheduler) tick(ctx, stop context.Context, lease *leases.Lease) error {
	for range maxFiresPerTick {
		if stop.Err() != nil {
			return nil
		}
		found, err := s.fireNext(ctx, lease)
		if err != nil {
			return err
		}
		if !found {
			break
		}
	}
	for range 10 {
		if stop.Err() != nil {
			return nil
		}
		n, err := s.claimRecurring(ctx, lease)
		if err != nil {
			return err
		}
		if n < s.cfg.RecurringBatchSize {
			break
		}
	}
	return nil
}

const untilNextSQL = `
SELECT extract(epoch FROM least(
    (SELECT min(greatest(next_run_at, retry_at)) FROM braid_schedules WHERE enabled),
    (SELECT min(next_run_at) FROM braid_recurring WHERE enabled AND dead_at IS NULL AND running_since IS NULL)
) - braid_now())::float8`

// untilNext returns how long to sleep: until the earliest next_run_at on
// the database clock, at most PollInterval. A next run further away than
// PollInterval is not converted to a Duration, which could not hold one
// beyond about 292 years (a recurring job parked with NextRunAt in the
// year 9999).
func (s *Scheduler) untilNext(ctx context.Context) time.Duration {
	var seconds *float64
	if err := s.pool.QueryRow(ctx, untilNextSQL).Scan(&seconds); err != nil || seconds == nil ||
		*seconds >= s.cfg.PollInterval.Seconds() {
		return s.cfg.PollInterval
	}
	d := time.Duration(*seconds * float64(time.Second))
	if d <= 0 {
		// Due rows remain that this tick could not take (locked by a
		// writer); look again shortly.
		return min(busyRetry, s.cfg.PollInterval)
	}
	return min(d, s.cfg.PollInterval)
}

// parse returns the parsed expression of a stored schedule, cached.
func (s *Scheduler) parse(expr, zone string) (*Expression, error) {
	key := [2]string{expr, zone}
	s.exprMu.Lock()
	e, ok := s.exprCache[key]
	s.exprMu.Unlock()
	if ok {
		return e, nil
	}
	e, err := Parse(expr, zone)
	if err != nil {
		return nil, err
	}
	s.exprMu.Lock()
	if len(s.exprCache) > 10000 {
		clear(s.exprCache)
	}
	s.exprCache[key] = e
	s.exprMu.Unlock()
	return e, nil
}

// dbtx is what both *pgxpool.Pool and pgx.Tx provide.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// inTx runs fn in a transaction on the pool, committing when it succeeds.
func (s *Scheduler) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// notify announces a change on NotifyChannel when tx commits.
func notify(ctx context.Context, tx dbtx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", NotifyChannel); err != nil {
		return fmt.Errorf("scheduler: notifying: %w", err)
	}
	return nil
}

// rawJobArgs lets River insert a job from a stored kind and JSON args.
type rawJobArgs struct {
	kind string
	args json.RawMessage
}

func (a rawJobArgs) Kind() string                 { return a.kind }
func (a rawJobArgs) MarshalJSON() ([]byte, error) { return a.args, nil }
