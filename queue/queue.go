package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/leases"
)

const (
	// FetchCooldownDefault is braid's default Config.FetchCooldown: the
	// shortest pause between two fetches of one queue. River's own default
	// is 100 ms; braid lowers it because a workflow's next turn is a new
	// job, and every hop between steps waits for a fetch.
	FetchCooldownDefault = 5 * time.Millisecond

	// FetchPollIntervalDefault is braid's default Config.FetchPollInterval:
	// how often a queue is fetched when no LISTEN/NOTIFY wakeup arrives.
	// River's own default is 1 s. Jobs that become available without a
	// notification (retries, rescued and scheduled jobs) are picked up within
	// this interval.
	FetchPollIntervalDefault = 100 * time.Millisecond

	// MaxWorkersDefault is the worker count of the "default" queue that New
	// configures when Config.Workers is set and Config.Queues is not.
	MaxWorkersDefault = 100

	// MaxAttemptsDefault is the default Config.MaxAttempts, River's own.
	MaxAttemptsDefault = river.MaxAttemptsDefault

	// HeartbeatMissesDefault is the default Config.HeartbeatMisses.
	HeartbeatMissesDefault = 3

	// HeartbeatCheckIntervalDefault is the default
	// Config.HeartbeatCheckInterval. With RescueRetryDelayDefault and
	// FetchPollIntervalDefault it keeps the worst case from a process's
	// death to the next attempt's start within HeartbeatMisses heartbeat
	// intervals plus 2 s (see "Recovery time" in the package docs).
	HeartbeatCheckIntervalDefault = 500 * time.Millisecond

	// RescueRetryDelayDefault is the default Config.RescueRetryDelay.
	RescueRetryDelayDefault = time.Second

	// HeartbeatIntervalMin is the shortest heartbeat interval a kind may
	// declare in Config.Heartbeats.
	HeartbeatIntervalMin = 10 * time.Millisecond

	// AgeIntervalDefault is the default Config.AgeInterval, used when aging
	// is on.
	AgeIntervalDefault = 5 * time.Minute

	// MaintenanceLease is the lease under which one process across all
	// processes sharing the database runs the heartbeat rescuer and priority
	// aging.
	MaintenanceLease = "braid:maintenance"
)

