package leases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const (
	// TTLDefault is the default time a lease lasts after each acquisition or
	// renewal. A holder that dies is replaced within about TTL plus one
	// Heartbeat.
	TTLDefault = 15 * time.Second

	// HeartbeatDefault is the default interval between renewals while Run
	// holds a lease, and between acquisition attempts while Acquire waits.
	HeartbeatDefault = 5 * time.Second

	// ReleaseTimeout bounds the release Run performs after its function
	// returns. It applies even when Run's context is already cancelled, so a
	// shutting-down process still hands its lease over at once.
	ReleaseTimeout = 5 * time.Second

	// NameMaxLength and HolderMaxLength are the limits, in characters, that
	// braid_leases enforces on lease names and holder names.
	NameMaxLength   = 200
	HolderMaxLength = 200

	// ttlMin is the smallest TTL accepted: the database keeps microseconds,
	// and anything shorter than a millisecond cannot be renewed in time.
	ttlMin = time.Millisecond
)

// Config configures a Manager. The zero value is valid: every field has a
// documented default.
type Config struct {
	// Holder names this process in braid_leases. Every process (or every
	// independent participant) must use a distinct holder name.
	//
	// Defaults to "<hostname>-<pid>-<8 random hex digits>", which is unique
	// across restarts of the same process. At most HolderMaxLength
	// characters.
	Holder string

	// TTL is how long a lease lasts after each acquisition or renewal, on the
	// database clock. A holder that stops renewing loses its lease after TTL.
	//
	// Defaults to TTLDefault (15s). Must be at least 1ms.
	TTL time.Duration

	// Heartbeat is the interval between renewals while Run holds a lease,
	// and the longest wait between acquisition attempts in Acquire. It must
	// be less than TTL, so several renewals can fail before a lease lapses.
	//
	// Defaults to HeartbeatDefault (5s), or TTL/3 when that is shorter.
	Heartbeat time.Duration

	// Logger receives acquisitions, losses and transient errors.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger

	// MeterProvider supplies the meter for lease metrics
	// (braid.lease.acquisitions and braid.lease.losses).
	//
	// Defaults to the global provider, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Manager is the PostgreSQL implementation of Leaser, on the braid_leases
// table. It adds blocking acquisition (Acquire), a holder loop (Run, Lead),
// a fence for writes made while holding (CheckTx), and operator views
// (Holder, List). A Manager is safe for concurrent use.
type Manager struct {
	pool      *pgxpool.Pool
	holder    string
	ttl       time.Duration
	heartbeat time.Duration
	logger    *slog.Logger

	acquisitions metric.Int64Counter
	losses       metric.Int64Counter

	mu      sync.Mutex
	running map[string]chan struct{} // names with an active Run in this Manager
	failed  time.Time                // see LastFailure
}

var _ Leaser = (*Manager)(nil)

// New returns a Manager that acquires leases as cfg.Holder on pool. A nil cfg
// means all defaults. It returns an error naming the offending field when the
// configuration is invalid; it never panics.
func New(pool *pgxpool.Pool, cfg *Config) (*Manager, error) {
	if pool == nil {
		return nil, errors.New("leases: New needs a non-nil pool")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}

	if c.TTL < 0 {
		return nil, fmt.Errorf("leases: Config.TTL is %s; it must be positive (or zero for the default %s)", c.TTL, TTLDefault)
	}
	if c.TTL == 0 {
		c.TTL = TTLDefault
	}
	if c.TTL < ttlMin {
		return nil, fmt.Errorf("leases: Config.TTL is %s; it must be at least %s", c.TTL, ttlMin)
	}
	if c.Heartbeat < 0 {
		return nil, fmt.Errorf("leases: Config.Heartbeat is %s; it must be positive (or zero for the default)", c.Heartbeat)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = min(HeartbeatDefault, c.TTL/3)
	}
	if c.Heartbeat >= c.TTL {
		return nil, fmt.Errorf("leases: Config.Heartbeat (%s) must be less than Config.TTL (%s)", c.Heartbeat, c.TTL)
	}

	if c.Holder == "" {
		c.Holder = defaultHolder()
	}
	if n := utf8.RuneCountInString(c.Holder); n > HolderMaxLength {
		return nil, fmt.Errorf("leases: Config.Holder is %d characters; the limit is %d", n, HolderMaxLength)
	}
	if !utf8.ValidString(c.Holder) {
		return nil, fmt.Errorf("leases: Config.Holder %q is not valid UTF-8", c.Holder)
	}

	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	meter := c.MeterProvider.Meter("github.com/braidflow/braid/leases")
	acquisitions, err := meter.Int64Counter("braid.lease.acquisitions",
		metric.WithDescription("Terms of a lease started by this process: each is a change of holder or a new generation."),
		metric.WithUnit("{acquisition}"))
	if err != nil {
		return nil, fmt.Errorf("leases: creating metric braid.lease.acquisitions: %w", err)
	}
	losses, err := meter.Int64Counter("braid.lease.losses",
		metric.WithDescription("Leases this process lost while a function was running under them."),
		metric.WithUnit("{loss}"))
	if err != nil {
		return nil, fmt.Errorf("leases: creating metric braid.lease.losses: %w", err)
	}

	return &Manager{
		pool:         pool,
		holder:       c.Holder,
		ttl:          c.TTL,
		heartbeat:    c.Heartbeat,
		logger:       c.Logger,
		acquisitions: acquisitions,
		losses:       losses,
		running:      make(map[string]chan struct{}),
	}, nil
}

// defaultHolder returns "<hostname>-<pid>-<8 random hex digits>".
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 150 {
		host = host[:150]
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// HolderID returns the holder name this Manager acquires leases as.
func (m *Manager) HolderID() string { return m.holder }

// TTL returns the configured lease duration.
func (m *Manager) TTL() time.Duration { return m.ttl }

// Heartbeat returns the configured renewal interval.
func (m *Manager) Heartbeat() time.Duration { return m.heartbeat }

// dbtx is what both *pgxpool.Pool and pgx.Tx provide.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func validateName(name string) error {
	if name == "" {
		return errors.New("leases: lease name is empty; it must be 1 to 200 characters")
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("leases: lease name %q is not valid UTF-8", name)
	}
	if n := utf8.RuneCountInString(name); n > NameMaxLength {
		return fmt.Errorf("leases: lease name is %d characters; the limit is %d", n, NameMaxLength)
	}
	return nil
}

func validateLease(lease *Lease) error {
	if lease == nil {
		return errors.New("leases: lease is nil")
	}
	return validateName(lease.Name)
}

const leaseColumns = `name, holder, generation, acquired_at, renewed_at, expires_at`

func scanLease(row pgx.Row) (*Lease, error) {
	var l Lease
	if err := row.Scan(&l.Name, &l.Holder, &l.Generation, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt); err != nil {
		return nil, err
	}
	return &l, nil
}

// acquireSQL starts a new term when the row is absent, expired, or already
// held by the same holder; the generation increases with every new term. The
// conflict arm's WHERE leaves the row alone (and returns nothing) when
// another holder's lease is still unexpired.
//
// The times of a term that replaces a row are read from braid_clock() in the
// conflict arm, which PostgreSQL evaluates only once it holds the row's lock:
// a statement that waited on that lock (a holder's CheckTx transaction, a
// concurrent acquisition) starts its term when it gets the row, not when it
// was sent, and never starts one that has already expired.
const acquireSQL = `
INSERT INTO braid_leases AS l (name, holder, generation, acquired_at, renewed_at, expires_at)
SELECT $1, $2, 1, c.now, c.now, c.now + $3::bigint * interval '1 microsecond' FROM braid_clock() AS c(now)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    generation = l.generation + 1,
    (acquired_at, renewed_at, expires_at) =
        (SELECT c.now, c.now, c.now + $3::bigint * interval '1 microsecond' FROM braid_clock() AS c(now))
WHERE l.expires_at <= braid_clock() OR l.holder = excluded.holder
RETURNING ` + leaseColumns

const currentHolderSQL = `
SELECT holder, generation, expires_at,
       greatest(extract(epoch FROM expires_at - braid_now()), 0)::float8
FROM braid_leases
WHERE name = $1`

// TryAcquire makes one attempt to take the named lease for this Manager's
// holder. It succeeds when the lease does not exist yet, has expired or been
// released, or is already held by this holder; each of these starts a new
// term with a higher generation, and any earlier *Lease for the name stops
// being valid. When another holder has an unexpired lease it returns a
// *HeldError, which matches ErrLeaseHeld.
//
// Name must be 1 to 200 characters.
func (m *Manager) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	lease, _, err := m.tryAcquire(ctx, m.pool, name)
	return lease, err
}

