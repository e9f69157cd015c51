package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/braidflow/braid/queue"
)

// Defaults of Config.
const (
	// MaxPayloadBytesDefault caps an encoded input, output or step result.
	MaxPayloadBytesDefault = 1 << 20
	// MaxMapItemsDefault caps the number of children one Map call spawns.
	MaxMapItemsDefault = 100_000
	// DelayBatchSizeDefault is how many due delays the delay processor
	// wakes per transaction. A burst of due delays is woken in several
	// transactions, one after the other, so that the turns of the first
	// ones start while the later ones are still being woken.
	DelayBatchSizeDefault = 100
	// DelayPollIntervalDefault is the longest the delay processor sleeps
	// between looks at the earliest pending delay. A NOTIFY wakes it
	// earlier when a nearer delay is written.
	DelayPollIntervalDefault = time.Second
	// ResultPollIntervalDefault is how often Run.Result looks at the run
	// when no notification arrives.
	ResultPollIntervalDefault = time.Second
	// TurnHeartbeatDefault is how often a running turn records that it is
	// alive. A turn whose process died is rescued by the queue's heartbeat
	// rescuer after a few missed heartbeats.
	TurnHeartbeatDefault = 5 * time.Second
	// MaxMapInputBytesDefault caps the encoded inputs of all the children
	// one Map call spawns, added up. They are written in one statement.
	MaxMapInputBytesDefault = 32 << 20
	// UnknownWorkflowSnoozeDefault is how long a turn of a workflow this
	// process does not know is put back before another process may take
	// it. The attempt is not spent.
	UnknownWorkflowSnoozeDefault = 5 * time.Second
	// UnknownWorkflowTimeoutDefault is how long a turn may wait for a
	// process that knows its workflow, counted from the turn's creation,
	// before its task fails.
	UnknownWorkflowTimeoutDefault = 10 * time.Minute
	// ReconcileIntervalDefault is how often the reconciler looks for tasks
	// whose turn job ended discarded or cancelled.
	ReconcileIntervalDefault = time.Second
	// ReconcileSweepIntervalDefault is how often the reconciler looks at
	// every pending or running task for a live turn.
	ReconcileSweepIntervalDefault = 5 * time.Minute
	// RetentionDefault is how long a finished run, with its tasks, steps
	// and finished turn jobs, is kept.
	RetentionDefault = 7 * 24 * time.Hour
	// RetentionIntervalDefault is how often finished runs older than the
	// retention are deleted.
	RetentionIntervalDefault = time.Minute
	// VacuumIntervalDefault is how often the maintenance loop looks for
	// tables of braid's that have taken in enough dead rows to vacuum.
	VacuumIntervalDefault = time.Second
	// RetentionBatchDefault is how many runs one delete removes.
	RetentionBatchDefault = 1000
	// OutcomeTimeoutDefault bounds the transaction that records a turn's
	// outcome. It runs even when the turn's context has ended (a timeout,
	// a shutdown), so it needs a bound of its own.
	OutcomeTimeoutDefault = 30 * time.Second
	// OutcomeBatchSizeDefault is the most turn outcomes one transaction
	// commits (50): a queue of queue.MaxWorkersDefault workers shared by
	// OutcomeFlushesDefault batches, so that the turns of a full queue that
	// end together commit in that many batches at once, rather than in one
	// while the other flushes idle.
	OutcomeBatchSizeDefault = queue.MaxWorkersDefault / OutcomeFlushesDefault
	// OutcomeLingerDefault is the longest a batch of turn outcomes waits
	// for more before it commits. A batch does not wait when no other turn
	// of the process is running, so a lone turn never waits.
	OutcomeLingerDefault = 4 * time.Millisecond
	// OutcomeFlushesDefault is the most batches of turn outcomes that
	// commit at once.
	OutcomeFlushesDefault = 2
	// PoolMinConns is the smallest pool (pgxpool MaxConns) an engine that
	// works turns accepts: a turn's queries, River's fetches and
	// completions, and the leases' renewals each need a connection. Below
	// PoolWarnConns the engine works, but turns wait for connections and
	// NewEngine logs a warning once.
	PoolMinConns = 2
	// PoolWarnConns: see PoolMinConns.
	PoolWarnConns = 4
)