// Config configures a Queue. The zero value is valid for an insert-only
// Queue; set Workers to work jobs. Fields left zero take the documented
// defaults.
type Config struct {
	// Workers holds the registered workers. When it is nil the Queue is
	// insert-only: it can insert, list and operate on jobs, and Start runs
	// only the maintenance loop.
	Workers *river.Workers

	// Queues names the queues this process works and their worker counts.
	// Named queues stand for worker capabilities: a process that can
	// transcode video works a "media" queue, and jobs inserted with
	// river.InsertOpts{Queue: "media"} run only on such processes.
	//
	// Defaults to {"default": {MaxWorkers: MaxWorkersDefault}} when Workers
	// is set. Must be empty when Workers is nil.
	Queues map[string]river.QueueConfig

	// FetchCooldown is the shortest pause between two fetches of a queue.
	// Defaults to FetchCooldownDefault (5 ms); River's minimum is 1 ms.
	FetchCooldown time.Duration

	// FetchPollInterval is how often a queue is fetched without a
	// notification. Defaults to FetchPollIntervalDefault (100 ms). It must
	// not be shorter than FetchCooldown.
	FetchPollInterval time.Duration

	// MaxAttempts is how many attempts a job gets before it becomes a dead
	// letter (River's discarded state), unless its args or its insert
	// options say otherwise. Defaults to MaxAttemptsDefault (25, River's).
	MaxAttempts int

	// RetryPolicy schedules retries for workers without a NextRetry of their
	// own. Defaults to DefaultBackoff: 1 min × 2^(n−1), capped at 24 h, ±20%
	// jitter. A Backoff given here is validated by New.
	RetryPolicy river.ClientRetryPolicy

	// Middleware is installed after braid's own middleware, so braid's
	// attempt span is the outermost and encloses them.
	Middleware []rivertype.Middleware

	// TracerProvider supplies the tracer for attempt spans. Defaults to the
	// global provider, otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// MeterProvider supplies the meter for the queue's metrics. Defaults to
	// the global provider, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// Logger receives rescues, aging passes and maintenance errors, and is
	// given to River. Defaults to slog.Default().
	Logger *slog.Logger

	// UntracedKinds lists job kinds whose workers start their own span for
	// each attempt (the workflow engine's turn worker does). For these the
	// middleware starts no "river.job <kind>" span; it still records
	// metrics and still puts the job, progress and heartbeat handles in the
	// worker's context. Such a worker gets the inserting context's span with
	// TraceContext.
	UntracedKinds []string

	// Heartbeats declares, by job kind, how often a worker of that kind
	// promises to call Heartbeat (or Progress). An attempt of such a kind
	// that goes HeartbeatMisses intervals without one is taken back by the
	// heartbeat rescuer. Kinds not listed are never rescued by braid; River's
	// RescueStuckJobsAfter still applies to them. Each interval must be at
	// least HeartbeatIntervalMin.
	//
	// An attempt that has heartbeated is judged by the interval stored with
	// its heartbeats, whatever process runs the rescuer. An attempt that
	// has not heartbeated yet is judged from its start, by the interval the
	// rescuing process declares for its kind, so declare the same
	// Heartbeats in every process. Nothing is written when an attempt
	// starts: a short attempt costs no extra write.
	Heartbeats map[string]time.Duration

	// HeartbeatMisses is how many heartbeat intervals may pass without a
	// heartbeat before an attempt is rescued. Defaults to
	// HeartbeatMissesDefault (3).
	HeartbeatMisses int

	// HeartbeatCheckInterval is how often the rescuer looks for silent
	// attempts. An attempt is rescued between HeartbeatMisses intervals and
	// that plus HeartbeatCheckInterval after its last heartbeat. Defaults to
	// HeartbeatCheckIntervalDefault (500 ms).
	HeartbeatCheckInterval time.Duration

	// RescueRetryDelay is how long after its rescue a rescued attempt's job
	// becomes available again, on the database clock. The delay is short
	// because a late attempt can do no harm: its outcome is dropped (see
	// ErrJobNotRunning). Later failures follow the worker's NextRetry or
	// RetryPolicy as usual. Defaults to RescueRetryDelayDefault (1 s).
	RescueRetryDelay time.Duration

	// MaxErrorBytes caps the text of every attempt error River records, and
	// separately the panic stack recorded with it: longer text is cut and
	// marked as cut (see SanitizeErrorText), and NUL bytes and invalid
	// UTF-8 are removed whatever the length. Defaults to
	// MaxErrorBytesDefault (64 KiB).
	MaxErrorBytes int

	// Maintenance lists periodic tasks to run in the maintenance loop,
	// under MaintenanceLease, beside the heartbeat rescuer and aging. New
	// validates them: each needs a unique, non-empty Name, a positive
	// Interval and a Run function.
	Maintenance []MaintenanceTask

	// AgeAfter turns on priority aging: a job available for longer than
	// AgeAfter moves up one priority level, and one more every AgeInterval
	// after that, until it reaches PriorityCritical. Aging runs under the
	// lease MaintenanceLease. Zero (the default) turns aging off.
	AgeAfter time.Duration

	// AgeInterval is the time between two raises of one waiting job.
	// Defaults to AgeIntervalDefault (5 min) when aging is on.
	AgeInterval time.Duration

	// Leases is the lease manager the maintenance loop runs under. Defaults
	// to a new manager on the Queue's pool with leases' defaults, Logger and
	// MeterProvider.
	Leases *leases.Manager

	// MaintenanceDisabled keeps Start from running the maintenance loop
	// (heartbeat rescue, aging and Maintenance tasks) in this process.
	// Another process must run it for these to happen.
	MaintenanceDisabled bool

	// ID identifies this process to River; see river.Config.ID. Defaults to
	// River's generated ID.
	ID string

	// JobTimeout is River's default per-attempt timeout; a worker's own
	// Timeout overrides it. Defaults to River's (1 min); -1 means no timeout.
	JobTimeout time.Duration

	// RescueStuckJobsAfter is River's own rescue horizon: any job running
	// longer than this is retried or discarded by River, heartbeat or not.
	// It must exceed the longest attempt you expect, heartbeating ones
	// included. Defaults to River's (1 h, or JobTimeout + 1 h).
	RescueStuckJobsAfter time.Duration

	// CompletedJobRetentionPeriod, CancelledJobRetentionPeriod and
	// DiscardedJobRetentionPeriod are how long River keeps finished jobs
	// before deleting them (defaults 24 h, 24 h and 7 days; -1 keeps them
	// forever). They also bound how long an idempotency key holds: see
	// InsertOpts.IdempotencyKey.
	CompletedJobRetentionPeriod time.Duration
	CancelledJobRetentionPeriod time.Duration
	DiscardedJobRetentionPeriod time.Duration

	// ErrorHandler is River's error and panic handler.
	ErrorHandler river.ErrorHandler

	// River is a base River configuration for everything not named above
	// (Hooks, Plugins, PeriodicJobs, PollOnly, SoftStopTimeout, TestOnly…).
	// Fields set in this Config take precedence over the same fields in
	// River; Middleware lists are joined (braid's, then Middleware, then
	// River.Middleware). River's deprecated JobInsertMiddleware and
	// WorkerMiddleware cannot be combined with braid's middleware: River
	// rejects the mix, so New returns its error.
	River *river.Config
}