// TryAcquireTx is TryAcquire inside tx. The new term is only visible to
// others, and only counts, once tx commits; the acquisition metric counts
// the attempt either way.
func (m *Manager) TryAcquireTx(ctx context.Context, tx pgx.Tx, name string) (*Lease, error) {
	lease, _, err := m.tryAcquire(ctx, tx, name)
	return lease, err
}

// tryAcquire also returns a local deadline: the lease surely lasts until then
// (it was sent before the database read its clock, and TTL is added to that).
func (m *Manager) tryAcquire(ctx context.Context, db dbtx, name string) (*Lease, time.Time, error) {
	if err := validateName(name); err != nil {
		return nil, time.Time{}, err
	}
	// A conflicting row can vanish between the two statements only if it is
	// deleted by hand; retry a few times before giving up.
	for range 3 {
		sent := time.Now()
		lease, err := scanLease(db.QueryRow(ctx, acquireSQL, name, m.holder, m.ttl.Microseconds()))
		if err == nil {
			m.acquisitions.Add(ctx, 1, metric.WithAttributes(attribute.String("braid.lease.name", name)))
			m.logger.InfoContext(ctx, "leases: lease acquired",
				slog.String("lease", name), slog.String("holder", m.holder), slog.Int64("generation", lease.Generation))
			return lease, sent.Add(m.ttl), nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, time.Time{}, fmt.Errorf("leases: acquiring lease %q: %w", name, err)
		}

		held := &HeldError{Name: name}
		var remaining float64
		err = db.QueryRow(ctx, currentHolderSQL, name).Scan(&held.Holder, &held.Generation, &held.ExpiresAt, &remaining)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("leases: reading holder of lease %q: %w", name, err)
		}
		held.remaining = time.Duration(remaining * float64(time.Second))
		return nil, time.Time{}, held
	}
	return nil, time.Time{}, fmt.Errorf("leases: acquiring lease %q: its row kept changing; try again", name)
}

