// Package migrations owns braid's database schema: River's tables and
// braid's own braid_ tables, as goose SQL files embedded in the binary.
//
// # Usage
//
// Apply everything before starting an engine:
//
//	if err := migrations.Up(ctx, pool); err != nil { ... }
//
// or from the command line with `braid migrate up`. [Down] reverts the last
// version, [Status] lists every version and whether it is applied.
//
// # River's schema
//
// River's migrations (versions 1 to 8 of its main line, from the pinned
// River release) are rendered into goose files by internal/rivergen,
// because River's raw SQL holds template markers that must be filled in
// first. Each rendered file also records its version in river_migration.
// `make verify` fails when the files drift from the pinned River version.
// Goose owns the whole schema: never run River's own migrator beside it.
//
// # Your own migrations
//
// An application can keep its own goose migrations beside braid's, with a
// separate version table, through [New] with its own [Config.FS] and
// [Config.Table].
//
// # Concurrency
//
// Migrators take a PostgreSQL session lock, so several processes migrating
// the same database at once apply each version exactly once.
//
// # Version 111 is not a rolling upgrade
//
// Version 111 changes the form of turn jobs: a turn job names its task in
// its unique key, no longer in its args, so that River's GIN index on args
// does not keep an entry for every task ever run. An earlier engine cannot
// read the new form. Stop every process of the earlier braid, run the
// migration, then start the new processes, which read both forms.
package migrations