// Queue is braid's job queue: a River client on a pgx pool, with attempt
// spans and metrics, retry strategies, named priorities and aging, progress
// and heartbeats, dead-letter operations and idempotency keys. It is safe
// for concurrent use.
type Queue struct {
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	leases   *leases.Manager
	logger   *slog.Logger
	tracer   trace.Tracer
	metrics  *metrics
	retry    river.ClientRetryPolicy
	untraced map[string]bool
	working  bool
	// worked holds the queues that this Queue works (Config.Queues), and
	// workedNames lists them, as the claims' statements take them.
	worked      map[string]bool
	workedNames []string
	noMaint     bool
	intervals   map[string]time.Duration
	// declaredKinds and declaredMicros are intervals as the rescuer's
	// query takes them.
	declaredKinds  []string
	declaredMicros []int64
	misses         int
	middleware     []rivertype.Middleware // Config.Middleware
	// rescueTrouble is set when a look of the rescuer failed; since is
	// then the database's time at the next look that could read it (see
	// rescueSince).
	rescueTrouble atomic.Bool
	since         atomic.Pointer[time.Time]
	check         time.Duration
	rescueDelay   time.Duration
	ageAfter      time.Duration
	ageEvery      time.Duration
	tasks         []MaintenanceTask
	pilot         *pilot
	driver        *driver
	watchPolls    atomic.Int64 // ownership polls by attempt watches

	mu        sync.Mutex
	started   bool
	stopMaint context.CancelFunc
	maintDone chan struct{}
	depthReg  metric.Registration
}