// Names of the lease and the notification channels the engine uses.
const (
	// DelayLease is the lease under which exactly one process runs the
	// delay processor.
	DelayLease = "braid:delays"
	// TaskKind is the River job kind of a turn.
	TaskKind = "braid_task"

	// RunFinishedChannel is the PostgreSQL NOTIFY channel on which the
	// transaction that finishes a run announces it, with the run's ID as
	// the payload. Result waits on it; operator tools may LISTEN too.
	RunFinishedChannel = "braid_run_finished"

	channelRunFinished = RunFinishedChannel
	channelDelay       = "braid_delay"
)

// Config configures an Engine.
type Config struct {
	// Workflows are the definitions this engine runs and may start. Names
	// must be unique.
	Workflows []Definition

	// Queue configures the River client that runs turns. The engine adds
	// its worker and the queues its workflows name (when Queue.Queues is
	// nil). Default: queue defaults.
	Queue *queue.Config

	// Leases configures the lease of the delay processor (holder name, TTL,
	// heartbeat). Default: leases defaults.
	Leases *leases.Config

	// MaxPayloadBytes caps an encoded input, output or step result.
	// Default MaxPayloadBytesDefault (1 MiB).
	MaxPayloadBytes int

	// MaxMapItems caps how many children one Map call may spawn. Default
	// MaxMapItemsDefault.
	MaxMapItems int

	// MaxMapInputBytes caps the encoded inputs of one Map call's children,
	// added up. Default MaxMapInputBytesDefault (32 MiB).
	MaxMapInputBytes int

	// MaxErrorBytes caps the text of a stored error: a task's, a step's, a
	// panic with its stack. Longer text is cut and marked. NUL bytes are
	// removed. It also sets Queue.MaxErrorBytes when that is zero. Default
	// queue.MaxErrorBytesDefault (64 KiB).
	MaxErrorBytes int

	// DelayBatchSize is how many due delays the delay processor wakes per
	// transaction. Default DelayBatchSizeDefault.
	DelayBatchSize int

	// DelayPollInterval is the longest the delay processor sleeps before
	// looking again. Default DelayPollIntervalDefault.
	DelayPollInterval time.Duration

	// DisableDelayProcessor keeps this process out of the election for the
	// delay processor. Default false: every engine competes, one leads.
	DisableDelayProcessor bool

	// ResultPollInterval is the fallback poll of Run.Result, Engine.Wait
	// and GetEvent. Default ResultPollIntervalDefault.
	ResultPollInterval time.Duration

	// TurnHeartbeat is how often a running turn records that it is alive.
	// The queue's heartbeat rescuer returns a turn whose heartbeats stopped
	// (its process died) to the queue, available again after
	// Queue.RescueRetryDelay, once Queue.HeartbeatMisses heartbeats were
	// missed, so a crashed turn resumes in seconds rather than after
	// River's RescueStuckJobsAfter. Default TurnHeartbeatDefault.
	TurnHeartbeat time.Duration

	// UnknownWorkflowSnooze is how long a turn of a workflow this process
	// does not know is put back, without spending an attempt, so that a
	// process that knows it (a newer or older deploy, another service on
	// the same database) takes it. Default UnknownWorkflowSnoozeDefault.
	UnknownWorkflowSnooze time.Duration

	// UnknownWorkflowTimeout is how long, from its creation, a turn may
	// wait for a process that knows its workflow. After that the task
	// fails with an error that says so, and Engine.Retry runs it again
	// once the workflow is deployed. Default UnknownWorkflowTimeoutDefault.
	UnknownWorkflowTimeout time.Duration

	// ReconcileInterval is how often the reconciler looks for tasks that
	// are pending or running with no live turn because their last turn job
	// was discarded or cancelled, and fails them, so that no run is ever
	// stranded. It runs in the queue's maintenance loop and reads only the
	// turn jobs that ended lately. Default ReconcileIntervalDefault (1 s).
	// The maintenance loop looks for tables of braid's that have outgrown
	// their planner statistics at the same interval (see "Statistics of
	// young tables" in the package documentation).
	ReconcileInterval time.Duration

	// ReconcileSweepInterval is how often the reconciler looks at every
	// pending or running task, for the rarer cases: a turn job deleted, or
	// that ended while no process ran the maintenance loop for a long time.
	// Default ReconcileSweepIntervalDefault (5 min).
	ReconcileSweepInterval time.Duration

	// Retention is how long a finished run (completed, failed or
	// cancelled), with its tasks, steps and the turn jobs River has
	// finished, is kept before it is deleted.
	// An idempotency key holds for as long as its run is kept. A negative
	// value keeps runs forever. Default RetentionDefault (7 days).
	Retention time.Duration

	// RetentionInterval is how often old runs are deleted, RetentionBatch
	// runs per transaction at most, and fewer when their tasks add up to
	// more than 10,000 (but always one run, however many tasks it has).
	// Defaults RetentionIntervalDefault and RetentionBatchDefault.
	RetentionInterval time.Duration
	RetentionBatch    int

	// VacuumInterval is how often the maintenance loop looks for tables of
	// braid's (river_job included) whose new dead rows have reached a fifth
	// of their live rows, and vacuums them, rather than leave them to
	// autovacuum's next visit, up to a minute later by default: a table
	// that turns over faster than that, as under a short Retention, would
	// otherwise hold a minute and more of rows where it needs seconds'
	// worth (see "Space of churned tables" in the package documentation).
	// A negative value leaves every vacuum to autovacuum. Default
	// VacuumIntervalDefault (1 s).
	VacuumInterval time.Duration

	// OutcomeTimeout bounds the transaction that records a turn's outcome.
	// Default OutcomeTimeoutDefault.
	OutcomeTimeout time.Duration

	// OutcomeBatchSize is the most turn outcomes one transaction commits.
	// The outcomes of turns that end at about the same time in this
	// process (task updates, job completions, run finishes, parents'
	// joins) commit together, paying one commit for all. The turns of a
	// busy queue end in step (each batch claims the next turns of the
	// workers it served), so a batch of about the queue's workers divided
	// by OutcomeFlushes keeps every flush busy, where a larger one takes
	// them all while the other flushes idle. Default
	// OutcomeBatchSizeDefault (50, for the default 100 workers and 2
	// flushes); 1 commits each outcome alone.
	OutcomeBatchSize int

	// OutcomeLinger is the longest a batch waits for more outcomes, once
	// a flush is free to take it (see OutcomeFlushes), while other turns of
	// this process are still running. A batch commits at once when it is
	// full or when no other turn is running. Default OutcomeLingerDefault
	// (4 ms). The histograms MetricBatchSize and MetricBatchDuration show
	// what the knobs give.
	OutcomeLinger time.Duration

	// OutcomeFlushes is the most batches of outcomes that commit at once,
	// each in its own transaction on its own pool connection, and never
	// more than half the pool's connections. While one batch waits on the
	// database (its statements, its commit's flush to disk), the next
	// collects the outcomes of the turns that end meanwhile and commits
	// beside it, so that the database works on both at once. Batches
	// that settle the same parent take its row in turn; when the parent is
	// older than every other task of a batch, as in a fan-out, the batch
	// takes it late in its transaction, so the others wait less (see the
	// package's lock order). Default OutcomeFlushesDefault (2); 1 commits
	// one batch at a time.
	OutcomeFlushes int

	// TracerProvider and MeterProvider default to the OTel globals.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider

	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Engine runs workflows: it owns the River client that works turns, the
// delay processor and the registry of definitions.
type Engine struct {
	pool     *pgxpool.Pool
	cfg      Config
	queue    *queue.Queue
	leases   *leases.Manager
	registry map[string]*definition
	// dagNames are the names of the DAGs in the registry, sorted: this
	// process decides the undecided nodes of these only
	// (decideUndecidedNodes).
	dagNames []string
	tracer   trace.Tracer
	metrics  *engineMetrics
	logger   *slog.Logger
	// reconcileAside holds the tasks the reconciler set aside.
	reconcileAside reconcileAside
	// vacuumed holds what the last vacuums of churned tables left.
	vacuumed vacuumed
	notifier *notifier
	// unknownLogged holds the names of unknown workflows, and of unknown
	// DAG nodes, already logged.
	unknownLogged sync.Map
	// filters caches the compiled filters of event waits.
	filters filters
	// stopping is set while Stop runs: a turn cancelled by it is put back
	// rather than failed, and no outcome claims a continuation.
	stopping atomic.Bool
	// held are the turn jobs whose cancel is to be tried again
	// (retryHeldCancels), by a loop that stopHeld stops and that closes
	// heldDone as it returns.
	held     heldCancels
	stopHeld context.CancelFunc
	heldDone chan struct{}
	// batcher commits turns' outcomes together; loader reads their tasks
	// together, and recorder writes their steps' records together.
	batcher  *batcher
	loader   *gather[loadRequest, *loadedTask]
	recorder *gather[stepWrite, *stepRecord]
	// jobTimeout is the queue's job timeout, which bounds a turn whose
	// definition sets none.
	jobTimeout time.Duration
	// stopTurns is cancelled when Stop stops waiting for running turns:
	// it ends the turns that run claimed, outside River's executor.
	turnsMu   sync.Mutex
	turnsCtx  context.Context
	stopTurns context.CancelFunc

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewEngine validates the definitions and builds the engine. It does not
// start anything; call Start.
func NewEngine(pool *pgxpool.Pool, cfg *Config) (*Engine, error) {
	if pool == nil {
		return nil, errors.New("workflow: pool is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = MaxPayloadBytesDefault
	}
	if c.MaxMapItems == 0 {
		c.MaxMapItems = MaxMapItemsDefault
	}
	if c.DelayBatchSize == 0 {
		c.DelayBatchSize = DelayBatchSizeDefault
	}
	if c.DelayPollInterval == 0 {
		c.DelayPollInterval = DelayPollIntervalDefault
	}
	if c.ResultPollInterval == 0 {
		c.ResultPollInterval = ResultPollIntervalDefault
	}
	if c.TurnHeartbeat == 0 {
		c.TurnHeartbeat = TurnHeartbeatDefault
	}
	c.MaxMapInputBytes = cmp.Or(c.MaxMapInputBytes, MaxMapInputBytesDefault)
	c.MaxErrorBytes = cmp.Or(c.MaxErrorBytes, queue.MaxErrorBytesDefault)
	c.UnknownWorkflowSnooze = cmp.Or(c.UnknownWorkflowSnooze, UnknownWorkflowSnoozeDefault)
	c.UnknownWorkflowTimeout = cmp.Or(c.UnknownWorkflowTimeout, UnknownWorkflowTimeoutDefault)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, ReconcileIntervalDefault)
	c.ReconcileSweepInterval = cmp.Or(c.ReconcileSweepInterval, ReconcileSweepIntervalDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, RetentionIntervalDefault)
	c.VacuumInterval = cmp.Or(c.VacuumInterval, VacuumIntervalDefault)
	c.RetentionBatch = cmp.Or(c.RetentionBatch, RetentionBatchDefault)
	c.OutcomeTimeout = cmp.Or(c.OutcomeTimeout, OutcomeTimeoutDefault)
	c.OutcomeBatchSize = cmp.Or(c.OutcomeBatchSize, OutcomeBatchSizeDefault)
	c.OutcomeLinger = cmp.Or(c.OutcomeLinger, OutcomeLingerDefault)
	c.OutcomeFlushes = cmp.Or(c.OutcomeFlushes, OutcomeFlushesDefault)
	switch {
	case c.MaxPayloadBytes < 0:
		return nil, fmt.Errorf("workflow: MaxPayloadBytes %d is negative", c.MaxPayloadBytes)
	case c.MaxMapItems < 0:
		return nil, fmt.Errorf("workflow: MaxMapItems %d is negative", c.MaxMapItems)
	case c.DelayBatchSize < 0:
		return nil, fmt.Errorf("workflow: DelayBatchSize %d is negative", c.DelayBatchSize)
	case c.DelayPollInterval < 0:
		return nil, fmt.Errorf("workflow: DelayPollInterval %s is negative", c.DelayPollInterval)
	case c.ResultPollInterval < 0:
		return nil, fmt.Errorf("workflow: ResultPollInterval %s is negative", c.ResultPollInterval)
	case c.TurnHeartbeat < 0:
		return nil, fmt.Errorf("workflow: TurnHeartbeat %s is negative", c.TurnHeartbeat)
	case c.MaxMapInputBytes < 0:
		return nil, fmt.Errorf("workflow: MaxMapInputBytes %d is negative", c.MaxMapInputBytes)
	case c.MaxErrorBytes < 0:
		return nil, fmt.Errorf("workflow: MaxErrorBytes %d is negative", c.MaxErrorBytes)
	case c.UnknownWorkflowSnooze < 0 || c.UnknownWorkflowTimeout < 0:
		return nil, fmt.Errorf("workflow: UnknownWorkflowSnooze %s and UnknownWorkflowTimeout %s must not be negative", c.UnknownWorkflowSnooze, c.UnknownWorkflowTimeout)
	case c.ReconcileInterval < 0 || c.ReconcileSweepInterval < 0:
		return nil, fmt.Errorf("workflow: ReconcileInterval %s and ReconcileSweepInterval %s must not be negative", c.ReconcileInterval, c.ReconcileSweepInterval)
	case c.RetentionInterval < 0 || c.RetentionBatch < 0:
		return nil, fmt.Errorf("workflow: RetentionInterval %s and RetentionBatch %d must not be negative", c.RetentionInterval, c.RetentionBatch)
	case c.OutcomeTimeout < 0:
		return nil, fmt.Errorf("workflow: OutcomeTimeout %s is negative", c.OutcomeTimeout)
	case c.OutcomeBatchSize < 0 || c.OutcomeLinger < 0:
		return nil, fmt.Errorf("workflow: OutcomeBatchSize %d and OutcomeLinger %s must not be negative", c.OutcomeBatchSize, c.OutcomeLinger)
	case c.OutcomeFlushes < 0:
		return nil, fmt.Errorf("workflow: OutcomeFlushes %d is negative", c.OutcomeFlushes)
	}
	if max := pool.Config().MaxConns; max < PoolMinConns {
		return nil, fmt.Errorf("workflow: the pool allows %d connections; an engine needs at least %d (set pool_max_conns)", max, PoolMinConns)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if max := pool.Config().MaxConns; max < PoolWarnConns {
		c.Logger.Warn("workflow: the pool is small; turns will wait for connections",
			"pool_max_conns", max, "recommended_min", PoolWarnConns)
	}

	e := &Engine{
		pool:     pool,
		cfg:      c,
		registry: map[string]*definition{},
		tracer:   c.TracerProvider.Tracer("github.com/braidflow/braid/workflow"),
		logger:   c.Logger,
		vacuumed: vacuumed{left: map[string]int64{}},
	}
	for i, w := range c.Workflows {
		if w == nil {
			return nil, fmt.Errorf("workflow: Config.Workflows[%d] is nil", i)
		}
		d := w.def()
		if d.err != nil {
			return nil, d.err
		}
		if _, dup := e.registry[d.name]; dup {
			return nil, &DefinitionError{Workflow: d.name, Reason: "the name is registered twice"}
		}
		e.registry[d.name] = d
	}
	if err := checkDAGWorkflows(e.registry); err != nil {
		return nil, err
	}
	for name, d := range e.registry {
		if d.dag != nil {
			e.dagNames = append(e.dagNames, name)
		}
	}
	slices.Sort(e.dagNames)
	var err error
	if e.metrics, err = newEngineMetrics(c.MeterProvider); err != nil {
		return nil, err
	}

	var qc queue.Config
	if c.Queue != nil {
		qc = *c.Queue
	}
	if qc.Workers == nil {
		qc.Workers = river.NewWorkers()
	}
	if err := river.AddWorkerSafely(qc.Workers, &taskWorker{eng: e}); err != nil {
		return nil, fmt.Errorf("workflow: registering the turn worker: %w", err)
	}
	if qc.Queues == nil {
		qc.Queues = map[string]river.QueueConfig{}
		for _, d := range e.registry {
			qc.Queues[d.queue] = river.QueueConfig{MaxWorkers: queue.MaxWorkersDefault}
		}
		if len(qc.Queues) == 0 {
			qc.Queues[river.QueueDefault] = river.QueueConfig{MaxWorkers: queue.MaxWorkersDefault}
		}
	}
	if qc.MaxErrorBytes == 0 {
		qc.MaxErrorBytes = c.MaxErrorBytes
	}
	// The reconciler, the statistics and space of braid's tables and
	// retention run in the queue's one maintenance loop, under its lease.
	qc.Maintenance = append(append([]queue.MaintenanceTask(nil), qc.Maintenance...),
		queue.MaintenanceTask{Name: "workflow reconciler", Interval: c.ReconcileInterval, Run: e.reconcile},
		queue.MaintenanceTask{Name: "workflow reconciler sweep", Interval: c.ReconcileSweepInterval, Run: e.reconcileSweep},
		queue.MaintenanceTask{Name: "workflow statistics", Interval: c.ReconcileInterval, Run: func(ctx context.Context) error {
			_, err := e.analyzeGrownTables(ctx)
			return err
		}})
	if c.VacuumInterval > 0 {
		qc.Maintenance = append(qc.Maintenance,
			queue.MaintenanceTask{Name: "workflow vacuum", Interval: c.VacuumInterval, Run: func(ctx context.Context) error {
				_, err := e.vacuumChurnedTables(ctx)
				return err
			}})
	}
	if c.Retention > 0 {
		qc.Maintenance = append(qc.Maintenance,
			queue.MaintenanceTask{Name: "workflow retention", Interval: c.RetentionInterval, Run: e.deleteOldRuns})
	}
	qc.UntracedKinds = append(append([]string(nil), qc.UntracedKinds...), TaskKind)
	heartbeats := map[string]time.Duration{TaskKind: c.TurnHeartbeat}
	for k, v := range qc.Heartbeats {
		heartbeats[k] = v
	}
	qc.Heartbeats = heartbeats
	if qc.TracerProvider == nil {
		qc.TracerProvider = c.TracerProvider
	}
	if qc.MeterProvider == nil {
		qc.MeterProvider = c.MeterProvider
	}
	if qc.Logger == nil {
		qc.Logger = c.Logger
	}
	if qc.Leases != nil && c.Leases == nil {
		e.leases = qc.Leases
	} else {
		lc := leases.Config{Logger: c.Logger, MeterProvider: c.MeterProvider}
		if c.Leases != nil {
			lc = *c.Leases
			if lc.Logger == nil {
				lc.Logger = c.Logger
			}
			if lc.MeterProvider == nil {
				lc.MeterProvider = c.MeterProvider
			}
		}
		if e.leases, err = leases.New(pool, &lc); err != nil {
			return nil, err
		}
	}
	if qc.Leases == nil {
		qc.Leases = e.leases
	}
	qc.Middleware = append([]rivertype.Middleware{&turnKeys{}}, qc.Middleware...)
	if e.queue, err = queue.New(pool, &qc); err != nil {
		return nil, err
	}
	e.notifier = newNotifier(pool, c.Logger)
	e.batcher, e.loader, e.recorder = newBatcher(e), newLoader(e), newRecorder(e)
	e.jobTimeout = cmp.Or(qc.JobTimeout, river.JobTimeoutDefault)
	if qc.JobTimeout == 0 && qc.River != nil && qc.River.JobTimeout != 0 {
		e.jobTimeout = qc.River.JobTimeout
	}
	e.turnsCtx, e.stopTurns = context.WithCancel(context.Background())
	return e, nil
}

// Queue returns the engine's queue, whose River client (Queue().River())
// also works the application's own jobs.
func (e *Engine) Queue() *queue.Queue { return e.queue }

// Pool returns the engine's database pool.
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// Start starts working turns and, unless disabled, competing for the delay
// processor's lease. ctx bounds the start-up only: cancelling it later
// does not stop the engine; Stop does.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return errors.New("workflow: engine already started")
	}
	e.turnsMu.Lock()
	e.turnsCtx, e.stopTurns = context.WithCancel(context.Background())
	e.turnsMu.Unlock()
	e.loader.start()
	e.recorder.start()
	e.batcher.start()
	if err := e.queue.Start(ctx); err != nil {
		e.batcher.halt()
		e.recorder.halt()
		e.loader.halt()
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.started = true
	e.notifier.start()
	if !e.cfg.DisableDelayProcessor {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			_ = e.leases.Lead(runCtx, DelayLease, e.processDelays)
		}()
	}
	if len(e.dagNames) > 0 {
		e.wg.Go(func() { e.decideNodesEvery(runCtx, e.cfg.ReconcileInterval) })
	}
	// The held cancels are tried again until Stop has seen the turns
	// end, not only until it stops the loops above.
	heldCtx, stopHeld := context.WithCancel(context.WithoutCancel(ctx))
	e.held.setRunning(true)
	heldDone := make(chan struct{})
	e.stopHeld, e.heldDone = stopHeld, heldDone
	go func() {
		defer close(heldDone)
		e.retryHeldCancelsEvery(heldCtx, cancelLockTimeout)
	}()
	return nil
}

// Stop stops the engine in order. It stops fetching turns and stops the
// delay processor and the maintenance loop, then lets the running turns
// finish until ctx ends. When ctx ends first, it cancels the turns'
// contexts and keeps waiting: Stop returns only when the user code of
// every turn, and every goroutine the engine started, has returned. A
// turn that Stop cancelled and that returns an error is put back without
// spending its attempt, even its last, and runs again on this or another
// process. Stop also ends the connection that Run.Result waits on.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started {
		e.notifier.stop()
		return nil
	}
	e.started = false
	e.stopping.Store(true)
	defer e.stopping.Store(false)
	e.cancel()
	e.wg.Wait()
	// Once ctx ends, the turns this process claimed itself are cancelled
	// too, as River cancels the ones it fetched.
	stopAfter := context.AfterFunc(ctx, e.cancelTurns)
	err := e.queue.Stop(ctx)
	stopAfter()
	e.cancelTurns()
	e.batcher.halt()
	e.stopHeld()
	<-e.heldDone
	e.held.setRunning(false)
	e.recorder.halt()
	e.loader.halt()
	e.notifier.stop()
	return err
}

