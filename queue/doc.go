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
// [MaintenanceLease] ("braid:maintenance") and runs the heartbeat rescuer,
// priority aging when on, and the periodic [MaintenanceTask]s other
// packages register in Config.Maintenance (the workflow engine's
// reconciler and retention run there), so that no package needs a leader
// election of its own. Each task runs in its own goroutine, once when the
// loop starts and then every Interval; its errors are logged with its name
// and stop nothing else. Start's context bounds the start-up only.
//
// [Queue.Stop] stops the maintenance loop and releases the lease, stops
// fetching, lets running jobs finish until its context ends and then
// cancels them, and returns once every job and every goroutine of the
// Queue has returned.
//
// # Attempts and their outcomes
//
// An attempt's outcome belongs to its attempt. River records outcomes
// with a statement that checks only that the job is running, not which
// attempt runs it. The Queue gives River a driver (riverpgxv5's, with a
// custom pilot) whose outcome statement drops the outcome of every
// attempt this process knows was superseded: one whose Heartbeat,
// Progress or watch found that it no longer owns its job, or whose worker
// returned an error wrapping [ErrJobNotRunning]. A rescued attempt that
// returns late thus changes nothing, whatever it returns.
//
// The same statement sanitises every attempt error it writes, the text of
// panics and their stacks included, with [SanitizeErrorText] and
// Config.MaxErrorBytes (default [MaxErrorBytesDefault], 64 KiB): NUL bytes
// and invalid UTF-8 are removed and long text is cut. (A NUL byte would
// make PostgreSQL reject the whole batch of outcomes, and River retries
// such a batch for ever.) Output a worker recorded (river.RecordOutput)
// that jsonb would reject is stored as jsonb can take it: NUL characters
// removed, an unpaired surrogate escape as U+FFFD, and nothing at all of a
// document that still cannot be stored (a number beyond numeric). An
// attempt's error whose Error method panics is recorded with a text that
// says so, and still unwraps to what the worker returned.
// river.JobCompleteTx and the other generic River helpers work unchanged:
// they go through the client's driver and pilot.
//
// # Claims and completions in a caller's transaction
//
// A caller that records its work's outcome in its own transaction (braid's
// batches of turn outcomes do) can complete its jobs there with
// [Queue.CompleteTx], which completes a job only while it still runs the
// attempt given, and claim the jobs that outcome made runnable with
// [Queue.ClaimTx] or [Queue.ClaimAvailableTx], exactly as River's fetch
// claims them, then work them with [Queue.WorkClaimed] in the worker slot
// it holds. [Queue.QueueComplete], [Queue.QueueClaim] and
// [Queue.QueueClaimAvailable] queue the same statements on a pgx.Batch,
// so that they share a round trip with the caller's own statements.
// [Queue.QueueInsertClaimed] inserts new jobs already claimed, in one
// statement: a caller that makes a job only to work it at once saves the
// round trip of River's insert and the claim's own statement. None of them
// claims a job of a queue that River has paused ([river.Client.QueuePause]),
// as River's fetch takes none: the insert leaves such a job available.
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
// records it, with its stack, as the attempt's error. A panic that the
// worker (or a middleware inside braid's, as the scheduler's recurring
// middleware) recovered itself and returns as a *[PanicError] is a panic
// to the span and the metrics all the same. A retry is a new
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
// last sign of life is older than Config.HeartbeatMisses intervals, on the
// database clock, and takes each back: to available after
// Config.RescueRetryDelay, or to discarded when its attempts are spent
// (cancelled if a cancel was requested), with a "heartbeat lost" error
// recorded for the attempt. Each rescue locks the job row and checks again
// that it is still running as the attempt seen and still silent, so an
// attempt that completed, failed or heartbeated meanwhile is left as it is.
//
// An attempt is judged only by what was written during its own
// execution: its last heartbeat or progress report, the end of its
// heartbeat once the worker returned (plus 5 s, for River to record the
// outcome; should the process die in between, the job is still rescued),
// or else its start (River's attempted_at). River reuses an attempt number after a snooze, so a
// progress row written before the job's current start is ignored.
//
// No sign counts as older than the database server's start
// (pg_postmaster_start_time), nor than 5 s after the rescuer's first look
// that succeeded after one that failed, or after an outage that its
// leases lived through (a crash restart of the server, a failover to a
// standby, a network outage). While the database is down or
// out of reach no attempt can heartbeat and no outcome can be written;
// once it is back, every attempt has its full HeartbeatMisses intervals to
// heartbeat again, and River's completer, which tries a failed batch again
// 1 and 3 s after its first try and then gives it up, has 5 s more to
// write the outcomes it holds. A job that completed while the database
// was down is thus recorded as completed, not rescued and run again,
// provided River's completer still held its outcome when the database came
// back.
//
// While an attempt of a heartbeat kind runs, the middleware also watches
// its job row a few times per interval (skipping the poll while a
// heartbeat, which checks the same, is recent); when the attempt no longer
// owns the job (rescued by braid, or by River) its context is cancelled
// with [ErrJobNotRunning] and the attempt is marked superseded, so its
// outcome is dropped whenever it returns. When the attempt finished its
// own job (with river.JobCompleteTx, before returning), the watch stops
// quietly.
//
// A process cut off from the database cannot learn that way that its
// attempt was rescued: its heartbeats and the watch's polls fail, while
// another process rescues the job and runs the next attempt. So an
// attempt that returns without having confirmed, for a whole heartbeat
// interval, that it owns its job checks its job row before its outcome
// goes to River, and in the same statement ends its heartbeat, so that the
// rescuer then leaves the job to River's completer for 5 s. An attempt
// found superseded has its outcome dropped. When the check fails for 5 s
// the outcome goes to River fenced on the attempt: the pilot writes it
// only if, under the job row's lock, the job still runs as that attempt.
// (A client cannot tell a server that is down, when no other attempt can
// take the job and dropping a completed job's outcome would run it again,
// from a link cut while the rescuer works.)
//
// # Recovery time
//
// When a process dies, its attempt of a heartbeat kind is running again on
// another process within
//
//	HeartbeatMisses × interval + HeartbeatCheckInterval + RescueRetryDelay + FetchPollInterval
//
// of its last heartbeat (plus the statements' own time), provided the
// maintenance lease is held by a live process (after the lease holder's
// own death, add the lease's TTL). With the defaults (3 misses, 500 ms,
// 1 s, 100 ms) and a 5 s heartbeat this is 15 s + 1.6 s = 16.6 s, within
// the 17 s the workflow engine promises for its turns. A new holder of the
// lease whose own leases failed to reach the database lately
// (leases.Manager.LastFailure) took over after an outage, not a death, and
// counts silence from its first look, as after a failed look of its own.
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
// # Pool sizing
//
// River's listener (LISTEN/NOTIFY, used whenever the Queue works jobs)
// takes one connection from the pool when the client starts and keeps it
// until the client stops. riverpgxv5 hijacks that connection: it leaves
// the pool's accounting, so it does not count against the pool's MaxConns,
// but it is one more PostgreSQL connection per working process
// (max_connections must allow MaxConns + 1 per process).
//
// Within the pool, the Queue needs, at the same time: one connection for
// each running job that uses the database (more if its worker holds
// several), one more for each running attempt of a heartbeat kind (its
// heartbeat or its watch, never both at once), and about four for the
// background work: River's fetches, its completer and its leader's
// maintenance, and braid's maintenance loop (plus one for each Maintenance
// task that runs at once). The minimum pool for a working Queue is
// therefore four connections plus what its running jobs hold; with too few,
// running jobs that wait for a connection keep the completer from
// recording their outcomes. pgxpool's default MaxConns (the greater of 4
// and the number of CPUs) suits only a few concurrent workers: size
// MaxConns to the sum of the queues' MaxWorkers, doubled for heartbeat
// kinds, plus four.
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
