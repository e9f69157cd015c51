// Package workflow is braid's engine: durable functions on PostgreSQL,
// compiled to River jobs.
//
// # Workflows, runs and tasks
//
// A workflow is a named, typed function declared with [Define]:
//
//	var Digest = workflow.Define("digest", func(t *workflow.Task, in DigestIn) (DigestOut, error) {
//		pages, err := workflow.Map(t, "fetch", FetchArticle, in.URLs) // fan-out, then continuation
//		if err != nil {
//			return DigestOut{}, err
//		}
//		if err := t.Delay("window", in.Window); err != nil { // a durable timer
//			return DigestOut{}, err
//		}
//		return workflow.Step(t, "send", func(ctx context.Context) (DigestOut, error) {
//			return send(ctx, pages)
//		})
//	})
//
// A run is one execution of a workflow, started with [Workflow.Start] or,
// inside the caller's transaction, [Workflow.StartTx]. A task is one
// invocation of a workflow inside a run: the run's root, and every child
// started with [Go] or [Map].
//
// # Turns and replay
//
// A task executes in turns. A turn is exactly one River job of kind
// braid_task; a unique option guarantees at most one live turn per task. A
// turn calls the workflow function from the top. Durable calls ([Step],
// [Task.Delay], [Go], [Map], [Future.Get]) consult what earlier turns
// recorded: a recorded step returns its result without running, a fired
// delay returns nil, a finished child returns its output.
//
// When a durable call must wait (a delay that has not passed, a child that
// has not finished) it returns [ErrSuspended]. Return it like any error. The
// turn ends, the task is marked waiting, and whoever makes its condition
// true gives it its next turn in the same transaction: the delay processor
// for a timer, the last finishing child for a join. If the code swallows
// ErrSuspended the engine still suspends, and every durable call after a
// suspension in the same turn returns ErrSuspended without running.
//
// # What must be deterministic
//
// Because every turn replays the function from the top, the sequence of
// durable calls and their names must be the same on every turn, given the
// same input and the same recorded results. Put anything that varies (the
// clock, random numbers, network and database reads, environment) inside a
// Step, whose result is recorded. A repeated name in one task gets an
// automatic "#n" suffix, so loops of steps work, as long as the loop itself
// is deterministic.
//
// # Steps run at least once, and are recorded exactly once
//
// A step's result is written with INSERT … ON CONFLICT, so the first writer
// wins, and a late writer continues with the winner's result. A step body can
// run again after a crash before its result was recorded, so side effects
// outside PostgreSQL should carry [Task.IdempotencyKey].
//
// # Failure and retry
//
// A turn that returns an error (or panics: the panic and its stack become
// the error) is retried by River with the workflow's retry policy
// ([WithRetry], [WithMaxAttempts]). Recorded steps replay, so the retry
// resumes at the failing step. When the attempts are spent the task fails:
// its parent sees a [*ChildError] from Get or Map, or the run fails. A step
// with its own [Retry] policy is retried by snoozing the turn, without
// spending the task's attempts; once exhausted, [Step] returns a
// [*StepError] that replay returns again.
//
// [Engine.Cancel] cancels a run's unfinished tasks, pending delays and turns.
// [Engine.Retry] resumes a failed or cancelled run at the failed step.
//
// # Joins
//
// A task that waits on children resumes when every child it has started
// and that has not yet finished has finished. The count is kept on the
// parent's row: the parent counts its unfinished children under its row
// lock when it suspends, each finishing child locks the parent row and
// decrements it, and the child that reaches zero inserts the parent's next
// turn, exactly once.
//
// # Delays
//
// [Task.Delay] records a delay step whose resume time is computed by the
// database clock. One process at a time, the holder of the lease
// braid:delays, runs the delay processor: it wakes due delays in batches
// with SKIP LOCKED, inserting their turns in the same transaction, sleeps
// until the earliest pending delay, and wakes early on a NOTIFY when a
// nearer delay is written. When its holder dies, another process takes the
// lease.
//
// # Tracing
//
// One run is one trace. Starting a run records a braid.run.start span; every
// turn attempt is a braid.task <workflow> span, a child of it, linked to the
// turn that suspended; every step is a braid.step <name> span inside its
// turn.
package workflow
