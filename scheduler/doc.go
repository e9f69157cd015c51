// Package scheduler runs braid's durable cron schedules and per-entity
// recurring jobs on PostgreSQL.
//
// Both live in tables (braid_schedules and braid_recurring), not in memory,
// so they survive restarts and changes of leader. One process at a time, the
// holder of the lease "braid:scheduler", fires them: each fire advances the
// row and inserts the River job (or starts the workflow run) in one
// transaction.
//
// # Expressions
//
// Parse reads the expression of a schedule and binds it to an IANA time
// zone:
//
//   - descriptors: @yearly (or @annually), @monthly, @weekly, @daily (or
//     @midnight) and @hourly;
//   - @every <duration>, with units ns, us (µs), ms, s, m, h and d, such as
//     "@every 90s", "@every 1h30m", "@every 7d" or "@every 1.5d", at least
//     EveryMinimum (1s);
//   - 5-field cron (minute hour day-of-month month day-of-week) with lists,
//     ranges, steps and the names JAN-DEC and SUN-SAT.
//
// Anything else is rejected with an *ExpressionError that says what is
// wrong, such as "minute field 61 is out of range 0-59".
//
// # Daylight saving
//
// Calendar expressions fire on wall-clock minutes of their zone. A wall time
// skipped by a spring-forward change fires one gap later (a daily 02:30 in
// New York fires at 03:30 on 2026-03-08); a wall time repeated by a
// fall-back change fires once, at its first occurrence. Expressions whose
// hour field matches every hour (@hourly, "*/15 * * * *") follow elapsed
// time instead: they skip the missing hour and fire on both passes of the
// repeated one. @every is elapsed time and ignores the zone. Expression.Next
// documents the details.
//
// # Schedules
//
// A Schedule has a unique name, an expression and zone, a target (a River
// job kind with JSON args, or a workflow with its input), a queue, a
// priority, an overlap policy and a catch-up policy. Create, Update,
// Toggle, Delete, Get and List manage them; each write has a …Tx twin that
// works inside the caller's transaction.
//
// Create and Update check the target when the scheduler can tell what
// exists: a workflow against Config.Workflows when it implements
// WorkflowRegistry (the workflow engine does), a job kind against the
// workers of Config.Queue (queue.Queue.KnowsKind). An unknown target is an
// *UnknownTargetError that names it, such as
//
//	scheduler: schedule "nightly": workflow "send_digestt" is not registered
//
// and matches ErrUnknownTarget. A scheduler without that knowledge (no
// Config.Workflows registry, no Config.Queue or an insert-only one, as in
// the braid CLI) accepts any target; a target that turns out not to exist
// then fails at each slot as described under "Failed fires". A target
// type other than TargetJob or TargetWorkflow is always an error.
//
// Args (a job's args or a workflow's input) are capped at
// Config.MaxArgsBytes (MaxArgsBytesDefault, 64 KiB) for schedules and for
// recurring jobs alike; larger args are an *ArgsTooLargeError that names
// the schedule, or the recurring job's kind and key, and the limit, and
// matches ErrArgsTooLarge.
//
// next_run_at is the slot to fire next. For @every, slots form a grid
// anchored at the schedule's creation (truncated to the second): the slot
// after a slot is that slot plus the interval, never "now plus the
// interval", so the grid does not drift with the leader's latency. Slots
// are kept at the database's microsecond precision.
//
// # Firing exactly once
//
// The leader takes the earliest due schedule with FOR UPDATE SKIP LOCKED,
// inserts the job (queue.Queue.InsertTx) or starts the workflow
// (WorkflowStarter.StartWorkflowTx), and moves next_run_at on, fenced on
// the slot it fired, all in one transaction that also checks the lease.
// Each (schedule, slot) therefore fires exactly once, whichever process
// fires it and however leadership changes. As a backstop, the job or run of
// a slot carries the idempotency key "schedule:<name>:<slot>" (see
// IdempotencyKey), so a slot fired twice would still be one job or run.
// Jobs carry their schedule and slot in metadata (MetadataSchedule,
// MetadataSlot, MetadataFirstSlot).
//
// Between fires the leader sleeps until the earliest next_run_at, at most
// Config.PollInterval, and wakes early on a notification on NotifyChannel,
// which every write of this package sends but the delete of a recurring
// job, which makes nothing due sooner.
//
// # Failed fires
//
// When the job of a slot cannot be inserted or its run cannot be started
// (a deadlock, a dropped connection, a kind without a worker, a workflow
// the engine does not know), the slot is retried, never dropped. The
// insert runs in a savepoint; on failure next_run_at stays at the slot,
// the error is stored on the schedule (Schedule.LastError, LastErrorAt,
// FireFailures) and the slot is held back until Schedule.RetryAt, after
// Config.FireRetryBackoff (FireRetryBackoffDefault: 1s·2^(n-1), capped at
// 1m, ±20%), so a schedule that keeps failing neither spins nor holds up
// the others. The retry fires the same slot, with the same slot time and
// idempotency key; under CatchUpAll every missed slot still fires, in
// order. (Under CatchUpOnce a slot that passed while the first was held
// back is covered by the same fire, labelled with the latest slot, as for
// any catch-up. Under CatchUpSkip a slot being retried is late only from
// its RetryAt, however late the backoff made it, and not at all once an
// Update ended the backoff; a later slot that passed meanwhile, while no
// leader ran, is a missed slot.) The next successful
// fire clears the error; any Update of the schedule ends the backoff. If
// the failure left the transaction unusable, the error is recorded in a
// transaction of its own. A leader that cannot read a schedule's
// expression (a row written around this package, or by a newer version
// during a rolling upgrade) records a failed fire, and the slot is held
// back and tried again like any other; the package embeds the time zone
// data, so that every process reads the zones that Create accepted.
//
// # Overlap and catch-up
//
// OverlapSkip (the default) skips a slot while a job or run of an earlier
// fire is unfinished, the previous slot's or a RunNow's (a skip is not a
// failure: the slot is advanced, not retried); OverlapAllow fires
// regardless.
//
// When several slots are due at once (the scheduler was down, or the
// leader changed), the catch-up policy decides: CatchUpOnce (the default)
// fires once for all of them, labelled with the latest; CatchUpSkip fires
// the latest only if it is at most Config.MissedSlotGrace late; CatchUpAll
// fires every missed slot, oldest first. The overlap policy still judges
// each missed slot, so CatchUpAll fires every one only with OverlapAllow:
// under OverlapSkip a missed slot is skipped while the fire of the slot
// before it is unfinished. A schedule enabled again resumes at its next
// slot; slots that passed while it was disabled never fire.
//
// # Recurring jobs
//
// A recurring job is one row per (kind, entity key), such as one
// fetch_feed per feed. Applications call EnsureTx when an entity gains
// its first subscriber, in the same transaction as the subscription; it
// creates the row or enables it again, and returns next_run_at to mirror.
// A row parked as a dead letter stays parked: EnsureTx then also returns a
// *RecurringParkedError (ErrRecurringParked), since that next_run_at does
// not come until Revive.
// When the last subscriber leaves, SyncEnabledTx (or DisableTx) disables the
// row in the same transaction. A disabled row keeps next_run_at; enabled
// again it runs at that time, or at once if it has passed.
//
// The leader claims due rows (setting running_since and job_id) and
// inserts their River jobs in the same transaction, with MaxAttempts 1. A
// recurring job runs at most once at a time, even under a backlog: a
// claimed row is claimed again only when its River job has finished
// (completed, cancelled or discarded) or is gone from river_job, so at
// most one job per row is ever live, however long it waits in its queue
// (but for an old job an operator retried by hand, which the middleware
// cancels before its handler runs).
// Normally the middleware (below) releases the row when the job ends.
// Config.RecurringStaleAfter only guards a run that ended without its
// outcome being recorded, say because the process died in the handler or
// after it: such a row is reclaimed once it has been claimed for longer
// than that, whether or not it is enabled (a disabled row is released
// then, and not run). A lost run whose River job did not complete counts as a
// failed run (below), so that a handler that kills its process every time
// parks its row as a dead letter rather than be run again, and kill its
// process again, for ever; one whose job completed (only the write of its
// outcome was lost) runs again at once.
//
// # Outcomes and dead letters
//
// The handler of a recurring job is an ordinary River worker for its kind.
// RecurringMiddleware, added to the queue's middleware, records each
// run's outcome on the row. After a success the row runs next at the time
// the handler chose with NextRunAt, or the delay it chose with NextRunIn,
// or else after its kind's interval; delays count from the database's
// clock (braid_now()), as every recurring time does, so a handler that
// means "in d" calls NextRunIn(ctx, d) rather than NextRunAt with a time
// from its own clock. After a
// failure it backs off (by RecurringConfig.Backoff, a queue.Backoff:
// 1m·2^(n-1), capped at 24h, ±20% by default) and counts
// consecutive_failures; after
// RecurringConfig.MaxFailures in a row it is parked as a dead letter until
// Revive. A run interrupted by a stop (the queue cancels its handler at
// shutdown, and River makes its job available again) is no failure:
// nothing is recorded, and the row stays claimed by that job, which runs
// again as the row's run. A reclaimed run whose River job did not complete counts as a
// failure in the same way, by the middleware given as Config.Recurring. River itself never retries these
// jobs: the row's backoff is the retry. A River job of a recurring job
// retried by hand runs only as its row's run: when it is the row's last
// job and the row is idle, enabled and not parked; otherwise the
// middleware cancels it with the reason. The stored error text goes through queue.SanitizeErrorText (no
// NUL bytes, valid UTF-8, at most queue.MaxErrorBytesDefault).
//
// # Starting and stopping
//
// Start's context bounds start-up only; the Scheduler runs until Stop.
// Stop lets the transaction in flight finish (or, once its context ends,
// cancels it, and it rolls back as a whole), releases the lease, and
// returns only after every goroutine that Start started has returned.
//
// # Setup
//
// The middleware goes into the queue's configuration; the scheduler takes
// the queue that results:
//
//	mw, err := scheduler.NewRecurringMiddleware(pool, &scheduler.RecurringConfig{MaxFailures: 8})
//	q, err := queue.New(pool, &queue.Config{Workers: workers, Middleware: []rivertype.Middleware{mw}})
//	s, err := scheduler.New(pool, &scheduler.Config{Queue: q, Workflows: engine, Recurring: mw})
//	err = q.Start(ctx)
//	err = s.Start(ctx)
//	defer s.Stop(ctx) // returns once the scheduler's goroutines have returned
package scheduler
