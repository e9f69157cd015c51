// Package testdb gives braid's own tests real PostgreSQL databases: a
// fresh, fully migrated database per test, cloned from a template.
//
// # Why it is separate from testutil
//
// testutil, the kit users test their workflows with, builds on the
// workflow engine and the scheduler; the tests inside those packages'
// dependencies (queue, scheduler) cannot import it without an import
// cycle, so they use this package, which testutil wraps.
//
// # Servers
//
// When TEST_DATABASE_URL is set, databases are created on that server.
// Otherwise the first call starts one private cluster per test binary
// (internal/localpg, fsync off), shared by its tests and removed by [Main]
// when the binary exits.
package testdb
