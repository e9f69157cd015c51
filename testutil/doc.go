// Package testutil is braid's test kit: real PostgreSQL databases for
// tests and benchmarks, and the replay of recorded runs.
//
// # Databases
//
// [DB] returns a pool on a fresh database, cloned with CREATE DATABASE …
// TEMPLATE from a template that has every braid migration applied. Tests
// that run in parallel each get their own database, so they never see each
// other's rows. The database is dropped when the test ends.
//
// # Servers
//
// When TEST_DATABASE_URL is set, databases are created on that server.
// Otherwise the first call starts one private cluster per test binary
// (internal/localpg, fsync off), shared by its tests and removed by [Main]
// when the binary exits.
//
// # Time travel
//
// [NewKit] gives a test an engine, and optionally a scheduler
// ([NewKitConfig]), on its own database whose clock (braid_now(), which
// braid decides every time by) stands still until [Kit.Advance] moves it.
// Advance walks through every delay, wait timeout, run deadline, cron
// slot, recurring job and lease expiry inside the span, each at its own
// time, and lets what falls due run until the kit is idle
// ([Kit.RunUntilIdle]); River jobs scheduled inside the span come due
// with them. Three days pass in seconds. The kit's own engine and
// scheduler hold their leases for [KitLeaseTTL], so that time travel does
// not take them away; a lease the test takes keeps its own TTL.
//
// # Replay
//
// [Replay] replays a workflow's current code against a run's recorded
// history, as `braid runs export ID > run.json` wrote it, with no
// database and no step body run: a run from production becomes a
// regression test that fails, naming the position, when the code no
// longer makes the durable calls the run recorded.
//
// # TestMain
//
// Every package that uses testutil calls [Main] from TestMain. It runs the
// tests, stops the private cluster and fails the binary if goroutines leak.
package testutil
