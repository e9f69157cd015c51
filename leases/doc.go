// Package leases provides named, time-bounded ownership on PostgreSQL, with a
// heartbeat and a fencing generation. braid uses it to run exactly one delay
// processor, one scheduler and one maintainer across all processes, and any
// other work that must have a single leader can use it the same way. It knows
// nothing about River or workflows.
//
// # Leases and generations
//
// A lease is one row of braid_leases, identified by its name (for example
// "braid:delays"). It has a holder, an expiry, and a generation. A holder
// keeps a lease by renewing it before it expires; a holder that stops (it
// crashed, or lost the database) loses the lease after its TTL, and another
// process takes it over.
//
// The generation is a fencing token. It increases every time a new term
// starts: a change of holder, a take-over after expiry or release, or a new
// acquisition by the same holder. Renewals keep it. Every operation on a held
// lease (Renew, Release, CheckTx) names the exact (name, holder, generation)
// and succeeds only while that term is current and unexpired; otherwise it
// returns an error matching ErrLeaseNotHeld. A holder that was replaced can
// therefore never extend, drop or write under its successor's lease.
//
// # Acquiring
//
// [Manager] is the PostgreSQL implementation of the small [Leaser]
// interface. [Manager.TryAcquire] makes one attempt: it takes the lease when
// the row is absent, expired or released, or already held by the same
// holder, and otherwise returns a [*HeldError] (matching ErrLeaseHeld) that
// names the current holder and its expiry. [Manager.Acquire] blocks, retrying
// every Heartbeat or shortly after the current holder's expiry, until it
// wins or its context ends.
//
// # Holding: Run and Lead
//
// [Manager.Run] acquires a lease, calls a function while holding it, renews
// it every Heartbeat, and releases it when the function returns. The
// function's context is cancelled as soon as the lease is lost, either
// because a renewal finds the term no longer current or because renewals
// keep failing (the database is unreachable) until the lease would expire;
// Run then returns a [*LostError]. [Manager.Lead] is the leader loop on top:
// it calls Run again and again until its context ends, logging failures,
// losses and panics instead of stopping. The delay processor, the scheduler
// and the maintainer each call Lead with their own lease name.
//
// # Fencing writes
//
// Cancelling a context only asks the function to stop. For work whose
// correctness depends on there being one leader, fence the writes:
// [Manager.CheckTx] locks the lease row inside the work's transaction and
// fails unless the term is still current. While that transaction is open no
// other holder can take the lease, so whatever commits after a successful
// CheckTx was written under the lease. Every write also has a Tx twin
// (TryAcquireTx, RenewTx, ReleaseTx).
//
// # Time
//
// All lease times come from the database clock (braid_now() and
// braid_clock()): acquisitions and renewals set expires_at = TTL after the
// database's time in SQL, and expiry is judged against the database's time.
// An acquisition or a renewal that waits on the lease row's lock reads that
// time once it holds the lock, and a renewal reads it when it runs, not when
// its transaction began, so a term never starts, or is renewed, already
// expired. The local clock is
// only used to measure durations: Run treats a lease as lost once TTL has
// passed since its acquisition or last successful renewal was sent, which is
// never later than the database expires it. Run gives up an acquisition that
// has waited TTL less one Heartbeat, and never starts its function on a term
// of which that much has passed, so the function always has time to be
// cancelled before the expiry.
//
// # Configuration
//
// [Config] holds the holder name (default "<hostname>-<pid>-<8 random hex
// digits>"), the TTL (default [TTLDefault], 15s), the heartbeat (default
// [HeartbeatDefault], 5s, or TTL/3 when shorter; it must be less than the
// TTL), a slog logger and an OTel MeterProvider. [New] validates it and
// returns an error naming the offending field.
//
// # Operating
//
// [Manager.Holder] returns who holds a lease now, or [ErrNoHolder];
// [Manager.List] returns every lease, with Expired set from the database
// clock. The same view in SQL:
//
//	SELECT name, holder, generation, now() - acquired_at AS held_for,
//	       now() - renewed_at AS since_heartbeat, expires_at <= now() AS expired
//	FROM braid_leases ORDER BY name;
//
// Release leaves the row in place (expired), so the next holder's generation
// continues from it. Do not delete rows of leases that are in use.
//
// # Metrics
//
// Through the OTel metric API (Config.MeterProvider, or the global
// provider), with the attribute braid.lease.name:
//
//   - braid.lease.acquisitions: terms started by this process;
//   - braid.lease.losses: leases lost while a function ran under Run.
package leases
