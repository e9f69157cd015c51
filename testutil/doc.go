// Package testutil gives braid's tests and benchmarks real PostgreSQL
// databases.
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
// # TestMain
//
// Every package that uses testutil calls [Main] from TestMain. It runs the
// tests, stops the private cluster and fails the binary if goroutines leak.
package testutil