// New builds a Queue on pool: the River client (on riverpgxv5) with braid's
// middleware in front, the workers of cfg.Workers and its queues. A nil cfg
// means all defaults, an insert-only Queue. New returns an error naming the
// offending field when cfg is invalid; it never panics.
func New(pool *pgxpool.Pool, cfg *Config) (*Queue, error) {
	if pool == nil {
		return nil, errors.New("queue: New needs a non-nil pool")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	var base river.Config
	if c.River != nil {
		base = *c.River
	}

	logger := cmp.Or(c.Logger, base.Logger, slog.Default())
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	mp := c.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}

	q := &Queue{
		pool:      pool,
		logger:    logger,
		tracer:    tp.Tracer("github.com/braidflow/braid/queue"),
		untraced:  make(map[string]bool, len(c.UntracedKinds)),
		intervals: make(map[string]time.Duration, len(c.Heartbeats)),
		noMaint:   c.MaintenanceDisabled,
	}
	for _, k := range c.UntracedKinds {
		q.untraced[k] = true
	}
	for kind, d := range c.Heartbeats {
		if kind == "" {
			return nil, errors.New("queue: Config.Heartbeats has an empty job kind")
		}
		if d < HeartbeatIntervalMin {
			return nil, fmt.Errorf("queue: Config.Heartbeats[%q] is %s; it must be at least %s", kind, d, HeartbeatIntervalMin)
		}
		q.intervals[kind] = d
	}
	for _, kind := range slices.Sorted(maps.Keys(q.intervals)) {
		q.declaredKinds = append(q.declaredKinds, kind)
		q.declaredMicros = append(q.declaredMicros, q.intervals[kind].Microseconds())
	}
	switch {
	case c.HeartbeatMisses < 0:
		return nil, fmt.Errorf("queue: Config.HeartbeatMisses is %d; it must be at least 1 (or zero for the default %d)", c.HeartbeatMisses, HeartbeatMissesDefault)
	case c.HeartbeatCheckInterval < 0:
		return nil, fmt.Errorf("queue: Config.HeartbeatCheckInterval is %s; it must be positive (or zero for the default %s)", c.HeartbeatCheckInterval, HeartbeatCheckIntervalDefault)
	case c.RescueRetryDelay < 0:
		return nil, fmt.Errorf("queue: Config.RescueRetryDelay is %s; it must be positive (or zero for the default %s)", c.RescueRetryDelay, RescueRetryDelayDefault)
	case c.MaxErrorBytes < 0:
		return nil, fmt.Errorf("queue: Config.MaxErrorBytes is %d; it must be positive (or zero for the default %d)", c.MaxErrorBytes, MaxErrorBytesDefault)
	case c.AgeAfter < 0:
		return nil, fmt.Errorf("queue: Config.AgeAfter is %s; it must be positive, or zero to turn aging off", c.AgeAfter)
	case c.AgeInterval < 0:
		return nil, fmt.Errorf("queue: Config.AgeInterval is %s; it must be positive (or zero for the default %s)", c.AgeInterval, AgeIntervalDefault)
	}
	q.misses = cmp.Or(c.HeartbeatMisses, HeartbeatMissesDefault)
	q.check = cmp.Or(c.HeartbeatCheckInterval, HeartbeatCheckIntervalDefault)
	q.rescueDelay = cmp.Or(c.RescueRetryDelay, RescueRetryDelayDefault)
	q.pilot = newPilot(cmp.Or(c.MaxErrorBytes, MaxErrorBytesDefault))
	if err := validateTasks(c.Maintenance); err != nil {
		return nil, err
	}
	q.tasks = slices.Clone(c.Maintenance)
	q.ageAfter = c.AgeAfter
	q.ageEvery = cmp.Or(c.AgeInterval, AgeIntervalDefault)

	q.retry = c.RetryPolicy
	if q.retry == nil {
		q.retry = base.RetryPolicy
	}
	if q.retry == nil {
		q.retry = DefaultBackoff
	}
	if err := validateRetryPolicy(q.retry); err != nil {
		return nil, err
	}

	var err error
	if q.metrics, err = newMetrics(mp); err != nil {
		return nil, err
	}
	q.leases = c.Leases
	if q.leases == nil {
		if q.leases, err = leases.New(pool, &leases.Config{Logger: logger, MeterProvider: mp}); err != nil {
			return nil, fmt.Errorf("queue: creating the lease manager: %w", err)
		}
	}

	rc := base
	rc.Logger = logger
	rc.Workers = cmp.Or(c.Workers, base.Workers)
	rc.Queues = c.Queues
	if rc.Queues == nil {
		rc.Queues = base.Queues
	}
	if rc.Workers == nil && len(rc.Queues) > 0 {
		return nil, errors.New("queue: Config.Queues is set but Config.Workers is nil; an insert-only Queue works no queues")
	}
	if rc.Workers != nil && len(rc.Queues) == 0 {
		rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: MaxWorkersDefault}}
	}
	q.working = rc.Workers != nil
	if q.working {
		q.worked = make(map[string]bool, len(rc.Queues))
		for name := range rc.Queues {
			q.worked[name] = true
			q.workedNames = append(q.workedNames, name)
		}
	}
	rc.FetchCooldown = cmp.Or(c.FetchCooldown, base.FetchCooldown, FetchCooldownDefault)
	rc.FetchPollInterval = cmp.Or(c.FetchPollInterval, base.FetchPollInterval, FetchPollIntervalDefault)
	rc.MaxAttempts = cmp.Or(c.MaxAttempts, base.MaxAttempts, MaxAttemptsDefault)
	rc.RetryPolicy = q.retry
	rc.Middleware = append(append([]rivertype.Middleware{&middleware{q: q}}, c.Middleware...), base.Middleware...)
	q.middleware = slices.Clone(c.Middleware)
	rc.ID = cmp.Or(c.ID, base.ID)
	rc.JobTimeout = cmp.Or(c.JobTimeout, base.JobTimeout)
	rc.RescueStuckJobsAfter = cmp.Or(c.RescueStuckJobsAfter, base.RescueStuckJobsAfter)
	rc.CompletedJobRetentionPeriod = cmp.Or(c.CompletedJobRetentionPeriod, base.CompletedJobRetentionPeriod)
	rc.CancelledJobRetentionPeriod = cmp.Or(c.CancelledJobRetentionPeriod, base.CancelledJobRetentionPeriod)
	rc.DiscardedJobRetentionPeriod = cmp.Or(c.DiscardedJobRetentionPeriod, base.DiscardedJobRetentionPeriod)
	if c.ErrorHandler != nil {
		rc.ErrorHandler = c.ErrorHandler
	}

	q.driver = newDriver(pool, q.pilot)
	if q.client, err = river.NewClient[pgx.Tx](q.driver, &rc); err != nil {
		return nil, fmt.Errorf("queue: configuring River: %w", err)
	}
	return q, nil
}

