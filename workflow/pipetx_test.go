package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A pipeTx sends BEGIN with its first round trip and COMMIT with its
// last, shows a batch only its own results, and commits nothing when a
// statement of its last round trip fails.
func TestPipeTxBeginsAndCommitsWithItsRoundTrips(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE TABLE pipe (v int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	rows := func() []int {
		t.Helper()
		r, err := pool.Query(ctx, `SELECT v FROM pipe ORDER BY v`)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := pgx.CollectRows(r, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}

	// BEGIN goes with the first batch, whose results are the batch's own.
	err := workflow.WithPipeTx(ctx, pool, func(tx *workflow.PipeTx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO pipe VALUES (1) RETURNING v`)
		b.Queue(`INSERT INTO pipe VALUES (2)`)
		br := tx.SendBatch(ctx, b)
		var v int
		if err := br.QueryRow().Scan(&v); err != nil || v != 1 {
			t.Errorf("first result: %d, %v; want the first insert's 1", v, err)
		}
		if tag, err := br.Exec(); err != nil || tag.String() != "INSERT 0 1" {
			t.Errorf("second result: %q, %v; want the second insert's", tag, err)
		}
		if err := br.Close(); err != nil {
			return err
		}
		if s := tx.TxStatus(); s != 'T' {
			t.Errorf("after the first batch the connection's status is %q, want in a transaction", s)
		}
		last := &pgx.Batch{}
		last.Queue(`INSERT INTO pipe VALUES (3)`)
		if err := tx.CommitWith(ctx, last); err != nil {
			return err
		}
		if s := tx.TxStatus(); s != 'I' {
			t.Errorf("after commitWith the connection's status is %q, want idle", s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rows(); len(got) != 3 {
		t.Fatalf("rows %v after the commit, want 1, 2, 3", got)
	}

	// A statement that fails in the last round trip commits nothing, not
	// even what earlier round trips wrote.
	err = workflow.WithPipeTx(ctx, pool, func(tx *workflow.PipeTx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO pipe VALUES (4)`); err != nil {
			return err
		}
		last := &pgx.Batch{}
		last.Queue(`INSERT INTO pipe VALUES (5)`)
		last.Queue(`INSERT INTO pipe VALUES (1)`) // a duplicate key
		return tx.CommitWith(ctx, last)
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("commitWith with a duplicate key: %v, want the unique violation", err)
	}
	if got := rows(); len(got) != 3 {
		t.Fatalf("rows %v after the failed commit, want only 1, 2, 3", got)
	}

	// A function that fails rolls back, and one that sends nothing
	// commits nothing.
	boom := errors.New("boom")
	err = workflow.WithPipeTx(ctx, pool, func(tx *workflow.PipeTx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO pipe VALUES (6)`); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("withPipeTx returned %v, want the function's error", err)
	}
	if err := workflow.WithPipeTx(ctx, pool, func(*workflow.PipeTx) error { return nil }); err != nil {
		t.Fatalf("an empty transaction: %v", err)
	}
	if got := rows(); len(got) != 3 {
		t.Fatalf("rows %v after a rollback, want only 1, 2, 3", got)
	}

	// A committed transaction refuses more statements.
	err = workflow.WithPipeTx(ctx, pool, func(tx *workflow.PipeTx) error {
		if err := tx.CommitWith(ctx, &pgx.Batch{}); err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, &pgx.Batch{}).Close(); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("a batch after the commit: %v, want ErrTxClosed", err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("a statement after the commit: %v, want ErrTxClosed", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