// Acquire blocks until it takes the named lease or ctx ends. While another
// holder has the lease it retries every Heartbeat, or shortly after the
// holder's lease expires when that is sooner, with a little jitter so that
// waiting processes do not all retry at once. Transient database errors are
// logged and retried, and so is an attempt that waits on the lease row's
// lock, or for the database's answer, longer than TTL less one Heartbeat;
// both count as failures (LastFailure). When ctx ends it returns ctx's
// error.
func (m *Manager) Acquire(ctx context.Context, name string) (*Lease, error) {
	lease, _, err := m.acquire(ctx, name)
	return lease, err
}

func (m *Manager) acquire(ctx context.Context, name string) (*Lease, time.Time, error) {
	if err := validateName(name); err != nil {
		return nil, time.Time{}, err
	}
	for {
		// An attempt that waits on the row's lock (see acquireSQL) is
		// given up before TTL less one Heartbeat has passed, so that the
		// term it starts is surely unexpired for a Heartbeat, by the local
		// deadline, once it returns.
		actx, acancel := context.WithTimeout(ctx, m.ttl-m.heartbeat)
		lease, deadline, err := m.tryAcquire(actx, m.pool, name)
		timedOut := actx.Err() != nil
		acancel()
		if err == nil {
			return lease, deadline, nil
		}
		if ctx.Err() != nil {
			return nil, time.Time{}, fmt.Errorf("leases: acquiring lease %q: %w", name, context.Cause(ctx))
		}
		wait := m.heartbeat
		var held *HeldError
		switch {
		case errors.As(err, &held):
			wait = min(wait, held.remaining)
		case timedOut:
			// A wait on the row's lock and a database that does not
			// answer (a partition drops its packets) look the same from
			// here: both count as a failure, so that a holder that takes
			// the lease next does not mistake the outage for its
			// predecessor's death (LastFailure).
			m.fail()
			m.logger.WarnContext(ctx, "leases: acquiring lease got no answer in time, on its row or from the database; retrying",
				slog.String("lease", name), slog.String("holder", m.holder), slog.Duration("limit", m.ttl-m.heartbeat))
		default:
			m.fail()
			m.logger.WarnContext(ctx, "leases: acquiring lease failed; retrying",
				slog.String("lease", name), slog.String("holder", m.holder), slog.String("error", err.Error()))
		}
		if err := sleep(ctx, wait+m.jitter()); err != nil {
			return nil, time.Time{}, fmt.Errorf("leases: acquiring lease %q: %w", name, err)
		}
	}
}

