package leases_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/leases"
)

// A Manager's configuration is checked up front; a bad value gets an error
// naming the field and its limit. pgxpool.New does not connect, so this
// example needs no database.
func ExampleNew() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/braid")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	_, err = leases.New(pool, &leases.Config{TTL: time.Second, Heartbeat: 2 * time.Second})
	fmt.Println(err)

	m, err := leases.New(pool, &leases.Config{Holder: "worker-1", TTL: 3 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.HolderID(), m.TTL(), m.Heartbeat())
	// Output:
	// leases: Config.Heartbeat (2s) must be less than Config.TTL (1s)
	// worker-1 3s 1s
}

// TryAcquire reports a lease held by someone else as a *HeldError, which
// matches ErrLeaseHeld; a lost lease matches ErrLeaseNotHeld.
func ExampleHeldError() {
	var err error = &leases.HeldError{
		Name:       "braid:delays",
		Holder:     "host-a-4242-1f2e3d4c",
		Generation: 7,
		ExpiresAt:  time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	fmt.Println(errors.Is(err, leases.ErrLeaseHeld))
	fmt.Println(err)

	err = &leases.LostError{Name: "braid:delays", Holder: "host-b", Generation: 8, Cause: errors.New("database unreachable")}
	fmt.Println(errors.Is(err, leases.ErrLeaseNotHeld))
	// Output:
	// true
	// leases: lease "braid:delays" is held by "host-a-4242-1f2e3d4c" (generation 7) until 2025-01-02T03:04:05Z
	// true
}

// The leader loop: every process calls Lead with the same lease name, and fn
// runs in one of them at a time. This example needs a migrated database in
// DATABASE_URL, so it is compiled but not run.
func ExampleManager_Lead() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	m, err := leases.New(pool, nil) // Holder: hostname-pid-random, TTL 15s, Heartbeat 5s
	if err != nil {
		log.Fatal(err)
	}
	err = m.Lead(ctx, "example:cleanup", func(ctx context.Context, l *leases.Lease) error {
		log.Printf("leading as %s (generation %d)", l.Holder, l.Generation)
		ticker := time.NewTicker(time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done(): // shutdown, or the lease was lost
				return ctx.Err()
			case <-ticker.C:
				// One unit of leader-only work; fence its writes with CheckTx.
			}
		}
	})
	if err != nil {
		log.Fatal(err)
	}
}
