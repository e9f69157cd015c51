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
// The runs and fanout scenarios, whose sides last a second or two, measure
// each side Sizes.Trials times (3; quick 1), alternately: River, braid,
// River, braid, River, braid. Each side's figure is the median of its
// trials, so that a busy moment of the machine moves one trial and not the
// figure, and no side gets all the quiet moments; the trials' times are in
// the report beside it.
//
// # Scenarios
//
//   - runs: N no-op single-task workflow runs started (StartMany, a hundred
//     per transaction, from four goroutines) and completed, against N no-op
//     River jobs inserted (InsertMany, a hundred per call, from four
//     goroutines) and worked. Throughput from the first start to the last
//     completion; the ratio is braid over River.
//   - hop: chains of tasks in which each task continues the next (it starts
//     the next one with workflow.Go and workflow.Detached, a run of its own
//     created in the transaction that completes it), against River chains in which each job InsertTx's its
//     successor and calls JobCompleteTx in one transaction. A hop is the
//     time from the start of one link's work to the start of the next's,
//     on the monotonic clock; chains run one at a time, after one uncounted
//     warm-up chain.
//   - fanout: workflow.Map over no-op children until the parent's result
//     is in, against River burning down as many no-op jobs inserted with
//     one InsertMany. The ratio is braid's time over River's.
//   - dag: DAGs of no-op nodes, in time per edge: the wall time from a
//     phase's first start (or insert) until its last completion is seen,
//     over the phase's edges. First chains of 20 nodes (19 edges), each
//     node depending on the one before, run one at a time after one
//     uncounted warm-up chain, against the hop scenario's River chains of
//     20 jobs. Then one diamond: a root, Sizes.DAGWidth middle nodes (1000
//     by default) that depend on it and a sink that depends on all of them
//     (twice as many edges), against a River root job that creates a join
//     row and inserts as many middle jobs, each of which, in the
//     transaction that completes it, counts itself off the join row and
//     inserts the sink job when the count reaches zero. The ratios are
//     braid's time per edge over River's.
//   - delay: Task.Delay of random length (0.5 to 3 s by default), against
//     River jobs with ScheduledAt as far ahead. Lateness is read on the
//     database clock: the wake turn's attempted_at minus the delay's
//     resume_at, and the River job's attempted_at minus its scheduled_at.
//     The waits are set evenly over one interval of River's 5 s scheduler,
//     so River's jobs meet its scheduler in every phase.
//   - delay_burst: a thousand runs that each Task.DelayUntil one shared
//     instant, against as many River jobs with that ScheduledAt; lateness
//     as in delay. The braid runs are started a hundred per transaction
//     from four goroutines, and the instant is two seconds after their
//     set-up (every delay set) is expected to end, from braid's measured
//     throughput of no-op runs with half as long again to spare; a set-up
//     that ends after the instant fails the scenario rather than measure
//     something else. River's jobs are inserted with one InsertMany, the
//     instant two seconds after it starts.
//   - steps: tasks running inline workflow.Steps, all made available at
//     once, in steps per second from the first step's start to the last
//     step's end, against River jobs making as many plain INSERTs of the
//     same shape.
//   - pool: the same braid runs of four steps on a pool of 16 connections
//     and on a pool of 4, which must not starve the engine.
//   - sustained: a steady load, 70% of braid's throughput of no-op runs
//     (the runs scenario's, or a short probe's when runs is not selected),
//     offered for 60 s (quick 20 s, Config.Long and `-long` 10 min): runs
//     of one inline step, the ones due every 100 ms started in one
//     transaction from four goroutines, against as many no-op River jobs.
//     Both sides keep finished work 10 s only (braid's Retention, checked
//     every second, which deletes a run's turn jobs with it, and River's
//     CompletedJobRetentionPeriod, which River's job cleaner applies every
//     30 s, so that on the River side it does not show in a quick run).
//     It reports the runs completed in each 10 s window, the drift from
//     the first window to the last, and the sizes of braid_runs,
//     braid_tasks, braid_steps and river_job at the start, once retention
//     applied and at the end, with whether they stopped growing
//     (SustainedResult says by which rule). PostgreSQL reuses the space of
//     deleted rows only once a vacuum has visited the table: autovacuum
//     does so about once a minute per database by default, and braid's
//     maintenance loop as soon as a table's dead rows reach a fifth of its
//     live ones. The 10 min run shows whether the tables stay level.
//
// # How a phase ends
//
// A side's measured phase ends when a poll of its database finds the work
// done. A poll counts every row of the side's table, so polls come every
// 5 ms only near the end, as foretold by the pace so far, and at most every
// 100 ms before it: the end is known to within 5 ms, and the polls take
// little of the CPU that both sides share with them.
//
// # Commits
//
// Every scenario reports braid_commits_per_run and river_commits_per_run:
// the transactions the side's scratch database committed during the
// measured phase (xact_commit of pg_stat_database) per unit of work, the
// unit named in each result's doc (a run, a job, a link, a child, a node,
// a delay, a step, an INSERT). What is counted is every committed transaction of
// that database, read-only ones included, from every connection: the
// transactions that start runs or insert jobs, the workers, the engine's and
// River's background work (fetch polls, leader election, the delay
// processor, the reconciler, retention, the job cleaner), the prepare of a
// statement a connection has not run before, and the few transactions of
// stopping the engine or client, which ends the phase. The benchmark's own
// statements on the database during the phase (completion polls, readings)
// are counted as they are made and subtracted. Background work makes the
// figure grow with the phase's length as well as with the work done.
//
// PostgreSQL 15 holds each backend's counters for up to a second while it
// is busy, and up to ten seconds once it is idle, before it publishes them
// to pg_stat_database. So the first reading is taken after a pause of a
// little over a second (Config.StatsSettle), once every idle connection of
// the side's pool has run one statement, which publishes what it held; it
// may miss the transactions of the last second of connections busy at that
// moment: a handful. The last reading is taken after the pool is closed and every
// backend of the database has exited, which publishes everything. Both
// readings are made from a connection to another database.
//
// # Targets
//
// The report's targets array checks the figures that have a target:
//
//   - runs.ratio >= 0.5, and runs.braid_commits_per_run <= 1.5;
//   - hop.braid_p50_ms <= 0.5 x hop.river_p50_ms;
//   - fanout.ratio <= 1.5;
//   - dag.chain_ratio <= 1.5, and dag.diamond_ratio <= 1.5;
//   - delay.braid_p99_late_ms <= 100, and delay_burst.braid_p99_late_ms
//     <= 100;
//   - steps.ratio >= 0.8;
//   - pool.ratio <= 2, and pool.lease_changes == 0;
//   - sustained.braid_drift within 0.1 either way, and
//     sustained.braid_growth: retention applied to every table and the
//     tables stopped growing (braid_settled).
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
// pg_stat_statements (that reading counts as the benchmark's own).
// `braid bench -cpuprofile` writes a Go CPU profile of the whole process.
package bench
