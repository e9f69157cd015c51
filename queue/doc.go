// Package queue is braid's claim, backoff and dead-letter core: River,
// configured and extended, not hidden.
//
// Workers stay River's own river.Worker[T], job arguments River's JobArgs,
// insert options River's InsertOpts, and [Queue.River] returns the River
// client for everything River already does. The package adds what River
// lacks: a span per attempt with the trace carried from insert to work,
// metrics, retry strategies, named priorities with aging, progress and
// heartbeats with a heartbeat rescuer, dead-letter operations, queue
// statistics and idempotency keys.
//
// # Lifecycle
//
//	workers := river.NewWorkers()
//	river.AddWorker(workers, &EmailWorker{})
//	q, err := queue.New(pool, &queue.Config{Workers: workers})
//	err = q.Start(ctx)
//	defer q.Stop(ctx)
//	res, err := q.Insert(ctx, EmailArgs{To: "a@example.com"}, nil)
//
// [New] builds the River client on riverpgxv5 with braid's middleware in
// front. Without Workers the Queue is insert-only. Named queues
// (Config.Queues) stand for worker capabilities: a job inserted into the
// "media" queue runs only on processes that work "media". The defaults are
// tuned for workflow latency: [FetchCooldownDefault] (5 ms) and
// [FetchPollIntervalDefault] (100 ms), against River's 100 ms and 1 s.
//
// [Queue.Start] starts River, the queue depth gauge, and the maintenance
// loop: one process across all those sharing the database holds the lease
// [MaintenanceLease] ("braid:maintenance") and runs the heartbeat rescuer
// and, when on, priority aging. [Queue.Stop] releases the lease and stops
// River, which waits for running jobs.
//
// # Tracing
//
// When a job is inserted (through the Queue or through River directly), the
// insert middleware stores the W3C trace context of the inserting ctx in
// the job's metadata under [MetadataTrace]. Each attempt then runs inside a
// span "river.job <kind>" (kind consumer) whose parent is that context, in
// whatever process works the job. The span carries job.id, job.kind, queue,
// attempt, priority and outcome. A failed attempt records the error and
// sets the error status; a panic does too, and is then re-raised so River
// records it, with its stack, as the attempt's error. A retry is a new
// attempt span under the same parent, so all attempts share the trace. A
// snooze is not a failure.
//
// Kinds listed in Config.UntracedKinds get no span from the middleware:
// their workers start their own (the workflow engine's turn worker starts
// "braid.task <workflow>"), from [TraceContext]. Spans come from
// Config.TracerProvider, or the global provider.
//
// # Metrics
//
// Through the OTel metric API (Config.MeterProvider, or the global
// provider), meter "github.com/braidflow/braid/queue": [MetricAttempts],
// [MetricFailures], [MetricDuration] (seconds, by outcome), [MetricDepth]
// (an observable gauge of unfinished jobs by queue and state),
// [MetricRescues] and [MetricAged].
//
// # Retries
//
// A [Backoff] is a fixed, linear or exponential schedule from Base, capped
// at Max, spread by ±Jitter. It is a river.ClientRetryPolicy, so it serves
// as Config.RetryPolicy for every worker, and its NextRetry as one
// worker's NextRetry. Attempts count from 1 as River's do: after the n-th
// failed attempt an exponential Backoff waits Base·2^(n−1). The default,
// [DefaultBackoff], waits 1 minute × 2^(n−1), capped at 24 hours, ±20%.
//
// # Priority and aging
//
// [PriorityCritical], [PriorityHigh], [PriorityNormal] and [PriorityLow] are
// River's priorities 1 to 4. The Queue's insert methods default to
// PriorityNormal; River's own insert methods keep River's default, 1
// (critical), because River's options cannot tell an unset priority from an
// explicit 1 — see [Priority].
//
// Aging, which keeps long-waiting jobs from starving behind newer work of
// higher priority, is off by default. With Config.AgeAfter set, a job that
// has been available for longer than AgeAfter moves up one level, then one
// more every Config.AgeInterval, until it is critical. The time of the
// last raise is kept in the job's metadata, so passes may repeat or change
// process without raising twice. [Queue.SetPriority] restarts the
// interval.
//
// # Progress and heartbeat
//
// Inside a worker, [Progress](ctx, percent, message) writes at once to
// braid_job_progress, outside any transaction of the worker's, so that
// other processes see it while the job runs ([Queue.JobProgress]), and
// sends a NOTIFY on [ProgressChannel] with a [JobProgress] as JSON.
// [Heartbeat](ctx) records that the job is alive. Both are fenced on the
// attempt: once the job no longer runs as this attempt they return
// [ErrJobNotRunning] and cancel the attempt's context. Called with a
// context that is not a job's they return [ErrNotJobContext].
//
// # Heartbeat rescue
//
// A kind declares a heartbeat interval in Config.Heartbeats; declare the
// same in every process. The rescuer, under [MaintenanceLease], looks every
// Config.HeartbeatCheckInterval for running attempts of such kinds whose
// last heartbeat (or, before the first, whose start) is older than
// Config.HeartbeatMisses intervals, on the database clock, and takes each
// back: to retryable (scheduled by Config.RetryPolicy, but no
// sooner than one interval), or to discarded when its attempts are spent
// (cancelled if a cancel was requested), with a "heartbeat lost" error
// recorded for the attempt. Each rescue locks the job row and checks again
// that it is still running as the attempt seen and still silent, so an
// attempt that completed, failed or heartbeated meanwhile is left as it is.
//
// While an attempt of a heartbeat kind runs, the middleware also watches
// its job row a few times per interval; when the attempt no longer owns the
// job (rescued by braid, or by River) its context is cancelled with
// [ErrJobNotRunning]. A worker that honours its context thus stops before
// the next attempt starts. River's completer does not check the attempt
// number, so a worker that ignores its context and returns after the next
// attempt has started can still overwrite that attempt's outcome; the
// delay of at least one interval before the retry exists to prevent this.
//
// How this relates to River's own limits:
//
//   - River's RescueStuckJobsAfter (Config.RescueStuckJobsAfter, default
//     1 h) still applies to every job, heartbeating or not: River rescues
//     any job running longer than that. The heartbeat rescuer is the fast
//     detector of dead attempts; RescueStuckJobsAfter is the upper bound of
//     any attempt's run time. Set it above your longest heartbeating job.
//   - A worker's Timeout (or Config.JobTimeout, default 1 min) cancels the
//     attempt's context; heartbeats do not extend it. Give long
//     heartbeating workers a longer Timeout, or -1 for none.
//
// # Dead letters and operations
//
// A job that exhausts its attempts is a dead letter (River's discarded
// state). [Queue.DeadLetters] lists them with every attempt's error,
// panics' stacks included; [Queue.Retry] requeues jobs in bulk;
// [Queue.Cancel] cancels them (running ones through River's remote
// cancel); [Queue.SetPriority] changes a job's level; [Queue.Stats] counts
// jobs by state and by queue; [Queue.Jobs] lists jobs by state, kind and
// queue. Writes have Tx twins. These are the calls the braid CLI and admin
// API use.
//
// # Idempotency keys
//
// [InsertOpts].IdempotencyKey maps onto River's unique jobs: the key
// becomes the job's unique key, unique in every state. Inserting twice with
// one key (for one kind) gives one job, and the second call returns the
// first job with UniqueSkippedAsDuplicate set. The key holds as long as the
// job row exists; River deletes finished rows after its retention periods
// (Config.CompletedJobRetentionPeriod and friends), after which the key is
// free again.
package queue