// River returns the River client. Use it for everything River already does:
// inserting with River's own options, JobGet, JobList, queue pausing,
// subscriptions, periodic jobs. Jobs inserted through it still carry the
// inserting context's trace, and still honour an idempotency key set in
// their metadata (MetadataIdempotencyKey).
func (q *Queue) River() *river.Client[pgx.Tx] { return q.client }

// Pool returns the pool the Queue was built on.
func (q *Queue) Pool() *pgxpool.Pool { return q.pool }

// Leases returns the lease manager the maintenance loop runs under.
func (q *Queue) Leases() *leases.Manager { return q.leases }

// Middleware returns Config.Middleware: the middleware installed after
// braid's own. Other packages find theirs in it (the scheduler finds its
// RecurringMiddleware there).
func (q *Queue) Middleware() []rivertype.Middleware { return slices.Clone(q.middleware) }

// Start starts working jobs (when Config.Workers is set), starts observing
// the queue depth gauge, and starts competing for MaintenanceLease to run
// the heartbeat rescuer, aging and the Maintenance tasks (unless
// Config.MaintenanceDisabled).
//
// ctx bounds the start-up only: once Start has returned, cancelling ctx
// changes nothing, and the Queue runs until Stop. (River's own Start keeps
// its context and hard-stops when it is cancelled; the Queue gives River a
// context that keeps ctx's values but not its cancellation.) When ctx ends
// before River has started, Start stops what it started and returns ctx's
// error. Start on a started Queue returns an error.
func (q *Queue) Start(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.started {
		return errors.New("queue: Start called on a started Queue")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("queue: starting: %w", err)
	}
	runCtx := context.WithoutCancel(ctx)
	if q.working {
		started := make(chan error, 1)
		go func() { started <- q.client.Start(runCtx) }()
		var err error
		select {
		case err = <-started:
		case <-ctx.Done():
			err = <-started
			if err == nil {
				_ = q.client.StopAndCancel(runCtx)
				err = ctx.Err()
			}
		}
		if err != nil {
			return fmt.Errorf("queue: starting River: %w", err)
		}
	}
	reg, err := q.registerDepth()
	if err != nil {
		if q.working {
			_ = q.client.StopAndCancel(runCtx)
		}
		return fmt.Errorf("queue: registering %s: %w", MetricDepth, err)
	}
	q.depthReg = reg
	if !q.noMaint {
		mctx, cancel := context.WithCancel(runCtx)
		done := make(chan struct{})
		q.stopMaint, q.maintDone = cancel, done
		go func() {
			defer close(done)
			_ = q.leases.Lead(mctx, MaintenanceLease, q.maintain)
		}()
	}
	q.started = true
	return nil
}

// Stop stops the Queue in order. It stops the maintenance loop (waiting for
// its tasks, then releasing MaintenanceLease) and stops fetching jobs. It
// lets running jobs finish until ctx ends; then it cancels their contexts
// (River's StopAndCancel), and a job cancelled so is retried as River
// retries a job interrupted by a stop. Stop returns only when every job
// and every goroutine of the Queue has returned, even after ctx has ended:
// a worker that ignores its context keeps Stop waiting. It returns nil
// when everything stopped, cancelled jobs included. A stopped Queue may be
// started again.
func (q *Queue) Stop(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.started {
		return nil
	}
	var errs []error
	if q.stopMaint != nil {
		q.stopMaint()
		<-q.maintDone
		q.stopMaint, q.maintDone = nil, nil
	}
	if q.depthReg != nil {
		if err := q.depthReg.Unregister(); err != nil {
			errs = append(errs, fmt.Errorf("queue: unregistering %s: %w", MetricDepth, err))
		}
		q.depthReg = nil
	}
	if q.working {
		if err := q.client.Stop(ctx); err != nil {
			if ctx.Err() == nil {
				errs = append(errs, fmt.Errorf("queue: stopping River: %w", err))
			} else {
				q.logger.InfoContext(ctx, "queue: stop deadline reached; cancelling running jobs and waiting for them to return")
				if err := q.client.StopAndCancel(context.WithoutCancel(ctx)); err != nil {
					errs = append(errs, fmt.Errorf("queue: stopping River: %w", err))
				}
			}
		}
	}
	q.started = false
	return errors.Join(errs...)
}
