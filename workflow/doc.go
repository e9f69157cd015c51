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
// # DAGs
//
// A workflow can also be a declared graph: [DAG] names its nodes, each a
// [Node] running any registered workflow, with its dependencies ([After]),
// an optional condition ([When]) and a failure policy ([OnFailure],
// [IfDAGFails]):
//
//	fetch := workflow.Node("fetch", Fetch)
//	lang := workflow.Node("language", Detect, workflow.After("fetch"))
//	sum := workflow.Node("summary", Summarize, workflow.After("language"),
//		workflow.When(`language.code in input.languages`))
//	index := workflow.Node("index", Index, workflow.After("language", "summary"))
//	var Pipeline = workflow.DAG[Article]("article", fetch, lang, sum, index)
//
// A DAG is a [Workflow]: Start, StartTx, Result, Cancel and Retry work on
// its runs as on any other, a workflow can start one as a child with
// [Go] or [Map], and a node of another DAG can run one (its nodes are
// created once that node is released). Every node gets the DAG's input as
// its own. A dependent reads a dependency's output typed, through the
// dependency's [NodeRef] ([NodeRef.Output]); the DAG's output, a
// [DAGResult], holds the outputs of its sinks (the nodes nothing depends
// on) that completed, read with [NodeRef.From]. Register each node's
// workflow with the engine too.
// [NewEngine] rejects a DAG with no nodes, more than [DAGMaxNodes] nodes
// or [DAGMaxDependencies] dependencies, a duplicate node, an unknown
// dependency, a cycle (naming its nodes), a condition that does not
// compile or is not boolean (with its position), or a node whose workflow
// is not registered.
//
// A DAG run is its root task and one task per node, the root's children,
// created in the transaction that creates the root. A node without
// dependencies is decided there: it gets its first turn, or, when its
// condition is false on the input, it is skipped there, and the skip
// settles as any other (below). The other nodes are blocked, their
// count of remaining dependencies on their row (invariant 6). When a node
// is final, the batch that records it counts it off each of its
// dependents, in the same transaction: this is the settle path of joins
// and run finishes, with the DAG's blocked nodes locked in the batch's one
// ordered lock statement. A dependent whose count reaches zero is decided
// there and then: it is released, and its first turn inserted (and claimed
// for this process, so the edge costs one hop, see "Continuations without
// a queue hop"), or it is skipped. A skip counts as a finish for the
// skipped node's dependents, so skips cascade. The root waits for its
// nodes as a parent waits for its children; its one turn, once every node
// is final, reads the outcome. So while its nodes run, a DAG run and its
// root task are waiting, as are a run and its root that wait for
// children, and the inspection (Engine.Run, ListRuns, the CLI) shows
// them so, however the run was started, or resumed by [Engine.Retry].
//
// A process that does not register a DAG (an admin server, the braid CLI)
// can still start it by name ([Engine.StartByName]), but cannot know its
// nodes: the run then has its root task only, pending, until the root's
// first turn, in a process that knows the DAG, creates the nodes in its
// outcome's transaction and suspends on them. From then on the run, its
// root and its nodes have the statuses, stored and shown, of a DAG run
// started with [Workflow.Start], and settle as they do.
//
// A node is skipped when its condition is false, or, without a condition,
// when every one of its dependencies was skipped; its row keeps the reason
// (skip_reason), which braid runs show prints. A condition is an
// expr-lang/expr program over the DAG's input (input), each dependency's
// output under the dependency's name (nil for one that did not complete)
// and status (dependency name → completed, failed or skipped). It runs in
// a sandbox: bounded source, syntax nodes, memory, steps and bytes, an
// allow-list of builtins, no method calls, only data. A condition that
// fails to evaluate fails its node, with the node and the expression in
// the error.
//
// A node's attempts and backoff are its workflow's. Once they are spent,
// its policy applies. Under FailDAG, the default, the DAG fails: every
// blocked node is skipped at once ("the DAG failed: node … failed"), the
// nodes that run finish, and the run fails with a *[NodeError] naming the
// node. The failed node's job is the run's dead letter; the root's turn,
// which reads that failure, fails its task at once and cancels its own job
// with the error rather than leave River to retry it. Under [Continue] the failure counts as final for the dependents,
// which see it in status. An on-failure node ([IfDAGFails]) waits for
// every other node and runs only if the DAG failed. [Engine.Retry] of a
// failed DAG run keeps its completed nodes, and resets the others (and
// the on-failure nodes), which run again once their dependencies have,
// their conditions evaluated afresh. A reset node that waits for a
// dependency that runs again starts afresh: what it recorded, its steps
// and its children, is forgotten, since its dependencies' outputs may
// change and it may be skipped; nothing it started runs until it is
// released. A reset node whose dependencies all completed is decided at
// once and, when it runs, resumes where it stopped.
//
// A node's turn spans carry dag and dag.node attributes; a released
// node's first turn links to the turn of the node that released it
// ("releasing node"). Should the process that settles a node's last
// dependency not know its DAG (a rolling deploy, or services that share a
// database), the node stays blocked with nothing to wait for, and a
// process that knows the DAG decides it: every process that knows a DAG
// looks for such nodes every Config.ReconcileInterval, whether or not it
// holds the maintenance lease. A node that fails under FailDAG in such a
// process cannot skip the DAG's blocked nodes there; the failure is read
// from the node's row by the next process that knows the DAG and settles
// or decides one of its nodes, which skips them before releasing any.
//
// A run keeps the nodes it was started with. A node added to a DAG's
// declaration is a node of the runs started since, not of the runs in
// flight, whose results hold the outputs of their own sinks (the nodes of
// the run that no other node of the run depends on). A node removed from
// it is decided only by a process that still declares it: a run in
// flight whose removed node still waits for a dependency then waits for
// such a process. Keep a removed node declared until the runs started
// before its removal have finished, or cancel them.
//
// # Turns and replay
//
// A task executes in turns. A turn is exactly one River job of kind
// braid_task, whose unique key is its task's ID: River's unique index
// allows at most one live turn per task. A turn calls the workflow
// function from the top. Durable calls ([Step], [Task.Delay], [Go], [Map],
// [Future.Get]) consult what earlier turns recorded: a recorded step
// returns its result without running, a fired delay returns nil, a
// finished child returns its output.
//
// When a durable call must wait (a delay that has not passed, a child that
// has not finished) it returns [ErrSuspended]. Return it like any error. The
// turn ends, the task is marked waiting, and whoever makes its condition
// true gives it its next turn in the same transaction: the delay processor
// for a timer, the last finishing child for a join. If the code swallows
// ErrSuspended the engine still suspends, and every durable call after a
// suspension in the same turn returns ErrSuspended without running.
//
// A turn starts by reading its task, the task's recorded steps and its
// children. The first turn of a new task carries the River tag first_turn:
// children are created only by an outcome that ends its turn's job (or,
// for a DAG, with the DAG's task), so on its first attempt the task has
// none, and the read of children is skipped.
//
// # What must be deterministic
//
// Because every turn replays the function from the top, the sequence of
// durable calls and their names must be the same on every turn, given the
// same input and the same recorded results. Put anything that varies (the
// clock, random numbers, network and database reads, environment) inside a
// Step, whose result is recorded. A repeated name in one task gets an
// automatic "#n" suffix (its n-th call is name#n), so loops of steps work,
// as long as the loop itself is deterministic. A call whose name another
// call of the turn was given already (a step named "a#2" after two steps
// "a") takes the next free suffix instead, so no two calls share a record.
//
// # Replay refuses to diverge
//
// Each durable call ([Step], [Task.Delay], [Task.DelayUntil], [WaitSignal],
// [WaitEvent], [SetEvent], [Go], [Map]) takes the next position in its
// task, from 0, on every turn, and the position is recorded with the
// call: on the step's row, or on the rows of the children a Go or a Map
// started (a detached child's start is recorded without a position,
// outside the history that replay checks: see [Detached]). When a turn's code makes another call at a position than the
// one recorded there (a step renamed, two calls swapped, a delay removed:
// new code deployed while runs are in flight), the call returns a
// *[NondeterminismError] naming the task, the position, what was recorded
// and what was called, before anything of it runs, and so does every
// later call of the turn; the turn fails with it whatever the code makes
// of it, and records nothing else. River retries the attempt (a process
// still on the old code may take it); once the attempts are spent the run
// fails, and [Engine.Retry] resumes it once fixed code is deployed. A
// call after the last recorded one is new code's future, and runs.
//
// Check before deploying: [Engine.CheckReplay] replays the unfinished runs
// against their histories with the code about to be deployed, running no
// step body and writing nothing, and lists the runs that would diverge
// (package check makes it a command of a service's binary). [ExportRun]
// writes a run's history, and [Replay] (testutil.Replay in a test)
// replays code against such a file with no database, so that a run from
// production becomes a regression test.
//
// # Steps run at least once, and are recorded exactly once
//
// A step's result is written with INSERT … ON CONFLICT, so the first writer
// wins, and a late writer continues with the winner's result. A step body can
// run again after a crash before its result was recorded, so side effects
// outside PostgreSQL should carry [Task.IdempotencyKey].
//
// A step is durable when [Step] returns: its record has committed, fenced
// on its task still running by a share lock of the task's row, so that no
// step is recorded after Cancel commits, and checked against the turn's
// own River job still running the turn's attempt, so that an attempt that
// lost its job (rescued while its process froze) records no step, even in
// a task that Retry made pending again. A turn whose context ends while its record waits in the process
// withdraws it, or, once it is on its way, waits for its answer: no
// record lands after its turn gave up on it. The records of the steps that
// concurrent turns of one process finish at about the same time commit
// together, in one statement, as the loads of starting turns do: nothing
// lingers, and the records that arrive while a statement is in flight go
// in the next. That statement skips a task whose row another transaction
// holds locked, and a statement that fails is written again one record at
// a time, so that a locked task or a bad record holds up or fails only its
// own step. A step (or a SetEvent) whose record fails returns that error,
// and so does every later durable call of the turn, which fails with it
// whatever the code makes of it: nothing is recorded at the call's
// position, and the next turn, making the call again, may take another
// path than code that went on from the error.
//
// # Failure and retry
//
// A turn that returns an error (or panics: the panic and its stack become
// the error) is retried by River with the workflow's retry policy
// ([WithRetry], [WithMaxAttempts]). Recorded steps replay, so the retry
// resumes at the failing step. A step without a [Retry] of its own is not
// recorded when it fails, unless the code goes on from its failure: once
// the turn makes another durable call after it (a compensation, say), or
// completes, the failure is recorded first, so that River's next attempt,
// and every later turn, replays the path the code took rather than run the
// step again and meet the compensation's record where its normal path
// records something else. Replay returns it as a [*StepError], which
// matches with errors.Is the errors the step's error was (by type and
// message), as the error the body returned did. A failure that cannot be
// recorded (the turn's context had ended as the step failed, the
// statement failed) fails the turn, and every durable call the code makes
// after it returns that error. When the attempts are spent the task fails:
// its parent sees a [*ChildError] from Get or Map, or the run fails. A step
// with its own [Retry] policy is retried by snoozing the turn, without
// spending the task's attempts; once exhausted, [Step] returns a
// [*StepError] that replay returns again.
//
// [Engine.Cancel] cancels a run's unfinished tasks, pending delays and turns.
// [Engine.Retry] resumes a failed or cancelled run at the failed step. A
// failure that a completed task handled stays as it is. In each task it
// resets, Retry forgets the calls whose ends it forgets (a step recorded
// as failed, a cancelled delay or wait, a failed or cancelled child) and
// what the task recorded after such a call once it could have seen that
// end: the code that ran then saw the failure (it compensated, say), and
// once the call succeeds the code may take another path, which must not
// meet the records of the first. A step's failure is seen as Step
// returns, so every later record goes, even when the code went on from
// it unchanged (an optional step whose failure it ignored): Retry cannot
// tell, and the steps after it run again, under the same idempotency
// keys; a child's only once the child has
// finished, so what the task recorded before that stays. So the task's
// code runs again from the forgotten call: the steps recorded before it
// replay, those forgotten run again, the children forgotten are forgotten
// with all they did (a child started again is a new task, with new
// idempotency keys), and a signal that a forgotten wait took goes back to
// the run's mailbox. An event that a forgotten record set with SetEvent
// (the task's own, or a forgotten child's) goes back to the value of the
// latest kept record that sets its key, in the order the run recorded
// them, or is unset when no kept record sets it; GetEvent reads that
// value until the new path sets the key again.
//
// What Retry does not take back, as it cannot know it or undo it:
//   - a child's end counts as seen from the moment the child finished, so
//     what the task recorded after that moment is forgotten even when the
//     turn that recorded it had read the child before it finished;
//   - a detached child's run is its own and stays, and so does the
//     record of its start: a detached child of the same name started on
//     the new path is taken for it and not started again (give the
//     detached children of the two paths different names);
//   - an event, unlike a signal, that a forgotten wait took is not
//     published again: the wait, made again, sees only events published
//     after it.
//
// # An outcome belongs to its attempt
//
// A turn records its outcome (complete, suspend, fail, snooze for a step's
// retry) only while its own River job is still running at that attempt:
// the outcome's transaction first locks the job row by id, attempt and
// start time. An attempt that was rescued while it ran (its
// process froze, say) and returns late writes nothing; it says so at debug
// level and returns an error wrapping [queue.ErrJobNotRunning], on which the
// queue records nothing for the attempt either. The transaction runs even
// when the turn's context has ended (a timeout on the last attempt still
// fails the task), bounded by Config.OutcomeTimeout. Error text is
// sanitised once, before it is stored: NUL bytes are removed and it is cut
// to Config.MaxErrorBytes (64 KiB), with a mark where it was cut.
//
// # Batched outcomes
//
// A turn writes nothing as it starts: River's fetch has recorded the
// attempt, and the outcome is fenced on it. The turn reads its task, steps
// and children together with the turns that start beside it, in one round
// trip. While its turn runs a task is stored as pending, and the
// inspection (Engine.Run, ListRuns, the CLI) shows it, and a root task's
// run, as running, read from the running turn job.
//
// The outcomes of the turns that end at about the same time in one process
// commit together: one transaction carries their task updates, the children
// they start with their first turns, their jobs' completions, their runs'
// finishes with the NOTIFYs of their waiters, and their parents' joins. A
// batch commits when it holds Config.OutcomeBatchSize outcomes (50), when
// Config.OutcomeLinger (4 ms) has passed since it began to collect, or at
// once when no other turn of the process is running, so a lone turn never
// waits. Up to Config.OutcomeFlushes batches (2, and never more than half
// the pool's connections) commit at once, each on its own connection: while
// one waits on the database, the next collects the outcomes that end
// meanwhile and commits beside it; a batch begins to collect once a flush
// is free. A turn returns, and its job counts as complete, only once its
// batch has committed. When a batch fails, its outcomes are committed again
// one at a time, so that one bad outcome fails only its own turn; one that
// fails alone because it lost a conflict with another transaction (a
// deadlock, a serialization failure) is tried again, up to five times,
// rather than spend its turn's attempt. A batch waits for a row lock a
// quarter of Config.OutcomeTimeout at most (its lock_timeout), and each
// outcome it then records alone 100 ms at most: a task row that another
// transaction holds (a caller's CancelTx left open, say) fails the batch
// while its turns still wait for their outcomes, and the outcome whose
// row stays held, or that needs a row another transaction holds with
// NOWAIT, is then tried beside the batches, with backoff, failing only its
// own turn if the row stays held for OutcomeTimeout. Those tries go one at a time, each
// waiting 100 ms at most for a row, so that however many outcomes wait on
// one held row they hold one connection at most. Inside a
// batch, the children of one parent that finish together are summed into
// one decrement of the parent's join, and the parent's row is locked once
// per batch; when the parent is older than every other task of the batch,
// as in a fan-out, the batch locks it only as it settles, late in its
// transaction, so that the batches of the parent's other children wait for
// it less.
//
// A batch pays for round trips, not only for its commit, so it sends
// together the statements that do not wait on each other's results: its
// locks with its jobs' completions; its finished tasks with its detached
// children's runs; and, in its last round trip, its runs' finishes and
// their notifications, its attempts' errors, its claims (below) and the
// reads of the claimed turns' tasks. Its BEGIN travels with its first
// round trip and its COMMIT with its last, so a batch sends no round trip
// for either. A link of a chain, a turn that starts the next link as a
// detached child and completes, costs three round trips in all, and the
// next link starts without a read of its own.
//
// The histograms [MetricBatchSize] and [MetricBatchDuration] record every
// batch transaction, committed or failed: how many outcomes it carried and
// how long it took. Batches much smaller than the turns that end together
// point to a linger too short for them; long batches, to a database that
// the batches wait on.
//
// # Continuations without a queue hop
//
// When an outcome makes another task runnable (a child it starts, the
// parent whose join it completes, its own next turn once every awaited
// child has finished), the batch inserts that turn's River job already
// claimed for this process, in its last round trip
// ([queue.Queue.QueueInsertClaimed]): the job is written as River's insert
// and River's fetch together would leave it, running on its first attempt,
// with attempted_at and attempted_by set, and with the turn's unique key,
// so that a task never has two live turns. It does so when this process
// runs that workflow, works the turn's queue (a queue that only some
// processes work keeps its turns to them, as River's fetch does) and is not
// stopping, when the turn is of the same queue as the outcome's own (a
// worker slot of one queue never runs another queue's turn), and the queue
// is not paused (River's QueuePause: the turn is then inserted available,
// for River's fetch to take once the queue is resumed), for at most one
// turn per outcome, and only when the outcome's
// own turn has its result on record once the batch commits: its job
// finished in the batch, or it was itself a claimed turn, whose result this
// process records before its worker goes on. A turn River fetched that
// failed, or snoozes a step, has its result recorded by River as its worker
// returns, so that worker returns first. No fetcher is woken for a job that
// no other process could have, and the batch saves the round trip of
// River's insert. As soon as the batch commits, the worker that handed in
// the outcome runs the claimed turn in the River worker slot it still holds
// (a worker whose outcome deadline passes stops waiting for its batch,
// unless the batch has already claimed it a next turn: only that worker
// would run it, so it waits), so no more turns run at once in a queue
// than its MaxWorkers allow, through the queue's middleware (spans, metrics,
// heartbeats, the ownership watch), and then records its outcome as River's
// executor would, fenced on the attempt ([queue.Queue.WorkClaimed]). The
// batch that claims the turn also reads its task, steps and children, as
// they stand once the batch has written them, so the turn starts without a
// read of its own.
//
// This stays within River's model: the turn is a River job from insert to
// finish, claimed once, by one attempt, like a fetched one. The only
// differences are who claims it, and that the insert and the claim are one
// statement, which River's insert middleware and hooks do not see: neither
// the engine's own (which give a turn its unique key, as the statement
// itself does) nor any in Config.Queue.Middleware. Turns that no worker of
// this process takes next are inserted through River. A crash between the
// batch's commit and the turn's end leaves the job running with no
// heartbeat, so the heartbeat rescuer returns it to the queue and another
// process runs it, as with any job whose process died. Turns bound their
// own timeout (the definition's, or the queue's job timeout), so that a
// worker slot can run several turns one after another.
//
// # The reconciler: no run is stranded
//
// Some last attempts end without any outcome committing: the process was
// killed (the heartbeat rescuer then discards the job), the outcome
// transaction failed (a deadlock victim, a full disk), or an operator
// cancelled the job. The reconciler, which runs every
// Config.ReconcileInterval (1 s) in the queue's maintenance loop, reads
// the turn jobs that ended discarded or cancelled lately, finds their tasks
// still pending or running with no live turn job, and fails each with a
// stored error that says why and quotes the last attempt's error. Every
// Config.ReconcileSweepInterval (5 min) it also looks at every pending or
// running task, for a turn job that was deleted (the task fails) or that
// completed without settling its task (the task gets a new turn).
// The failure settles like any other: the parent sees it from Get or Map,
// or the run fails and Retry accepts it. It works under the task's row
// lock, which everything that gives a task a turn also holds, so a task
// that gets a turn meanwhile is left alone.
//
// A turn of a workflow that this process does not know (a rolling deploy,
// services sharing a database) is put back for Config.UnknownWorkflowSnooze
// without spending an attempt, and logged once per workflow name, so that
// a process that knows it takes it. A turn that no such process takes
// within Config.UnknownWorkflowTimeout fails its task.
//
// # Recovery times
//
// With the defaults, a turn whose process dies runs again on another
// process within 3 × TurnHeartbeat + 2 s (17 s): three missed heartbeats,
// the rescuer's check interval, the queue's RescueRetryDelay (1 s) and a
// fetch. A crash on the last attempt fails the task within another
// ReconcileInterval. A killed lease holder (delay processor, maintenance)
// is replaced within the lease's TTL.
//
// # One clock
//
// Every time the engine decides by (a delay or a wait's timeout is due, a
// run's deadline passed, a task went stale, retention's cutoff) and every
// time it records on its rows is read in SQL from braid_now() (the
// transaction's time) or braid_clock() (the statement's), never from the
// worker's clock; so are the scheduler's slots and recurring runs and the
// leases' expiries. In production they are now() and clock_timestamp(),
// inlined at no cost. testutil.Kit replaces them, in a test's own
// database, with a time that only the test moves. River's own times
// (river_job) stay on River's clock, and are compared with the database's
// own (the reconciler reads the turn jobs that River finished in the last
// minutes by finalized_at against now()).
//
// # Lock order
//
// Every path takes its row locks in one order, so that no two paths can
// deadlock:
//
//  0. the advisory locks of run mailboxes and topics (a send or a publish
//     takes its one lock first; a batch of outcomes takes those of the
//     waits on messages it records, ordered by key, before anything
//     else, without waiting: an outcome whose lock another transaction
//     holds, a caller's SignalTx still open, is left out of its batch and
//     tried again alone, holding no connection in between, until it gets
//     it; see "Signals, events and one winner among wake sources");
//  1. River job rows (a batch of outcomes locks its turns' jobs first, by
//     ID);
//  2. task rows, children before parents (a batch locks its turns' tasks
//     and the parents they settle in one statement, but for the parents
//     older than every task of the batch, which come after all of them in
//     this order and which its settle locks, later in the transaction;
//     every path that locks many tasks orders them by created_at DESC, id
//     DESC, and a child is always created after its parent; a DAG's
//     nodes, created together, follow id DESC among themselves, and a
//     batch that finishes a node locks its DAG's blocked nodes and every
//     parent in its first statement, the only rows its settle may change
//     besides its tasks and their parents, as does a batch that finishes a
//     task that may leave unfinished children, with those children);
//  3. step rows, then mailbox rows (braid_signals) and a run's published
//     state (braid_run_events);
//  4. the run row.
//
// Turns, Cancel, Retry, the reconciler, the decision of undecided DAG nodes
// (its DAG's blocked nodes, then its root, by created_at DESC, id DESC),
// retention and the delay processor follow it. A turn job is cancelled
// through River only under a lock of its task that shows the task
// cancelled: in the transaction that cancels the task, or, for the turns
// that transaction skipped and those of cancelled children, one job at a
// time, in a transaction that locks the job and then its task with a share
// lock, waiting a second at most for the job's row: a job held longer is
// tried again once a second, by the engine while it runs and by Cancel
// while it waits for the run's turns to end, so that a running turn's
// context ends once its row is free. The turns that CancelTx skips are
// kept for those tries at once, as CancelTx's caller cancels none itself:
// tried while the caller's transaction is open, they wait for their task's
// row (a second at most, then again), and do nothing if it rolls back. So a Retry that has reset a task never
// loses the turn it left the task to, and Retry, holding the tasks it
// resets, refuses to reset one whose turn is running and waits for that
// turn to end. A step's record holds only a share lock of its task's row,
// in one statement; records written together skip the rows others hold. A
// path that needs a lock earlier in the order than one it holds takes it
// with SKIP LOCKED or NOWAIT, never waiting: Cancel takes the run's turn
// jobs last with SKIP LOCKED (a turn it skips finds its task cancelled and
// does nothing), and locks children created while it waited for their
// parent with NOWAIT, starting over when one is held; a batch that cancels
// the children a finished task leaves locks those created while its lock
// statement waited with NOWAIT, and fails, to be recorded again one outcome
// at a time, when one is held; the delay processor claims delays and their
// tasks with SKIP LOCKED, and cancels a run whose deadline passed as Cancel
// does, under a short lock timeout, setting a run whose rows are held
// aside for a moment; the reconciler, holding the task it fails, locks that
// task's DAG nodes and parent with NOWAIT and looks again later when one is
// held; Retry, holding the tasks it resets, locks the finished children it
// forgets (see "Failure and retry") with NOWAIT, and starts over a moment
// later when one is held; retention skips a batch whose tasks are locked;
// waking an existing task first checks, with a plain read, that it has no
// live turn, so
// River's unique insert never waits on a job row. The run row is only ever
// updated, never locked FOR UPDATE, so the key share locks that inserting
// children takes on it block nothing; and no child's turn touches its run:
// only the root task settles the run.
//
// # Pool size
//
// Waiting for notifications (Run.Result, the delay processor) uses
// connections that the pool makes, with its connect hooks (a rotating
// password, say), and then gives up (pgxpool's Hijack), so waiting on a
// result never holds a slot of the pool and pool.Close never waits for it.
// While no such connection can be made, the delay processor polls every
// DelayPollInterval and tries to listen again, and a waiter for a result
// polls at ResultPollInterval. A running turn
// uses one pool connection at a time for its queries, plus short
// background queries for its heartbeat. A batch of outcomes holds one
// connection for its transaction, and at most Config.OutcomeFlushes
// batches, and never more than half the pool's connections, commit at
// once. The vacuum of a churned table (see "Space of churned tables")
// holds one connection while it runs, in the process that holds the
// maintenance lease. NewEngine refuses a pool of fewer than [PoolMinConns] (2)
// connections and warns below [PoolWarnConns] (4); pgxpool's default of
// max(4, CPUs) is enough.
//
// # Retention
//
// Finished runs (completed, failed, cancelled), with their tasks, steps and
// the turn jobs River has finished, are deleted in batches once they
// finished more than Config.Retention ago (7 days by default; negative
// keeps them forever). A turn job that another session holds (River's job
// cleaner deleting it), or that River has not finished (a late turn of a
// cancelled run), is left to River's job cleaner, which deletes finished
// jobs after River's own retention periods. An unfinished run
// is never deleted. An idempotency key holds for as long as its run is
// kept: after that, the same key starts a new run.
//
// One transaction deletes at most 10,000 tasks. A run that holds more (a
// wide fan-out) is deleted over several: it is first marked as being
// deleted (braid_runs.deleting), which only a run still finished and old
// takes, and then loses 10,000 tasks per transaction, leaves first, until
// the last transaction deletes it with what is left. [Engine.Retry]
// refuses a marked run with ErrRunBeingDeleted (which matches
// ErrRunNotRetryable): it would find some of its
// tasks gone. A process that dies meanwhile leaves the run marked, and the
// next pass goes on with it.
//
// A turn job's args hold only its workflow's name, and its metadata is
// inserted empty: its task is its unique key, and its span link is kept
// on the task. River indexes every value of a job's args and metadata in
// GIN indexes, and PostgreSQL never deletes an entry from a GIN index, so
// a value unique to a task or a job would stay in the index after River's
// job cleaner deleted the job, and the index would grow with every task
// ever run, whatever the retention. (A cancel or a priority aging still
// records its time in a job's metadata, as River does: one value per such
// event, not per task.)
//
// # Statistics of young tables
//
// braid reads its rows by key, and PostgreSQL keeps a generic plan for each
// of its prepared statements, made with the table sizes of that moment,
// until the table is analyzed again. A plan made while a table was nearly
// empty scans the whole table, and goes on scanning it as the table grows,
// until autovacuum's next analysis, up to a minute later by default. So
// the maintenance loop, every Config.ReconcileInterval, analyzes
// braid_runs, braid_tasks, braid_steps or river_job once its live rows
// have grown to eight times the rows its last analysis found (and number
// at least 8,000), which makes every connection plan its statements on it
// again. It goes by the rows that PostgreSQL's cumulative statistics
// count, which are committed rows, not by the table's size: an analysis
// that ran while one transaction inserts a fan-out's children would find
// their pages but not their rows, which are not yet visible, and record a
// large table of a row or two, on which keyed statements get plans that
// read the table whole until its next analysis. Autovacuum nearly always
// comes first; this covers a young table's first growth, as when a new
// database meets its first load. A table the engine's role does not own,
// or that a vacuum holds, is left to autovacuum: the analysis waits at
// most 100 ms for the table's lock, less than PostgreSQL lets a session
// wait before it cancels the autovacuum in its way.
//
// # Space of churned tables
//
// Every turn updates its task and its turn job, and retention deletes
// whole runs, so the tables leave dead row versions behind at the pace of
// the load, and PostgreSQL reuses their space only once a vacuum has
// visited the table: autovacuum does so about once a minute by default. A
// table that turns over faster than that, as under a short Retention,
// would hold a minute and more of rows where it needs seconds' worth. So
// the maintenance loop, every Config.VacuumInterval (1 s), vacuums
// braid_runs, braid_tasks, braid_steps or river_job once its new dead rows
// have reached a fifth of its live rows and number at least 10,000: the
// share at which autovacuum vacuums a table by default, but at once rather
// than at autovacuum's next visit. A table that turns over within a minute
// is then vacuumed every few seconds, each time briefly; a large one, as
// under a long Retention, takes hours to reach that share, and is vacuumed
// no more often than autovacuum would, though without autovacuum's
// throttle (a negative VacuumInterval leaves every vacuum to autovacuum).
// Dead rows that a vacuum could not remove yet, because an older
// transaction may still see them, do not count again. A table that
// another session holds (autovacuum, an analysis) is skipped until the
// next pass, and a table the engine's role does not own is left to
// autovacuum. As PostgreSQL cancels an autovacuum that a lock request
// waits on, the engine's vacuum gives way to one within a fifth of a
// second (a migration's ALTER TABLE, which would otherwise wait for the
// whole vacuum, with every statement on the table queued behind it), and
// the table waits for the next pass. It looks for such a session on a
// connection of its own, taken out of the pool (Hijack), so that it gives
// way even when every connection of the pool waits behind that session.
// It runs without the session's statement_timeout, as autovacuum does, on
// a connection of the pool that it holds while it runs.
//
// # Plans of the turns' statements
//
// A turn's statements, the load that starts it and the outcome batch that
// ends it, read and write their rows by key. PostgreSQL plans a prepared
// statement anew, for its arguments, at each of its first five executions
// on a connection, and after that whenever its generic plan looks dearer
// than those, as it does for keys passed in an array, whose generic plan
// counts on ten of them. Planning such a statement costs more than running
// it, and a new connection plans each statement five times over. So the
// loads and the batches run on generic plans made with index scans: each
// sets plan_cache_mode to force_generic_plan and enable_seqscan to off
// first (with its BEGIN, for a batch), for its own transaction only
// (set_config with is_local, which ends with the transaction, or with the
// implicit one of a pipeline sent without BEGIN), so that no other
// statement on the connection, braid's or the application's, is planned
// differently.
//
// A generic plan is kept until its tables are analyzed again (see above),
// and one made while a table held a few rows may read it whole. So each of
// these statements reads every table it touches by an index condition on
// the keys it is given or has just read: a run's trace by a subquery on
// the run's key rather than a join; a DAG's blocked nodes by their
// parents' keys; the unfinished descendants of a task level by level,
// each level's children by their parent's key (a lateral subquery that
// OFFSET 0 keeps from being folded into a join). A test plans every
// statement that a varied workload ran on generic plans again, on an
// empty database and on one of a few rows, and fails on any that reads a
// table otherwise.
//
// One state of the statistics defeats this: a table recorded as a row or
// two in many pages, as an analysis records it while one transaction
// inserts many rows that it cannot yet see. The statements that join a
// batch's keys to a table (the updates of its tasks, runs and jobs) then
// get plans that read the table's primary key whole, a row or two being
// cheaper to read than to look up key by key. braid's own analysis never
// records that state (see above); autovacuum can, on a young table, and
// the plans then read whole until the table's next analysis. A key array
// beside each join (id = ANY($1)) would rule such plans out, but makes
// the batches' plans on right statistics dearer: bitmap scans and hash
// joins instead of one index probe per key.
//
// # Joins
//
// A task that waits on children resumes when every child it has started
// and that has not yet finished has finished. The count is kept on the
// parent's row: the parent counts its unfinished children under its row
// lock when it suspends, and each batch in which children finish locks the
// parent row once and takes their sum off the count. The batch that
// reaches zero inserts the parent's next turn, exactly once.
//
// # Children belong to their parent
//
// A child started with [Go] or [Map] belongs to the task that started it.
// When that task finishes, completed or failed, before a child it never
// awaited has, the batch that records the finish cancels the child and its
// own descendants (their waiting delays too) and, once it has committed,
// asks River to cancel their running turns, whose contexts end. The
// children come before their parent in the lock order, so the batch's one
// lock statement takes them first.
//
// A child started with [Detached] is a run of its own instead, started in
// the transaction that records the turn that first called Go, with an ID
// derived from the parent task and the child's name (so every replay names
// the same run). It runs to its end whatever its parent does, and stays
// reachable through [Future.RunID]: wait for it or cancel it with a
// handle from [Workflow.Get]. Its parent does not await it. The same
// transaction records the start in the parent's task, as a step of kind
// detached whose output is the run's ID: the parent's later turns find
// the record and start nothing, even once retention has deleted the
// child's run.
//
// A turn this process claimed (see "Continuations without a queue hop")
// is not River's to interrupt; when River's JobCancel asks for its job to
// stop, the queue's ownership watch ends its context instead, and the job
// is recorded cancelled.
//
// # Delays
//
// [Task.Delay] records a delay step whose resume time is computed by the
// database clock. One process at a time, the holder of the lease
// braid:delays, runs the delay processor: it wakes due delays in batches
// (Config.DelayBatchSize, 100 by default, so that a burst's first turns
// start while the rest are woken) with SKIP LOCKED, inserting their turns
// in the same transaction, sleeps until the earliest pending delay, and
// wakes early on a NOTIFY when a nearer delay is written. When its holder
// dies, another process takes the lease. It finds due delays (and overdue
// run deadlines) by reading the clock once per statement, so that its
// index scans stop at the first row not yet due, however many delays wait.
//
// The processor spends one transaction at a due time when no deadline is
// due: it reads when the next delay and deadline are due in the
// transaction that wakes the due delays, and looks for overdue runs only
// when a deadline may be due. The NOTIFY of a new delay carries its due
// time, by the database's clock, so that one due after the timer the
// processor has set costs it no statement; one without a due time (a new
// deadline's, say) makes it look for everything. A NOTIFY lost (its
// connection down, say) is made up for by the poll: every
// Config.DelayPollInterval (a second by default) at the latest, the
// processor looks for everything due.
//
// A batch that fails is retried one delay at a time. A delay whose wake
// fails even alone, by a fault of its own row (a trigger or a constraint
// that refuses it, not a lost connection or a held lock), is set aside:
// the processor leaves it out of its statements for a second, then twice
// as long after each failure that follows, up to five minutes, so that
// delays that always fail neither fill its batches ahead of the ones due
// after them nor make it wait a full poll interval. A run whose deadline
// cancel fails that way is set aside the same way. The record is the
// processor's own, in memory: a process that takes the lease over tries
// each such row again once.
//
// # Signals, events and one winner among wake sources
//
// A task can wait on a message from outside its run:
//
//   - a signal: [Engine.Signal] (or [Engine.SignalTx], [Engine.SignalByKey]
//     and [Run.Signal]) sends a named payload to a run, and [WaitSignal]
//     takes the next one of that name;
//   - an event: [Engine.Publish] (or [Engine.PublishTx]) publishes a
//     payload on a topic, and [WaitEvent] takes the first event on its
//     topic whose payload passes its filter, an expr condition over
//     payload and the task's input, compiled when the wait is first
//     reached, in the sandbox of a DAG's When conditions.
//
// Both take an optional timeout by the database's clock and report which
// came first. A wait is a step, recorded waiting as its task suspends,
// like a delay, so a task that waits costs nothing: no goroutine, no poll,
// no turn.
//
// Invariant 2 of the design, one winner among wake sources, covers every
// wait: a suspended task waits on one condition, a timer (a delay, a
// wait's timeout or a run's deadline), a counter (its children, a DAG
// node's dependencies) or a message (a signal or an event), and whoever
// makes the condition true inserts the next turn in the same transaction,
// fenced on the wait itself. A wait on a message with a timeout has two
// sources: the message, which sets the step completed with its payload,
// and the delay processor, which sets it fired as its timeout passes. Each
// changes the step only while it is still waiting, under the lock of the
// task's row, so exactly one of them wins and gives the turn, and the
// other finds the wait settled and does nothing: a signal that loses stays
// in the mailbox for the next wait, a timer that loses was already
// settled. Cancel settles a waiting step as cancelled, and neither source
// then wakes it.
//
// A message and the suspension of a task that will wait for it meet under
// one transaction-scoped advisory lock, the run's mailbox lock for a
// signal and the topic's lock for an event, which a sender or publisher
// takes before anything else and a batch of outcomes takes before its turn
// jobs. Either the message commits first, and the batch that records the
// wait finds it and wakes the task in the same transaction (the worker
// whose turn suspended runs the next one, as for any continuation), or
// the wait commits first, and the message finds it. Nothing is lost
// between the two, and no process has to stay alive for it: the message
// and the wake commit together, and the woken turn is a River job like
// any other. This needs each statement of the send to see what committed
// before it, as READ COMMITTED does: [Engine.SignalTx] and
// [Engine.PublishTx] refuse a caller's transaction whose snapshot is
// older (REPEATABLE READ, SERIALIZABLE), which would not see a wait
// recorded while the send waited for the lock.
//
// Signals are kept in each run's mailbox, in the order sent (senders to
// one run take its lock one at a time), and each is taken by one wait,
// exactly once: the mailbox row records the task and the step that took
// it. A signal sent before the wait is kept until a wait takes it; one
// sent to a finished or unknown run is refused with [ErrRunFinished] or
// [ErrRunNotFound]. [SignalOpts].IdempotencyKey makes a repeated send to
// the same run a no-op.
//
// Events are kept for Config.Retention. A wait sees every matching event
// published after the turn that suspends on it began (River's record of
// the attempt, by the database's clock), those published while that turn
// still ran included, and no event published before it, nor one that an
// earlier wait of the task on the topic took: the publish reads its time
// under the topic's lock, and the wait is recorded under the same lock. A
// turn that runs again (its attempt failed, its process died, or it was
// put back to run later: a step's retry, a stop) began, for its waits,
// when it was given (its River job inserted), so that none of the events
// published during its earlier attempts is lost. Every matching wait takes
// the same event; a publish reads the waits of its own topic only, through
// a partial index. A filter that fails to evaluate on a payload (a member
// of a missing field, say) does not match it, and the failure is logged
// with the task.
//
// # Published state
//
// A workflow publishes state with [SetEvent], one value per key, which
// outsiders read with [GetEvent] or [Run.GetEvent]: Temporal's query,
// DBOS's event. The value is written in the transaction that records the
// call as a step, fenced on the task still running, so a replay writes it
// no second time and a cancelled task writes nothing; the last call for a
// key wins. A reader waits for a key not yet set on LISTEN, with a poll
// fallback, as [Run.Result] does, and learns at once when the run
// finished without setting it ([ErrEventNotSet]).
//
// # Run deadlines
//
// A run can have a durable deadline for the whole of it: StartOpts.Timeout,
// or the definition's [WithRunTimeout] (StartOpts.Timeout wins; 0 means
// none, a negative timeout is refused with its value). The deadline is
// computed by the database clock as the run is created (its created_at
// plus the timeout) and stored on the run, in the transaction that creates
// it, for Start, StartTx, StartMany and DAG runs alike (runs that a
// schedule starts get their definition's); children and DAG nodes live
// within their run's deadline and have none of their own.
//
// The delay processor keeps the deadlines, with the delays: after waking
// the due delays, it cancels the unfinished runs whose deadline has
// passed, each in its own transaction through Cancel's own path (the
// lock order, every unfinished task, waiting delay and turn job of the
// run, DAG nodes included), so that one run that cannot be cancelled
// holds back no other. It sleeps until the earliest delay or deadline,
// and a run started with a deadline (or given a fresh one by Retry) sends
// a NOTIFY on the delays' channel, which makes it look for everything due,
// so a near deadline is not missed. Being a row like a delay, a deadline
// survives restarts and a change of the lease's holder: a deadline that
// passed while no process ran is acted on by the next holder.
//
// A run that times out ends cancelled, with an error of kind timeout that
// names its timeout. [Run.Result] and [Engine.Wait] return its *[RunError]
// wrapping a *[TimeoutError] (run, workflow, timeout and deadline), so
// errors.As finds either, and errors.Is(err, [ErrCancelled]) holds. A turn
// running at the deadline learns of it as of any cancel, through its
// context, and its outcome records nothing; the delay processor does not
// wait for it. [Engine.Retry] of a run with a timeout gives it a fresh
// deadline, the same timeout counted from the retry.
//
// # Tracing
//
// One run is one trace. Starting a run records a braid.run.start span,
// whose context the run keeps. Every turn attempt is a braid.task
// <workflow> span, a child of braid.run.start, and every step a
// braid.step <name> span inside its turn. The spans carry run.id,
// task.id, workflow, attempt, job.id and queue; errors set their status.
//
// A turn's span links to the spans that explain why it runs, each link
// naming its kind under the attribute [LinkAttribute] (braid.link):
//
//   - "suspended turn": the task's previous turn, which suspended it;
//   - "spawning turn": for a child's first turn, the parent's turn that
//     started it with Go or Map (kept on the task, for that turn's job,
//     and not in the job's metadata, which River indexes for good);
//   - "releasing child": for a parent's turn after a wait on children, the
//     turn of the child whose finish released it (kept likewise);
//   - "releasing node": for a DAG node's first turn, the turn of the node
//     whose finish released it (kept likewise);
//   - "sending signal" and "publishing event": for a turn woken by a
//     message, the braid.signal <name> or braid.publish <topic> span that
//     sent it, in whichever process that was (kept likewise).
//
// A wait is a span too, so that a trace shows why nothing ran: braid.wait
// delay <name> for a delay (braid.wait signal <step> and braid.wait event
// <step> for waits on messages, whichever source ended them), from the
// turn's suspension (when the delay was recorded) to the moment the delay
// processor fired it, and braid.wait children for a wait on children, from
// the suspension to the batch in which the last child finished, with the
// number of children the task started. Both are children of
// braid.run.start, with run.id, task.id and workflow, and are recorded
// whole, with the recorded times (the database's clock), once the wake has
// committed: no span stays open while a task waits, however long. A wait
// that Retry begins, or that the reconciler ends, records no span.
package workflow
