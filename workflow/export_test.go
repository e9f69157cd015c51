package workflow

import (
	"context"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
)

// SetHookBeforeContinuation sets a function that runs after a batch that
// claimed a continuation committed, before the continuation's turn starts.
func SetHookBeforeContinuation(f func(row *rivertype.JobRow)) { testHookBeforeContinuation = f }

// TopicWaitsSQL is the query by which a publish finds the waits on its
// topic.
const TopicWaitsSQL = topicWaitsSQL

// StepsQueued is how many step records wait for a statement to carry
// them.
func StepsQueued(e *Engine) int { return len(e.recorder.in) }

// PipeTx is the outcome batch's transaction.
type PipeTx = pipeTx

// WithPipeTx runs fn in a PipeTx on a connection of pool.
func WithPipeTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx *PipeTx) error) error {
	return (&Engine{pool: pool}).withPipeTx(ctx, 0, fn)
}

// CommitWith sends b and COMMIT in one round trip.
func (t *pipeTx) CommitWith(ctx context.Context, b *pgx.Batch) error { return t.commitWith(ctx, b) }

// TxStatus is the connection's transaction status: 'I' idle, 'T' in a
// transaction, 'E' in a failed one.
func (t *pipeTx) TxStatus() byte { return t.conn.PgConn().TxStatus() }

// VacuumChurnedTables runs the maintenance loop's vacuum of churned tables
// once.
func VacuumChurnedTables(ctx context.Context, e *Engine) ([]string, error) {
	return e.vacuumChurnedTables(ctx)
}

// AnalyzeGrownTables runs the maintenance loop's analysis of grown tables
// once, and returns the tables it analyzed.
func AnalyzeGrownTables(ctx context.Context, e *Engine) ([]string, error) {
	return e.analyzeGrownTables(ctx)
}

// HardStopTurns does what Stop does once its context ends: it marks the
// engine stopping and cancels the turns this process claimed itself.
func HardStopTurns(e *Engine) {
	e.stopping.Store(true)
	e.cancelTurns()
}

// Reconcile runs one look of the reconciler: the tasks whose turn jobs
// ended lately without a live turn left.
func Reconcile(ctx context.Context, e *Engine) error { return e.reconcile(ctx) }

// DecideUndecidedNodes runs one look for the DAG nodes left undecided.
func DecideUndecidedNodes(ctx context.Context, e *Engine) error { return e.decideUndecidedNodes(ctx) }

// LoadStatements are the statements of a load of starting turns' tasks,
// each taking the tasks' IDs as $1.
var LoadStatements = map[string]string{"tasks": loadTasksSQL, "steps": loadStepsSQL, "children": loadChildrenSQL}

// KeyedPlansSQL is the statement that puts the rest of its transaction on
// generic plans with index scans.
const KeyedPlansSQL = keyedPlansSQL

// DueStatements are the delay processor's statements that find what is
// due, each with arguments that pick every due row (up to 100).
var DueStatements = map[string]struct {
	SQL  string
	Args []any
}{
	"fire due delays":   {fireDueDelaysSQL, []any{100, nil, nil, []uuid.UUID{}, []string{}}},
	"list due delays":   {dueDelaysSQL, []any{100, []uuid.UUID{}, []string{}}},
	"list overdue runs": {overdueRunsSQL, []any{100, []uuid.UUID{}}},
}

// LeftOutStatements are the statements that leave out of what they read
// a list that may hold thousands of rows (the tasks or jobs a transaction
// has locked already), with their parameters' types.
var LeftOutStatements = map[string]struct {
	SQL   string
	Types []string
}{
	"cancel's lock of a run's tasks":    {cancelLockTasksSQL, []string{"uuid", "uuid[]"}},
	"cancel's look for skipped turns":   {skippedTurnsSQL, []string{"text", "uuid", "bigint[]"}},
	"retention's delete of a run batch": {deleteOldRunsSQL, []string{"uuid[]", "timestamptz", "uuid[]"}},
}
