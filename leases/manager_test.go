package leases_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/testutil"
)

// waitLimit bounds every wait for something that must happen eventually. It
// is far above any expected latency: it turns a hang into a failure, it does
// not measure speed.
const waitLimit = 20 * time.Second

func newManager(t *testing.T, pool *pgxpool.Pool, holder string, ttl, heartbeat time.Duration) *leases.Manager {
	t.Helper()
	m, err := leases.New(pool, &leases.Config{
		Holder:    holder,
		TTL:       ttl,
		Heartbeat: heartbeat,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("leases.New(%q): %v", holder, err)
	}
	return m
}

// lazyPool returns a pool that never connects, for tests of configuration.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://braid@127.0.0.1:1/braid?connect_timeout=1")
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// twoPools returns two independent pools on the same fresh database, standing
// for two processes.
func twoPools(t *testing.T) (*pgxpool.Pool, *pgxpool.Pool) {
	t.Helper()
	url := testutil.URL(t)
	open := func() *pgxpool.Pool {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatalf("pgxpool.New: %v", err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	return open(), open()
}

// expire moves the lease's expiry into the past, as if its holder had stopped
// renewing long ago.
func expire(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	_, err := pool.Exec(context.Background(),
		`UPDATE braid_leases SET expires_at = now() - interval '1 second' WHERE name = $1`, name)
	if err != nil {
		t.Fatalf("expiring lease %q: %v", name, err)
	}
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	pool := lazyPool(t)

	if _, err := leases.New(nil, nil); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Errorf("New(nil pool) error = %v, want one naming the pool", err)
	}

	bad := []struct {
		name string
		cfg  leases.Config
		want string
	}{
		{"negative TTL", leases.Config{TTL: -time.Second}, "Config.TTL is -1s"},
		{"tiny TTL", leases.Config{TTL: time.Microsecond}, "at least 1ms"},
		{"negative heartbeat", leases.Config{Heartbeat: -time.Second}, "Config.Heartbeat is -1s"},
		{"heartbeat equal to TTL", leases.Config{TTL: time.Second, Heartbeat: time.Second}, "Config.Heartbeat (1s) must be less than Config.TTL (1s)"},
		{"heartbeat above default TTL", leases.Config{Heartbeat: time.Minute}, "Config.Heartbeat (1m0s) must be less than Config.TTL (15s)"},
		{"long holder", leases.Config{Holder: strings.Repeat("h", 201)}, "Config.Holder is 201 characters; the limit is 200"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := leases.New(pool, &tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%+v) error = %v, want it to contain %q", tt.cfg, err, tt.want)
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		m, err := leases.New(pool, nil)
		if err != nil {
			t.Fatalf("New(nil config): %v", err)
		}
		if m.TTL() != leases.TTLDefault || m.Heartbeat() != leases.HeartbeatDefault {
			t.Errorf("TTL, Heartbeat = %s, %s; want %s, %s", m.TTL(), m.Heartbeat(), leases.TTLDefault, leases.HeartbeatDefault)
		}
		// hostname-pid-8 hex digits
		parts := strings.Split(m.HolderID(), "-")
		if len(parts) < 3 || len(parts[len(parts)-1]) != 8 {
			t.Errorf("default holder %q, want <hostname>-<pid>-<8 hex digits>", m.HolderID())
		}
		other, err := leases.New(pool, nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if other.HolderID() == m.HolderID() {
			t.Errorf("two Managers got the same default holder %q", m.HolderID())
		}
	})

	t.Run("heartbeat defaults below a short TTL", func(t *testing.T) {
		t.Parallel()
		m, err := leases.New(pool, &leases.Config{TTL: 900 * time.Millisecond})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if got, want := m.Heartbeat(), 300*time.Millisecond; got != want {
			t.Errorf("Heartbeat = %s, want %s", got, want)
		}
	})
}

func TestBadLeaseNames(t *testing.T) {
	t.Parallel()
	m := newManager(t, lazyPool(t), "a", time.Second, 300*time.Millisecond)
	ctx := context.Background()

	if _, err := m.TryAcquire(ctx, ""); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("TryAcquire(\"\") error = %v, want one saying the name is empty", err)
	}
	long := strings.Repeat("n", 201)
	if _, err := m.TryAcquire(ctx, long); err == nil || !strings.Contains(err.Error(), "201 characters; the limit is 200") {
		t.Errorf("TryAcquire(201 chars) error = %v, want one naming the limit", err)
	}
	if _, err := m.Renew(ctx, nil); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("Renew(nil) error = %v, want one saying the lease is nil", err)
	}
	if err := m.Run(ctx, "x", nil); err == nil || !strings.Contains(err.Error(), "non-nil function") {
		t.Errorf("Run(nil fn) error = %v, want one asking for a function", err)
	}
	if err := m.Lead(ctx, long, func(context.Context, *leases.Lease) error { return nil }); err == nil {
		t.Errorf("Lead(201 chars) error = nil, want an error")
	}
}

func TestTryAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, time.Second)
	b := newManager(t, pool, "b", 10*time.Second, time.Second)

	first, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("a.TryAcquire on an absent lease: %v", err)
	}
	if first.Name != "job" || first.Holder != "a" || first.Generation != 1 {
		t.Errorf("first lease = %+v, want job/a/generation 1", first)
	}
	if got := first.ExpiresAt.Sub(first.RenewedAt); got != 10*time.Second {
		t.Errorf("ExpiresAt - RenewedAt = %s, want the TTL 10s", got)
	}
	if !first.AcquiredAt.Equal(first.RenewedAt) {
		t.Errorf("AcquiredAt %s != RenewedAt %s on a new term", first.AcquiredAt, first.RenewedAt)
	}

	_, err = b.TryAcquire(ctx, "job")
	if !errors.Is(err, leases.ErrLeaseHeld) {
		t.Fatalf("b.TryAcquire on a held lease: error = %v, want ErrLeaseHeld", err)
	}
	var held *leases.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("error %T is not a *HeldError", err)
	}
	if diff := cmp.Diff(&leases.HeldError{Name: "job", Holder: "a", Generation: 1, ExpiresAt: first.ExpiresAt},
		held, cmp.AllowUnexported(leases.HeldError{}), cmp.FilterPath(func(p cmp.Path) bool {
			return p.Last().String() == ".remaining"
		}, cmp.Ignore())); diff != "" {
		t.Errorf("HeldError mismatch (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), `held by "a"`) {
		t.Errorf("error %q does not name the holder", err)
	}

	// The same holder acquiring again starts a new term; the old one is fenced out.
	second, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("a.TryAcquire again: %v", err)
	}
	if second.Generation != 2 {
		t.Errorf("re-acquired generation = %d, want 2", second.Generation)
	}
	if _, err := a.Renew(ctx, first); !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Errorf("Renew of the superseded term: error = %v, want ErrLeaseNotHeld", err)
	}

	// Another name is independent.
	other, err := b.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatalf("b.TryAcquire(other): %v", err)
	}
	if other.Generation != 1 {
		t.Errorf("other generation = %d, want 1", other.Generation)
	}
}

