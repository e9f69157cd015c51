// Package chaos is braid's fault suite: it runs workflows in real worker
// processes on a private PostgreSQL cluster, injects faults (SIGKILL,
// SIGSTOP, immediate restarts of PostgreSQL, killed lease holders, Cancel
// and Retry storms, timeouts and hostile error texts) and reports, as
// figures, whether anything was lost or done twice. It is what
// `braid chaos --run` and `make chaos` run.
//
// # Processes
//
// [Run] is the coordinator. It starts its own cluster (internal/localpg,
// fsync on) because it restarts PostgreSQL, migrates one database with the
// migrations package, and starts worker processes by running a command
// ([Config.WorkerCommand]: the braid binary in its hidden worker mode, or a
// test binary) with [EnvWorker] set. A worker ([WorkerMain]) runs a
// workflow.Engine with the chaos workload registered until it is told to
// stop or killed. The coordinator starts runs through an engine of its own
// that works nothing, injects faults, and waits for the runs to settle.
//
// # Workload
//
// chaos_flow runs a step, fans out children with workflow.Map, waits out a
// durable delay, joins the children's results in a step and finishes in a
// last step. The chaos_fail_* workflows are made to fail on purpose (a step
// that hangs until its process is killed, that blocks past its timeout, or
// that returns an error holding a NUL byte or a mebibyte of text) until the
// coordinator releases the run and retries it.
//
// Every step body does two things before it returns, each on its own
// connection outside the engine's transactions:
//
//   - it appends a row to chaos_ledger: the step's idempotency key, the
//     process, the attempt, a fresh random token that the step returns, and
//     the tokens of earlier steps that it consumed;
//   - it applies an external side effect: an INSERT into chaos_effects keyed
//     by Task.IdempotencyKey, which counts a repeated attempt instead of
//     applying it again.
//
// # Figures
//
// A step body that runs again is allowed (steps run at least once) and is
// counted in step_reruns. A step recorded twice is not: it shows as a
// consumer (a later step, a join, the run's output) that saw a token other
// than the one braid_steps recorded, or a recorded token that no execution
// produced. steps_recorded_twice counts such steps. A side effect applied
// more than once shows as one logical step (run, task key, step) with more
// than one row in chaos_effects, under different keys;
// side_effects_duplicated counts those.
//
// A run is lost when it has not reached completed, failed or cancelled
// within the settle bound after the last fault (or a turn of it is still
// live), or when its outcome is wrong: a run meant to complete did not, or
// with the wrong output; a run meant to fail did not fail, or did not
// complete after Retry. Runs that failed on purpose are counted in failed.
// deadlocks is the growth of pg_stat_database.deadlocks while a scenario
// ran. settle_seconds is the time from the last fault until every run of
// the scenario settled.
//
// # Scenarios
//
//   - kill: SIGKILL of workers under load, including a worker running the
//     last attempt of a run (which must then end failed, and complete on
//     Retry).
//   - restart: immediate shutdowns of PostgreSQL (SIGQUIT to the
//     postmaster, as pg_ctl -m immediate does) and restarts while runs are
//     in flight.
//   - freeze: a worker frozen with SIGSTOP past the heartbeat rescue
//     window, then thawed with SIGCONT, so its turns come back as zombies.
//   - lease: SIGKILL of the holder of the delay processor's lease while
//     delays are pending.
//   - storm: Cancel and Retry from the coordinator against runs that are
//     completing and suspending, then a Retry of every cancelled run.
//   - timeout: the last attempt of a run outlives its workflow.WithTimeout,
//     with a step that honours its context and one that ignores it.
//   - errors: errors holding a NUL byte and errors of 1 MiB of text, in a
//     root task and in a child, beside unrelated runs that must complete.
//
// # Exit status
//
// [Report.OK] is true when every scenario shows no lost run, no step
// recorded twice, no side effect duplicated and no deadlock. `braid chaos`
// exits non-zero otherwise, after printing the report.
package chaos
