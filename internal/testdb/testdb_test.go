package testdb

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMain(m *testing.M) { Main(m) }

func TestDBIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := DB(t), DB(t)
	if _, err := a.Exec(ctx, `INSERT INTO braid_leases (name, holder, expires_at) VALUES ('x', 'a', now())`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM braid_leases`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d rows of the first", n)
	}
	var versions []int64
	rows, err := a.Query(ctx, `SELECT version FROM river_migration WHERE line = 'main' ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{1, 2, 3, 4, 5, 6, 7, 8}, versions); diff != "" {
		t.Errorf("river_migration versions (-want +got):\n%s", diff)
	}
}

func TestParallelDatabases(t *testing.T) {
	t.Parallel()
	for i := range 6 {
		t.Run("db", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := DB(t)
			if _, err := pool.Exec(ctx, `INSERT INTO braid_leases (name, holder, expires_at) VALUES ($1, 'h', now())`, fmt.Sprint("lease-", i)); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_leases`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("database sees %d lease rows, want only its own 1", n)
			}
		})
	}
}