func TestTxTwins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, time.Second)
	b := newManager(t, pool, "b", 10*time.Second, time.Second)

	// An acquisition rolled back never happened.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryAcquireTx(ctx, tx, "job"); err != nil {
		t.Fatalf("TryAcquireTx: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Holder(ctx, "job"); !errors.Is(err, leases.ErrNoHolder) {
		t.Fatalf("Holder after a rolled-back acquisition: error = %v, want ErrNoHolder", err)
	}

	// Acquire, renew and check in one committed transaction.
	var lease *leases.Lease
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		l, err := a.TryAcquireTx(ctx, tx, "job")
		if err != nil {
			return err
		}
		if l, err = a.RenewTx(ctx, tx, l); err != nil {
			return err
		}
		lease = l
		return a.CheckTx(ctx, tx, l)
	})
	if err != nil {
		t.Fatalf("acquire, renew and check in one transaction: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, leases.ErrLeaseHeld) {
		t.Fatalf("b.TryAcquire after a committed TryAcquireTx: error = %v, want ErrLeaseHeld", err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return a.ReleaseTx(ctx, tx, lease) })
	if err != nil {
		t.Fatalf("ReleaseTx: %v", err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return a.CheckTx(ctx, tx, lease) })
	if !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Errorf("CheckTx on a released lease: error = %v, want ErrLeaseNotHeld", err)
	}
}

func TestCheckTxHoldsOffTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 300*time.Millisecond, 100*time.Millisecond)
	b := newManager(t, pool, "b", 300*time.Millisecond, 100*time.Millisecond)

	lease, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if err := a.CheckTx(ctx, tx, lease); err != nil {
		t.Fatalf("CheckTx on a held lease: %v", err)
	}

	// The lease expires (on the database clock) while the fenced transaction
	// is open; b may not take it until that transaction ends.
	for {
		var expired bool
		err := pool.QueryRow(ctx, `SELECT expires_at <= clock_timestamp() FROM braid_leases WHERE name = 'job'`).Scan(&expired)
		if err != nil {
			t.Fatal(err)
		}
		if expired {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := make(chan error, 1)
	go func() {
		_, err := b.TryAcquire(ctx, "job")
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("b.TryAcquire finished (error %v) while a's fenced transaction was open", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("b.TryAcquire after the fenced transaction committed: %v", err)
	}
}

func TestRenew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, time.Second)
	b := newManager(t, pool, "b", 10*time.Second, time.Second)

	lease, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := a.Renew(ctx, lease)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if renewed.Generation != lease.Generation || renewed.Holder != "a" {
		t.Errorf("renewed = %+v, want the same holder and generation as %+v", renewed, lease)
	}
	if !renewed.AcquiredAt.Equal(lease.AcquiredAt) {
		t.Errorf("renewal moved AcquiredAt from %s to %s", lease.AcquiredAt, renewed.AcquiredAt)
	}
	if renewed.RenewedAt.Before(lease.RenewedAt) || renewed.ExpiresAt.Sub(renewed.RenewedAt) != 10*time.Second {
		t.Errorf("renewed times %+v do not extend %+v by the TTL", renewed, lease)
	}

	// Expired but not yet taken: no longer held.
	expire(t, pool, "job")
	if _, err := a.Renew(ctx, renewed); !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Errorf("Renew of an expired lease: error = %v, want ErrLeaseNotHeld", err)
	}

	// Expired and taken by b: a's renewal fails and leaves b's lease alone.
	taken, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("b.TryAcquire of an expired lease: %v", err)
	}
	if _, err := a.Renew(ctx, renewed); !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Errorf("Renew of a lease taken by another holder: error = %v, want ErrLeaseNotHeld", err)
	}
	if err := a.Release(ctx, renewed); !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Errorf("Release of a lease taken by another holder: error = %v, want ErrLeaseNotHeld", err)
	}
	current, err := a.Holder(ctx, "job")
	if err != nil {
		t.Fatalf("Holder: %v", err)
	}
	if diff := cmp.Diff(taken, current); diff != "" {
		t.Errorf("b's lease changed after a's fenced calls (-want +got):\n%s", diff)
	}
}

func TestReleaseHolderAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, time.Second)
	b := newManager(t, pool, "b", 10*time.Second, time.Second)

	if _, err := a.Holder(ctx, "job"); !errors.Is(err, leases.ErrNoHolder) {
		t.Errorf("Holder of a lease never taken: error = %v, want ErrNoHolder", err)
	}
	if got, err := a.List(ctx); err != nil || len(got) != 0 {
		t.Errorf("List on an empty table = %v, %v; want nothing", got, err)
	}

	job, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	holder, err := b.Holder(ctx, "job")
	if err != nil {
		t.Fatalf("Holder: %v", err)
	}
	if diff := cmp.Diff(job, holder); diff != "" {
		t.Errorf("Holder mismatch (-want +got):\n%s", diff)
	}

	if err := a.Release(ctx, job); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := a.Release(ctx, job); !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Errorf("second Release: error = %v, want ErrLeaseNotHeld", err)
	}
	if _, err := a.Holder(ctx, "job"); !errors.Is(err, leases.ErrNoHolder) {
		t.Errorf("Holder after Release: error = %v, want ErrNoHolder", err)
	}

	list, err := a.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	type row struct {
		Name, Holder string
		Generation   int64
		Expired      bool
	}
	var got []row
	for _, l := range list {
		got = append(got, row{l.Name, l.Holder, l.Generation, l.Expired})
	}
	want := []row{{"job", "a", 1, true}, {"other", "b", 1, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List mismatch (-want +got):\n%s", diff)
	}
	if !list[1].ExpiresAt.Equal(other.ExpiresAt) {
		t.Errorf("List ExpiresAt = %s, want %s", list[1].ExpiresAt, other.ExpiresAt)
	}

	// Released means available at once, and the generation carries on.
	next, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("b.TryAcquire after release: %v", err)
	}
	if next.Generation != 2 {
		t.Errorf("generation after release = %d, want 2", next.Generation)
	}
}

func TestCompetingHoldersExactlyOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, p2 := twoPools(t)

	const n = 8
	var (
		wg      sync.WaitGroup
		winners atomic.Int32
		held    atomic.Int32
		errs    = make(chan error, n)
	)
	start := make(chan struct{})
	for i := range n {
		pool := p1
		if i%2 == 1 {
			pool = p2
		}
		m := newManager(t, pool, "holder-"+string(rune('a'+i)), 10*time.Second, time.Second)
		wg.Go(func() {
			<-start
			_, err := m.TryAcquire(ctx, "job")
			switch {
			case err == nil:
				winners.Add(1)
			case errors.Is(err, leases.ErrLeaseHeld):
				held.Add(1)
			default:
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("TryAcquire: unexpected error %v", err)
	}
	if winners.Load() != 1 || held.Load() != n-1 {
		t.Errorf("winners, held = %d, %d; want 1, %d", winners.Load(), held.Load(), n-1)
	}
}

func TestGenerationIncreasesOnEveryChangeOfHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	ms := []*leases.Manager{
		newManager(t, pool, "a", 10*time.Second, time.Second),
		newManager(t, pool, "b", 10*time.Second, time.Second),
		newManager(t, pool, "c", 10*time.Second, time.Second),
	}

	var gens []int64
	for i := range 9 {
		m := ms[i%len(ms)]
		lease, err := m.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatalf("round %d: TryAcquire: %v", i, err)
		}
		// Renewals keep the generation.
		if lease, err = m.Renew(ctx, lease); err != nil {
			t.Fatalf("round %d: Renew: %v", i, err)
		}
		gens = append(gens, lease.Generation)
		// Alternate hand-overs by release and by expiry.
		if i%2 == 0 {
			if err := m.Release(ctx, lease); err != nil {
				t.Fatalf("round %d: Release: %v", i, err)
			}
		} else {
			expire(t, pool, "job")
		}
	}
	want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if diff := cmp.Diff(want, gens); diff != "" {
		t.Errorf("generations (-want +got):\n%s", diff)
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, 200*time.Millisecond)
	b := newManager(t, pool, "b", 10*time.Second, 200*time.Millisecond)

	lease, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *leases.Lease, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		l, err := b.Acquire(ctx, "job")
		if err != nil {
			t.Errorf("b.Acquire: %v", err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // b has retried at least once
	if err := a.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l == nil || l.Holder != "b" || l.Generation != 2 {
		t.Errorf("b.Acquire = %+v, want b's lease at generation 2", l)
	}

	// Acquire gives up when its context ends.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := a.Acquire(cctx, "job"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a.Acquire of a held lease with a short context: error = %v, want DeadlineExceeded", err)
	}
}

func TestDeadHolderIsReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testutil.URL(t)
	deadPool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	livePool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(livePool.Close)

	const ttl, heartbeat = time.Second, 300 * time.Millisecond
	dead := newManager(t, deadPool, "dead", ttl, heartbeat)
	live := newManager(t, livePool, "live", ttl, heartbeat)

	// dead holds the lease under Run; its process then loses the database.
	deadStarted := make(chan struct{})
	deadRun := make(chan error, 1)
	go func() {
		deadRun <- dead.Run(ctx, "job", func(ctx context.Context, _ *leases.Lease) error {
			close(deadStarted)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-deadStarted
	before, err := live.Holder(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	deadPool.Close()
	closedAt := time.Now()

	lctx, cancel := context.WithTimeout(ctx, ttl+heartbeat+waitLimit)
	defer cancel()
	replacement, err := live.Acquire(lctx, "job")
	if err != nil {
		t.Fatalf("live.Acquire after the holder died: %v", err)
	}
	t.Logf("replaced after %s (TTL %s, heartbeat %s)", time.Since(closedAt), ttl, heartbeat)
	if replacement.Generation != before.Generation+1 {
		t.Errorf("replacement generation = %d, want %d", replacement.Generation, before.Generation+1)
	}
	if replacement.AcquiredAt.Before(before.ExpiresAt) {
		t.Errorf("replacement acquired at %s, before the dead lease expired at %s", replacement.AcquiredAt, before.ExpiresAt)
	}
	if elapsed, limit := time.Since(closedAt), ttl+heartbeat+10*time.Second; elapsed > limit {
		t.Errorf("replacement took %s, more than TTL + heartbeat + slack = %s", elapsed, limit)
	}

	// The dead holder's function was cancelled once its renewals could not
	// succeed before expiry.
	select {
	case err := <-deadRun:
		var lost *leases.LostError
		if !errors.Is(err, leases.ErrLeaseNotHeld) || !errors.As(err, &lost) || lost.Generation != before.Generation {
			t.Errorf("dead Run error = %v, want a *LostError for generation %d", err, before.Generation)
		}
	case <-time.After(waitLimit):
		t.Fatal("dead Run did not return after losing the database")
	}
}

func TestRunCancelsFunctionWhenLeaseLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	m := newManager(t, pool, "a", 2*time.Second, 100*time.Millisecond)

	started := make(chan *leases.Lease, 1)
	cause := make(chan error, 1)
	runErr := make(chan error, 1)
	go func() {
		runErr <- m.Run(ctx, "job", func(ctx context.Context, l *leases.Lease) error {
			started <- l
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	lease := <-started

	// Another holder steals the lease behind a's back.
	_, err := pool.Exec(ctx, `UPDATE braid_leases
		SET holder = 'thief', generation = generation + 1, acquired_at = now(), expires_at = now() + interval '1 hour'
		WHERE name = 'job'`)
	if err != nil {
		t.Fatal(err)
	}

	select {
	case c := <-cause:
		if !errors.Is(c, leases.ErrLeaseNotHeld) {
			t.Errorf("fn's context cause = %v, want one matching ErrLeaseNotHeld", c)
		}
	case <-time.After(waitLimit):
		t.Fatal("fn's context was not cancelled after the lease was stolen")
	}
	err = <-runErr
	var lost *leases.LostError
	if !errors.As(err, &lost) || !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Fatalf("Run error = %v, want a *LostError", err)
	}
	if diff := cmp.Diff(&leases.LostError{Name: "job", Holder: "a", Generation: lease.Generation}, lost,
		cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Cause" }, cmp.Ignore())); diff != "" {
		t.Errorf("LostError mismatch (-want +got):\n%s", diff)
	}

	// The thief's lease is untouched.
	h, err := m.Holder(ctx, "job")
	if err != nil || h.Holder != "thief" {
		t.Errorf("Holder after the loss = %+v, %v; want the thief", h, err)
	}
}

func TestRunRenewsAndReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 400*time.Millisecond, 100*time.Millisecond)

	// fn outlives several TTLs: the heartbeat keeps the lease, at one generation.
	var seen *leases.Lease
	err := a.Run(ctx, "job", func(ctx context.Context, l *leases.Lease) error {
		seen = l
		select {
		case <-time.After(1200 * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		h, err := a.Holder(ctx, "job")
		if err != nil {
			return err
		}
		if h.Generation != l.Generation || !h.RenewedAt.After(l.RenewedAt) {
			return errors.New("lease was not renewed at the same generation")
		}
		return errors.New("fn result")
	})
	if err == nil || err.Error() != "fn result" {
		t.Fatalf("Run error = %v, want fn's own error", err)
	}
	if _, err := a.Holder(ctx, "job"); !errors.Is(err, leases.ErrNoHolder) {
		t.Errorf("Holder after Run returned: error = %v, want ErrNoHolder (released)", err)
	}
	if seen == nil || seen.Holder != "a" {
		t.Errorf("fn saw lease %+v, want a's", seen)
	}
}

func TestRunRecoversPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, time.Second)

	err := a.Run(ctx, "job", func(context.Context, *leases.Lease) error { panic("kaboom") })
	if err == nil || !strings.Contains(err.Error(), "kaboom") || !strings.Contains(err.Error(), "goroutine") {
		t.Fatalf("Run error = %v, want the panic value and its stack", err)
	}
	if _, err := a.Holder(ctx, "job"); !errors.Is(err, leases.ErrNoHolder) {
		t.Errorf("Holder after a panic: error = %v, want ErrNoHolder (released)", err)
	}
}

func TestRunReleasesAfterCancel(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	err := a.Run(ctx, "job", func(ctx context.Context, _ *leases.Lease) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error = %v, want context.Canceled from fn", err)
	}
	if _, err := a.Holder(context.Background(), "job"); !errors.Is(err, leases.ErrNoHolder) {
		t.Errorf("Holder after a cancelled Run: error = %v, want ErrNoHolder (released)", err)
	}
}

func TestRunSameManagerTakesTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, 100*time.Millisecond)

	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			err := a.Run(ctx, "job", func(context.Context, *leases.Lease) error {
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(50 * time.Millisecond)
				inside.Add(-1)
				return nil
			})
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	wg.Wait()
	if got := maxInside.Load(); got != 1 {
		t.Errorf("at most %d functions ran at once in one Manager, want 1", got)
	}
}

func TestLead(t *testing.T) {
	t.Parallel()
	p1, p2 := twoPools(t)
	const ttl, heartbeat = 400 * time.Millisecond, 100 * time.Millisecond
	ms := []*leases.Manager{newManager(t, p1, "a", ttl, heartbeat), newManager(t, p2, "b", ttl, heartbeat)}

	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		terms   []string
		inside  atomic.Int32
		overlap atomic.Bool
		calls   atomic.Int32
	)
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			err := m.Lead(ctx, "job", func(ctx context.Context, l *leases.Lease) error {
				if inside.Add(1) > 1 {
					overlap.Store(true)
				}
				defer inside.Add(-1)
				mu.Lock()
				terms = append(terms, l.Holder)
				mu.Unlock()
				switch calls.Add(1) % 3 {
				case 0:
					panic("leader panicked") // must not end the loop
				case 1:
					return errors.New("transient failure")
				}
				return nil
			})
			if err != nil {
				t.Errorf("Lead returned %v, want nil after cancellation", err)
			}
		})
	}
	deadline := time.After(waitLimit)
	for calls.Load() < 6 {
		select {
		case <-deadline:
			t.Fatalf("only %d leader terms ran", calls.Load())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	wg.Wait()
	if overlap.Load() {
		t.Error("two leaders ran at once")
	}
	if n := calls.Load(); n < 6 {
		t.Errorf("Lead ran %d terms, want it to keep going after errors and panics", n)
	}
}

// TestLastFailure: an acquisition that fails because the database is out
// of reach is recorded as a failure; one that waits for another holder is
// not.
func TestLastFailure(t *testing.T) {
	t.Parallel()
	u := testdb.URL(t)
	pool, link := testdb.LinkedPool(t, u)
	other := newManager(t, testdb.Pool(t, u), "other", time.Minute, time.Second)
	m := newManager(t, pool, "me", time.Minute, 20*time.Millisecond)
	if _, err := other.Acquire(context.Background(), "held"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := m.Acquire(ctx, "held"); err == nil {
		t.Fatal("acquired a lease another process holds")
	}
	if f := m.LastFailure(); !f.IsZero() {
		t.Fatalf("waiting for another holder recorded a failure at %s", f)
	}

	link.Cut()
	before := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := m.Acquire(ctx, "free"); err == nil {
		t.Fatal("acquired a lease while cut off from the database")
	}
	if f := m.LastFailure(); f.Before(before) {
		t.Errorf("an acquisition cut off from the database: last failure %s, want after %s", f, before)
	}
}

// TestRenewTxInAnOlderTransactionRefusesAnExpiredLease: RenewTx judges
// expiry by the database's clock when it runs, not by the time its
// transaction began. A transaction begun while the lease was current,
// which renews it after it has expired, gets ErrLeaseNotHeld rather than
// a term whose expiry has already passed.
func TestRenewTxInAnOlderTransactionRefusesAnExpiredLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	a := newManager(t, pool, "a", 10*time.Second, time.Second)
	lease, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	// The lease expires a second before now, and after tx began.
	time.Sleep(1500 * time.Millisecond)
	expire(t, pool, "job")
	renewed, err := a.RenewTx(ctx, tx, lease)
	if !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Fatalf("RenewTx of a lease that expired after its transaction began: %+v, %v; want ErrLeaseNotHeld", renewed, err)
	}
}