// LastFailure returns when, by this process's clock, an acquisition or a
// renewal of a lease last failed for a reason other than another holder:
// the database was out of reach, or failed. It is the zero time when none
// has. A new holder uses it to tell an outage that every process lived
// through from its predecessor's death (the queue's heartbeat rescuer
// then gives every attempt its full window again).
func (m *Manager) LastFailure() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

func (m *Manager) fail() {
	m.mu.Lock()
	m.failed = time.Now()
	m.mu.Unlock()
}

// jitter returns a random duration in [0, Heartbeat/10].
func (m *Manager) jitter() time.Duration {
	return mathrand.N(m.heartbeat/10 + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// renewSQL extends the lease only for the exact term given, and only while
// it is unexpired. Both are judged by braid_clock(), the time when the
// statement holds the row, as acquireSQL's are: braid_now() is when the
// transaction began, and a RenewTx in a transaction older than the
// lease's expiry, or a renewal that waited on the row's lock (a CheckTx),
// would renew an expired lease with an expiry already past.
const renewSQL = `
UPDATE braid_leases
SET (renewed_at, expires_at) = (SELECT c.now, c.now + $4::bigint * interval '1 microsecond' FROM braid_clock() AS c(now))
WHERE name = $1 AND holder = $2 AND generation = $3 AND expires_at > braid_clock()
RETURNING ` + leaseColumns

// Renew extends lease by TTL from now and returns its new state; the
// generation is unchanged. It is fenced on the lease's name, holder and
// generation and on the lease being unexpired: otherwise it returns an error
// matching ErrLeaseNotHeld.
func (m *Manager) Renew(ctx context.Context, lease *Lease) (*Lease, error) {
	return m.renew(ctx, m.pool, lease)
}

// RenewTx is Renew inside tx.
func (m *Manager) RenewTx(ctx context.Context, tx pgx.Tx, lease *Lease) (*Lease, error) {
	return m.renew(ctx, tx, lease)
}

func (m *Manager) renew(ctx context.Context, db dbtx, lease *Lease) (*Lease, error) {
	if err := validateLease(lease); err != nil {
		return nil, err
	}
	next, err := scanLease(db.QueryRow(ctx, renewSQL, lease.Name, lease.Holder, lease.Generation, m.ttl.Microseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notHeld(lease)
	}
	if err != nil {
		return nil, fmt.Errorf("leases: renewing lease %q: %w", lease.Name, err)
	}
	return next, nil
}

func notHeld(lease *Lease) error {
	return fmt.Errorf("leases: lease %q (holder %q, generation %d): %w",
		lease.Name, lease.Holder, lease.Generation, ErrLeaseNotHeld)
}

// releaseSQL expires the given term at once, so the next TryAcquire by
// anyone succeeds.
const releaseSQL = `
UPDATE braid_leases
SET expires_at = braid_now()
WHERE name = $1 AND holder = $2 AND generation = $3 AND expires_at > braid_now()`

// Release gives up lease: it expires at once and anyone may acquire it. It is
// fenced like Renew and returns an error matching ErrLeaseNotHeld when the
// term is no longer current. The row stays in braid_leases, so the next
// holder's generation continues from it.
func (m *Manager) Release(ctx context.Context, lease *Lease) error {
	return m.release(ctx, m.pool, lease)
}

// ReleaseTx is Release inside tx.
func (m *Manager) ReleaseTx(ctx context.Context, tx pgx.Tx, lease *Lease) error {
	return m.release(ctx, tx, lease)
}

func (m *Manager) release(ctx context.Context, db dbtx, lease *Lease) error {
	if err := validateLease(lease); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, releaseSQL, lease.Name, lease.Holder, lease.Generation)
	if err != nil {
		return fmt.Errorf("leases: releasing lease %q: %w", lease.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return notHeld(lease)
	}
	m.logger.DebugContext(ctx, "leases: lease released",
		slog.String("lease", lease.Name), slog.String("holder", lease.Holder), slog.Int64("generation", lease.Generation))
	return nil
}

const checkSQL = `
SELECT expires_at > braid_now()
FROM braid_leases
WHERE name = $1 AND holder = $2 AND generation = $3
FOR SHARE`

// CheckTx fences a write on a lease. Inside tx it locks the lease's row
// (FOR SHARE) and returns an error matching ErrLeaseNotHeld unless the term
// is still current and unexpired at tx's database time. Because the row stays
// locked until tx ends, no other holder can take the lease before tx commits:
// work written in tx after a successful CheckTx was done under the lease.
//
// The lock also delays this holder's own renewals until tx ends, so keep such
// transactions short compared with TTL.
func (m *Manager) CheckTx(ctx context.Context, tx pgx.Tx, lease *Lease) error {
	if err := validateLease(lease); err != nil {
		return err
	}
	var current bool
	err := tx.QueryRow(ctx, checkSQL, lease.Name, lease.Holder, lease.Generation).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !current) {
		return notHeld(lease)
	}
	if err != nil {
		return fmt.Errorf("leases: checking lease %q: %w", lease.Name, err)
	}
	return nil
}

// Holder returns the unexpired lease on name, whoever holds it, or
// ErrNoHolder when nobody does (the lease does not exist, was released, or
// expired). It is meant for operators and status pages.
func (m *Manager) Holder(ctx context.Context, name string) (*Lease, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	lease, err := scanLease(m.pool.QueryRow(ctx,
		`SELECT `+leaseColumns+` FROM braid_leases WHERE name = $1 AND expires_at > braid_now()`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("leases: lease %q: %w", name, ErrNoHolder)
	}
	if err != nil {
		return nil, fmt.Errorf("leases: reading lease %q: %w", name, err)
	}
	return lease, nil
}

// List returns every lease, ordered by name, including expired and released
// ones; Expired tells them apart on the database clock. It is meant for
// operators and status pages.
func (m *Manager) List(ctx context.Context) ([]*Lease, error) {
	rows, err := m.pool.Query(ctx,
		`SELECT `+leaseColumns+`, expires_at <= braid_now() FROM braid_leases ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("leases: listing leases: %w", err)
	}
	leases, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Lease, error) {
		var l Lease
		err := row.Scan(&l.Name, &l.Holder, &l.Generation, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.Expired)
		return &l, err
	})
	if err != nil {
		return nil, fmt.Errorf("leases: listing leases: %w", err)
	}
	return leases, nil
}

// Run acquires the named lease (blocking, like Acquire), then calls fn while
// holding it, renewing every Heartbeat.
//
// fn's context is cancelled as soon as the lease is lost: when a renewal
// reports ErrLeaseNotHeld, or when renewals keep failing (the database is
// unreachable) until the lease would expire. The expiry is judged
// conservatively on the local monotonic clock from when the acquisition or
// the last successful renewal was sent, so fn is cancelled no later than the
// database expires the lease. Run then waits for fn to return and returns a
// *LostError, which matches ErrLeaseNotHeld. An acquisition attempt that
// waits on the lease row longer than TTL less one Heartbeat is given up and
// tried again, and when one returns after that deadline anyway, fn is not
// called: Run releases the lease and returns a *LostError.
//
// Otherwise, when fn returns, Run releases the lease (within ReleaseTimeout,
// even if ctx was cancelled) and returns fn's error. A panic in fn is
// recovered and returned as an error with the stack.
//
// Within one Manager, concurrent Runs on the same name take turns: a second
// Run waits until the first returns before it tries to acquire.
func (m *Manager) Run(ctx context.Context, name string, fn func(ctx context.Context, lease *Lease) error) error {
	if fn == nil {
		return fmt.Errorf("leases: Run on lease %q needs a non-nil function", name)
	}
	if err := validateName(name); err != nil {
		return err
	}
	unlock, err := m.lockLocal(ctx, name)
	if err != nil {
		return fmt.Errorf("leases: acquiring lease %q: %w", name, err)
	}
	defer unlock()

	lease, deadline, err := m.acquire(ctx, name)
	if err != nil {
		return err
	}
	return m.hold(ctx, lease, deadline, fn)
}

// lockLocal serializes Runs on the same name within this Manager, so two of
// them never take the lease from each other in turn.
func (m *Manager) lockLocal(ctx context.Context, name string) (func(), error) {
	for {
		m.mu.Lock()
		ch, busy := m.running[name]
		if !busy {
			ch = make(chan struct{})
			m.running[name] = ch
			m.mu.Unlock()
			return func() {
				m.mu.Lock()
				delete(m.running, name)
				m.mu.Unlock()
				close(ch)
			}, nil
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (m *Manager) hold(ctx context.Context, lease *Lease, deadline time.Time, fn func(ctx context.Context, lease *Lease) error) error {
	if !time.Now().Before(deadline) {
		// The acquisition returned too late for this process to know that
		// the term still lasts: fn must not start, so that it can never
		// run past the database's expiry.
		m.releaseAfterRun(ctx, lease)
		return &LostError{Name: lease.Name, Holder: lease.Holder, Generation: lease.Generation,
			Cause: errors.New("the acquisition returned after the lease could have expired")}
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	done := make(chan error, 1)
	go func() { done <- callSafely(fnCtx, lease, fn) }()

	// Renewals continue while fn winds down after ctx is cancelled; each is
	// bounded by the local deadline instead.
	renewCtx := context.WithoutCancel(ctx)
	attrs := metric.WithAttributes(attribute.String("braid.lease.name", lease.Name))
	current := lease
	var (
		lost    *LostError
		lastErr error
	)
	timer := time.NewTimer(min(m.heartbeat, time.Until(deadline)))
	defer timer.Stop()

	for {
		var timerC <-chan time.Time
		if lost == nil {
			timerC = timer.C
		}
		select {
		case err := <-done:
			if lost != nil {
				if err != nil && !errors.Is(err, context.Canceled) {
					m.logger.WarnContext(ctx, "leases: function returned an error after losing its lease",
						slog.String("lease", lease.Name), slog.String("error", err.Error()))
				}
				return lost
			}
			m.releaseAfterRun(ctx, current)
			return err
		case <-timerC:
		}

		if !time.Now().Before(deadline) {
			cause := errors.New("lease expired before it could be renewed")
			if lastErr != nil {
				cause = fmt.Errorf("lease expired before a renewal succeeded: %w", lastErr)
			}
			lost = m.lose(ctx, current, cause, attrs)
			cancel(lost)
			continue
		}
		sent := time.Now()
		rctx, rcancel := context.WithDeadline(renewCtx, deadline)
		next, err := m.renew(rctx, m.pool, current)
		rcancel()
		switch {
		case err == nil:
			current, lastErr = next, nil
			deadline = sent.Add(m.ttl)
			timer.Reset(m.heartbeat)
		case errors.Is(err, ErrLeaseNotHeld):
			lost = m.lose(ctx, current, err, attrs)
			cancel(lost)
		default:
			lastErr = err
			m.fail()
			m.logger.WarnContext(ctx, "leases: renewing lease failed; retrying",
				slog.String("lease", current.Name), slog.Int64("generation", current.Generation),
				slog.String("error", err.Error()))
			timer.Reset(max(0, min(m.heartbeat/4, time.Until(deadline))))
		}
	}
}

func (m *Manager) lose(ctx context.Context, lease *Lease, cause error, attrs metric.AddOption) *LostError {
	m.losses.Add(ctx, 1, attrs)
	m.logger.WarnContext(ctx, "leases: lease lost; cancelling its function",
		slog.String("lease", lease.Name), slog.String("holder", lease.Holder),
		slog.Int64("generation", lease.Generation), slog.String("cause", cause.Error()))
	return &LostError{Name: lease.Name, Holder: lease.Holder, Generation: lease.Generation, Cause: cause}
}

func (m *Manager) releaseAfterRun(ctx context.Context, lease *Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	if err := m.release(rctx, m.pool, lease); err != nil {
		m.logger.WarnContext(ctx, "leases: releasing lease after its function returned failed; it will expire",
			slog.String("lease", lease.Name), slog.Int64("generation", lease.Generation),
			slog.String("error", err.Error()))
	}
}

func callSafely(ctx context.Context, lease *Lease, fn func(ctx context.Context, lease *Lease) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leases: panic in function holding lease %q: %v\n%s", lease.Name, r, debug.Stack())
		}
	}()
	return fn(ctx, lease)
}

// Lead is the leader loop: it calls Run on name again and again until ctx
// ends, so that fn runs in exactly one process at a time for as long as this
// process lives. The delay processor, the scheduler and the maintainer each
// run under Lead.
//
// Whenever Run returns (fn returned, failed, panicked, or the lease was lost)
// Lead logs the outcome and, after about one Heartbeat, competes for the lease
// again. Nothing fn does stops the loop. Lead returns nil once ctx ends, and
// an error only for invalid arguments.
func (m *Manager) Lead(ctx context.Context, name string, fn func(ctx context.Context, lease *Lease) error) error {
	if fn == nil {
		return fmt.Errorf("leases: Lead on lease %q needs a non-nil function", name)
	}
	if err := validateName(name); err != nil {
		return err
	}
	for {
		err := m.Run(ctx, name, fn)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil:
			m.logger.InfoContext(ctx, "leases: function returned; lease released",
				slog.String("lease", name))
		case errors.Is(err, ErrLeaseNotHeld):
			m.logger.WarnContext(ctx, "leases: lease lost; competing again",
				slog.String("lease", name), slog.String("error", err.Error()))
		default:
			m.logger.ErrorContext(ctx, "leases: function failed; competing again",
				slog.String("lease", name), slog.String("error", err.Error()))
		}
		if sleep(ctx, m.heartbeat+m.jitter()) != nil {
			return nil
		}
	}
}
