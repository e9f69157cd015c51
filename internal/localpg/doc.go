// Package localpg runs a private PostgreSQL cluster from the server binaries
// installed on the machine. It is braid's embedded default: tests, benchmarks
// and the demo use it when no database URL is given.
//
// # Binaries
//
// The server binaries (initdb, pg_ctl, postgres) are found on PATH or under
// /usr/lib/postgresql/*/bin, newest version first. When none are found, [Find]
// returns an error that says what to install.
//
// # Isolation
//
// A cluster lives in a directory that the caller chooses. By default it
// listens only on a unix socket inside that directory, so several clusters
// (for example several test binaries running at once) never compete for a
// port. [Config.Port] makes it listen on a loopback TCP port instead.
//
// # Lifecycle
//
// [Cluster.Start] and [Cluster.Stop] are explicit. The postmaster is a child
// of the calling process, and it is told to shut down immediately if that
// process dies, so stopping (or crashing) leaves no postgres process behind.
//
// When the calling process runs as root, the server runs as the unprivileged
// "postgres" account, because PostgreSQL refuses to run as root.
//
// # Durability
//
// fsync stays on unless [Config.DisableFsync] is set. Only tests should
// set it.
package localpg
