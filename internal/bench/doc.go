// Package bench measures braid beside raw River doing the same work, in the
// same process and on the same server, and reports every figure next to its
// baseline. It is what `braid bench` and `make bench` run.
//
// # Why ratios
//
// The machines braid is measured on are shared and noisy, so an absolute
// figure says little. Each scenario runs its braid side and its River side
// one after the other, with the same River configuration (Config.Workers,
// Config.FetchCooldown, Config.FetchPollInterval, Config.PoolMaxConns), and
// reports both and, where it makes sense, their ratio.
//
// # Scenarios
//
//   - runs: N no-op single-task workflow runs started (StartTx, a hundred
//     per transaction, from four goroutines) and completed, against N no-op
//     River jobs inserted (InsertMany, a hundred per call, from four
//     goroutines) and worked. Throughput from the first start to the last
//     completion; the ratio is braid over River.
//   - hop: chains of tasks in which each task continues the next (it starts
//     the next one with workflow.Go, created in the transaction that
//     completes it), against River chains in which each job InsertTx's its
//     successor and calls JobCompleteTx in one transaction. A hop is the
//     time from the start of one link's work to the start of the next's,
//     on the monotonic clock; chains run one at a time, after one uncounted
//     warm-up chain.
//   - fanout: workflow.Map over no-op children until the parent's result
//     is in, against River burning down as many no-op jobs inserted with
//     one InsertMany. The ratio is braid's time over River's.
//   - delay: Task.Delay of random length (0.5 to 3 s by default), against
//     River jobs with ScheduledAt as far ahead. Lateness is read on the
//     database clock: the wake turn's attempted_at minus the delay's
//     resume_at, and the River job's attempted_at minus its scheduled_at.
//     The waits are set evenly over one interval of River's 5 s scheduler,
//     so River's jobs meet its scheduler in every phase.
//   - steps: tasks running inline workflow.Steps, all made available at
//     once, in steps per second from the first step's start to the last
//     step's end, against River jobs making as many plain INSERTs of the
//     same shape.
//
// # Databases
//
// Without Config.DatabaseURL the benchmark starts a private cluster from
// the local PostgreSQL binaries (internal/localpg) with fsync on, in a
// temporary directory that is removed at the end. With it, it works in
// scratch databases on that server and never writes to the database the URL
// names. Either way, one template database is migrated with
// migrations.Up, and every side of every scenario gets its own fresh clone
// of it, dropped afterwards, so no side sees another's rows or bloat.
//
// # Profiling
//
// Config.Statements prints, after each side, its costliest statements from
// pg_stat_statements. `braid bench -cpuprofile` writes a Go CPU profile of
// the whole process.
package bench
