package leases_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/leases"
)

// TestStressNoOverlappingTerms runs 8 competitors on 2 pools for several
// rounds. Each records its term in a test table, with times from the database
// clock and every write fenced by CheckTx. Some competitors crash mid-term
// (they stop renewing and never release), so hand-overs happen both by
// release and by expiry. No two recorded terms may overlap, and generations
// must strictly increase in time order.
func TestStressNoOverlappingTerms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, p2 := twoPools(t)
	_, err := p1.Exec(ctx, `CREATE TABLE lease_terms (
		holder     text        NOT NULL,
		generation bigint      NOT NULL PRIMARY KEY,
		started_at timestamptz NOT NULL,
		ended_at   timestamptz NOT NULL
	)`)
	if err != nil {
		t.Fatal(err)
	}

	const (
		competitors = 8
		rounds      = 3
		ttl         = 400 * time.Millisecond
		heartbeat   = 100 * time.Millisecond
		name        = "stress"
	)

	// record starts or extends a term, fenced on the lease.
	record := func(ctx context.Context, pool *pgxpool.Pool, m *leases.Manager, l *leases.Lease) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := m.CheckTx(ctx, tx, l); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO lease_terms (holder, generation, started_at, ended_at)
				VALUES ($1, $2, now(), now())
				ON CONFLICT (generation) DO UPDATE SET ended_at = now()`, l.Holder, l.Generation)
			return err
		})
	}

	cctx, cancel := context.WithTimeout(ctx, 2*waitLimit)
	defer cancel()
	var wg sync.WaitGroup
	for i := range competitors {
		pool := p1
		if i%2 == 1 {
			pool = p2
		}
		m := newManager(t, pool, fmt.Sprintf("competitor-%d", i), ttl, heartbeat)
		wg.Go(func() {
			for round := range rounds {
				// Two competitors crash in their second round: they take the
				// lease, record a term and then neither renew nor release.
				if round == 1 && i < 2 {
					l, err := m.Acquire(cctx, name)
					if err != nil {
						t.Errorf("%s: Acquire: %v", m.HolderID(), err)
						return
					}
					if err := record(cctx, pool, m, l); err != nil {
						t.Errorf("%s: recording a term: %v", m.HolderID(), err)
					}
					continue
				}
				err := m.Run(cctx, name, func(ctx context.Context, l *leases.Lease) error {
					for range 3 {
						if err := record(ctx, pool, m, l); err != nil {
							return err
						}
						time.Sleep(15 * time.Millisecond)
					}
					return nil
				})
				if err != nil {
					t.Errorf("%s: Run: %v", m.HolderID(), err)
					return
				}
			}
		})
	}
	wg.Wait()

	type term struct {
		holder     string
		generation int64
		start, end time.Time
	}
	rows, err := p1.Query(ctx, `SELECT holder, generation, started_at, ended_at FROM lease_terms ORDER BY started_at, generation`)
	if err != nil {
		t.Fatal(err)
	}
	terms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (term, error) {
		var tm term
		err := r.Scan(&tm.holder, &tm.generation, &tm.start, &tm.end)
		return tm, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(terms) != competitors*rounds {
		t.Errorf("recorded %d terms, want %d", len(terms), competitors*rounds)
	}
	for i := 1; i < len(terms); i++ {
		prev, cur := terms[i-1], terms[i]
		if cur.start.Before(prev.end) {
			t.Errorf("term %s/gen %d [%s, %s] overlaps term %s/gen %d [%s, %s]",
				cur.holder, cur.generation, cur.start.Format(time.StampMicro), cur.end.Format(time.StampMicro),
				prev.holder, prev.generation, prev.start.Format(time.StampMicro), prev.end.Format(time.StampMicro))
		}
		if cur.generation <= prev.generation {
			t.Errorf("generation %d (%s) follows generation %d (%s)", cur.generation, cur.holder, prev.generation, prev.holder)
		}
	}
	if t.Failed() {
		return
	}
	// Sanity: the fence really refuses a term that has ended.
	last := terms[len(terms)-1]
	stale := &leases.Lease{Name: name, Holder: last.holder, Generation: last.generation - 1}
	m := newManager(t, p1, "checker", ttl, heartbeat)
	err = pgx.BeginFunc(ctx, p1, func(tx pgx.Tx) error { return m.CheckTx(ctx, tx, stale) })
	if !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Errorf("CheckTx on an old generation: error = %v, want ErrLeaseNotHeld", err)
	}
}
