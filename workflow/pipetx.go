package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pipeTx is a transaction whose BEGIN travels with its first round trip
// and whose COMMIT travels with its last (commitWith), so that a
// transaction of n round trips costs n round trips rather than n+2. The
// batch of turn outcomes uses it: it sends a few round trips per
// transaction, and only Config.OutcomeFlushes batches commit at once, so
// their latency bounds how many turns a process finishes per second.
//
// Its BEGIN brings keyedPlansSQL along: the batch's statements read and
// write their rows by key, on generic plans (see "Plans of the turns'
// statements" in the package documentation).
//
// It is a pgx.Tx for the statements it sends, as pgx's own is, and it
// sends them the same way; it has no nested transactions and no large
// objects, which the batch does not use.
type pipeTx struct {
	conn      *pgx.Conn
	begun     bool // BEGIN sent
	committed bool
	// lockTimeout, when positive, is the transaction's lock_timeout, set
	// with its BEGIN.
	lockTimeout time.Duration
}

var _ pgx.Tx = (*pipeTx)(nil)

// errNoNestedTx is the error of pipeTx.Begin.
var errNoNestedTx = errors.New("workflow: the outcome batch's transaction has no nested transactions")

// withPipeTx runs fn in a pipeTx on a connection of the pool, with
// lockTimeout, when positive, as the transaction's lock_timeout, and
// commits the transaction when fn returns nil without having committed
// it; when fn fails, it rolls the transaction back. A connection whose
// rollback fails is left in its transaction, and the pool closes it when
// it is released.
func (e *Engine) withPipeTx(ctx context.Context, lockTimeout time.Duration, fn func(tx *pipeTx) error) error {
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	tx := &pipeTx{conn: c.Conn(), lockTimeout: lockTimeout}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// begin sends BEGIN and keyedPlansSQL on their own, for a statement that
// cannot carry them.
func (t *pipeTx) begin(ctx context.Context) error {
	if t.committed {
		return pgx.ErrTxClosed
	}
	if t.begun {
		return nil
	}
	return t.SendBatch(ctx, &pgx.Batch{}).Close()
}

// SendBatch sends b, led by BEGIN and keyedPlansSQL when it is the
// transaction's first round trip. Its results are b's alone: those of the
// two leading statements are read first and not shown.
func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.committed {
		return &failedResults{err: pgx.ErrTxClosed}
	}
	if t.begun {
		return t.conn.SendBatch(ctx, b)
	}
	led := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, b.Len()+3)}
	led.Queue("BEGIN")
	led.Queue(keyedPlansSQL)
	lead := 2
	if t.lockTimeout > 0 {
		led.Queue(`SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", max(1, t.lockTimeout.Milliseconds())))
		lead++
	}
	led.QueuedQueries = append(led.QueuedQueries, b.QueuedQueries...)
	t.begun = true
	return &begunResults{BatchResults: t.conn.SendBatch(ctx, led), lead: lead}
}

// commitWith sends b and COMMIT in one round trip, and commits nothing
// when a statement of b fails: the transaction is then aborted, and
// Rollback ends it.
func (t *pipeTx) commitWith(ctx context.Context, b *pgx.Batch) error {
	var tag pgconn.CommandTag
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	if err := t.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	t.committed = true
	if tag.String() != "COMMIT" {
		// A transaction that had failed ends with ROLLBACK.
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Commit commits the transaction, if commitWith has not.
func (t *pipeTx) Commit(ctx context.Context) error {
	if t.committed || !t.begun {
		t.committed = true
		return nil
	}
	ct, err := t.conn.Exec(ctx, "COMMIT")
	t.committed = true
	if err != nil {
		return err
	}
	if ct.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls the transaction back, unless it has ended.
func (t *pipeTx) Rollback(ctx context.Context) error {
	if t.committed || !t.begun {
		return nil
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	t.committed = true
	return err
}

// Begin fails: the batch needs no nested transaction.
func (t *pipeTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNoNestedTx }

func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.conn.Exec(ctx, sql, args...)
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.begin(ctx); err != nil {
		return failedRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

func (t *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects has no large objects to offer: the batch uses none.
func (t *pipeTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *pipeTx) Conn() *pgx.Conn { return t.conn }

// begunResults are the results of a batch led by BEGIN and
// keyedPlansSQL, whose results are read before the first of the batch's
// own.
type begunResults struct {
	pgx.BatchResults
	lead int // the leading statements' results to skip
	read bool
	err  error
}

func (r *begunResults) skipBegin() error {
	if !r.read {
		r.read = true
		for range r.lead {
			if _, err := r.BatchResults.Exec(); err != nil {
				r.err = fmt.Errorf("workflow: beginning the transaction: %w", err)
				break
			}
		}
	}
	return r.err
}

func (r *begunResults) Exec() (pgconn.CommandTag, error) {
	if err := r.skipBegin(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.BatchResults.Exec()
}

func (r *begunResults) Query() (pgx.Rows, error) {
	if err := r.skipBegin(); err != nil {
		return nil, err
	}
	return r.BatchResults.Query()
}

func (r *begunResults) QueryRow() pgx.Row {
	if err := r.skipBegin(); err != nil {
		return failedRow{err}
	}
	return r.BatchResults.QueryRow()
}

func (r *begunResults) Close() error {
	if err := r.BatchResults.Close(); err != nil {
		return err
	}
	return r.err
}

// failedResults are the results of a batch that was not sent.
type failedResults struct{ err error }

func (r *failedResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, r.err }
func (r *failedResults) Query() (pgx.Rows, error)         { return nil, r.err }
func (r *failedResults) QueryRow() pgx.Row                { return failedRow{r.err} }
func (r *failedResults) Close() error                     { return r.err }
func (r *failedResults) Tx() pgx.Tx                       { return nil }

// failedRow is a row whose Scan returns the error that kept it from being
// read.
type failedRow struct{ err error }

func (r failedRow) Scan(...any) error { return r.err }
