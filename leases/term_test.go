package leases_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/braidflow/braid/leases"
)

// An acquisition that waited on the lease row's lock longer than TTL does
// not start a term that has already expired: when Run's function starts,
// its lease is unexpired in the database, and no one else can take it.
// Before, the expiry was counted from the statement's start, before the
// wait, and the function ran while a third process took the lease.
func TestRunStartsNoTermThatExpiredWhileItWaitedForTheRow(t *testing.T) {
	t.Parallel()
	poolA, poolB := twoPools(t)
	const ttl, heartbeat = time.Second, 300 * time.Millisecond
	a := newManager(t, poolA, "a", ttl, heartbeat)
	b := newManager(t, poolB, "b", ttl, heartbeat)
	c := newManager(t, poolA, "c", ttl, heartbeat)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	const name = "stale-wait"

	lease, err := a.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// a's transaction holds the row, as a fenced write of a stuck holder
	// would, until after its lease has long expired.
	tx, err := poolA.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := a.CheckTx(ctx, tx, lease); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 200*time.Millisecond)

	type entry struct {
		lease   *leases.Lease
		expired bool
		err     error
	}
	entered := make(chan entry, 1)
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- b.Run(runCtx, name, func(ctx context.Context, l *leases.Lease) error {
			var e entry
			e.lease = l
			e.err = poolB.QueryRow(ctx, `SELECT expires_at <= braid_clock() FROM braid_leases WHERE name = $1`, name).Scan(&e.expired)
			entered <- e
			<-ctx.Done()
			return nil
		})
	}()
	time.Sleep(2 * ttl)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var e entry
	select {
	case e = <-entered:
	case <-ctx.Done():
		t.Fatal("b's function never started")
	}
	if e.err != nil {
		t.Fatal(e.err)
	}
	if e.expired {
		t.Errorf("b's function started under generation %d, already expired in the database", e.lease.Generation)
	}
	if got, err := c.TryAcquire(ctx, name); !errors.Is(err, leases.ErrLeaseHeld) {
		gen := int64(0)
		if got != nil {
			gen = got.Generation
		}
		t.Errorf("c.TryAcquire while b's function runs = generation %d, %v; want ErrLeaseHeld", gen, err)
	}
	stopRun()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("b.Run = %v", err)
	}
}
