package testdb

import (
	"context"
	"errors"
	"testing"
)

// TestLinkCutsOnePoolOnly: a cut link breaks the connections of its own
// pool, open or new, and leaves another pool on the same database alone;
// once restored, its pool reconnects.
func TestLinkCutsOnePoolOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := URL(t)
	linked, link := LinkedPool(t, u)
	other := Pool(t, u)
	one := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var n int
	one("linked pool before the cut", linked.QueryRow(ctx, `SELECT 1`).Scan(&n))

	link.Cut()
	err := linked.QueryRow(ctx, `SELECT 1`).Scan(&n)
	if err == nil {
		t.Fatal("a query through a cut link succeeded")
	}
	// The open connection broke, so the pool dials a new one, which the
	// cut refuses.
	err = linked.QueryRow(ctx, `SELECT 1`).Scan(&n)
	if !errors.Is(err, ErrLinkCut) {
		t.Fatalf("a new connection through a cut link: %v, want ErrLinkCut", err)
	}
	one("the other pool during the cut", other.QueryRow(ctx, `SELECT 1`).Scan(&n))

	link.Restore()
	one("linked pool after the restore", linked.QueryRow(ctx, `SELECT 1`).Scan(&n))
}
