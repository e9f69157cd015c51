// Package listen keeps a PostgreSQL connection LISTENing on channels for
// the parts of braid that hasten their work on a NOTIFY: the waiters of
// Result and GetEvent, the delay processor, the scheduler's leader and the
// admin API's live updates. It is the one way braid listens.
//
// # Connections
//
// A listening connection is taken from the caller's pool and then removed
// from it (Hijack), rather than dialled from a copy of the pool's
// configuration: only the pool runs its hooks (BeforeConnect,
// AfterConnect), which are where a rotating password such as a cloud IAM
// token, or a per-connection setting, is put. A connection dialled from the
// copy would lack them, fail where the pool's succeed, and silence whatever
// waits on it. Removed from the pool, the connection no longer counts
// against MaxConns, so holding it starves no one of a small pool, and
// closing the pool does not wait for it.
//
// # Losing the connection
//
// A [Listener] opens its connection again whenever it cannot be opened or
// is lost (a server at its connection limit, a restart, a proxy that drops
// idle connections), after a pause that doubles from [RetryMin] to
// [RetryMax]. NOTIFYs sent while nothing listens are lost, so whoever
// relies on a Listener must never depend on it alone: it polls meanwhile,
// and looks again each time the connection starts to listen (Ready).
package listen