// hardStop is done when Stop stops waiting for running turns.
func (e *Engine) hardStop() context.Context {
	e.turnsMu.Lock()
	defer e.turnsMu.Unlock()
	return e.turnsCtx
}

func (e *Engine) cancelTurns() {
	e.turnsMu.Lock()
	defer e.turnsMu.Unlock()
	e.stopTurns()
}

// lookup returns the definition registered under name.
func (e *Engine) lookup(name string) (*definition, error) {
	d, ok := e.registry[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q is not registered with this engine", ErrUnknownWorkflow, name)
	}
	return d, nil
}

// encode marshals v and enforces the payload cap.
func (e *Engine) encode(what string, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &EncodeError{What: what, Err: err}
	}
	if len(b) > e.cfg.MaxPayloadBytes {
		return nil, &PayloadTooLargeError{What: what, Size: len(b), Limit: e.cfg.MaxPayloadBytes}
	}
	if err := queue.CheckJSONB(b); err != nil {
		return nil, &EncodeError{What: what, Err: err}
	}
	return b, nil
}

// withTx runs fn in a transaction.
func (e *Engine) withTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, e.pool, fn)
}

// KnowsWorkflow reports whether a workflow named name is registered with
// this engine. The scheduler uses it to refuse a schedule whose target no
// process of this service can run.
func (e *Engine) KnowsWorkflow(name string) bool {
	_, ok := e.registry[name]
	return ok
}
