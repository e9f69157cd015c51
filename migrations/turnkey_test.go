package migrations_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/migrations"
	"github.com/braidflow/braid/testutil"
)

// oldTurnArgs are the args of a turn job as braid wrote them before 00111,
// under River's unique key derived from them.
type oldTurnArgs struct {
	TaskID   string `json:"task_id"`
	Workflow string `json:"workflow"`
}

func (oldTurnArgs) Kind() string { return "braid_task" }

var oldTurnUnique = river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
}}

type turnJob struct {
	Args  string
	Key   []byte
	Task  *uuid.UUID
	State string
}

func readTurnJob(t *testing.T, pool *pgxpool.Pool, id int64) turnJob {
	t.Helper()
	var j turnJob
	var fn bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'braid_turn_task')`).Scan(&fn); err != nil {
		t.Fatal(err)
	}
	q := `SELECT args::text, unique_key, NULL::uuid, state::text FROM river_job WHERE id = $1`
	if fn {
		q = `SELECT args::text, unique_key, braid_turn_task(unique_key, args), state::text FROM river_job WHERE id = $1`
	}
	if err := pool.QueryRow(context.Background(), q, id).Scan(&j.Args, &j.Key, &j.Task, &j.State); err != nil {
		t.Fatal(err)
	}
	return j
}

// before111 gives a database whose schema stands just before 00111, and
// its migrator, closed when the test ends.
func before111(t *testing.T) (*pgxpool.Pool, *migrations.Migrator) {
	t.Helper()
	pool := testutil.DB(t)
	m, err := migrations.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if _, err := m.DownTo(context.Background(), 110); err != nil {
		t.Fatal(err)
	}
	return pool, m
}

// 00111 moves a live turn job's task from its args to its unique key, and
// leaves finished ones as they were, readable all the same; reverting it
// gives the live job back the args and the very key River derives from
// them, so that the earlier code's one-live-turn rule still finds it.
func TestTurnKeyMigrationMovesALiveTurnsTaskToItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := before111(t)

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	live, done := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	insert := func(task uuid.UUID, unique river.UniqueOpts) (int64, []byte) {
		t.Helper()
		res, err := client.Insert(ctx, oldTurnArgs{TaskID: task.String(), Workflow: "import"}, &river.InsertOpts{UniqueOpts: unique})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.ID, res.Job.UniqueKey
	}
	liveID, riverKey := insert(live, oldTurnUnique)
	doneID, doneKey := insert(done, oldTurnUnique)
	// A live job inserted without a key, as by hand: nothing to move, and
	// its task would not be unique among the keys.
	keyless := uuid.Must(uuid.NewV7())
	keylessID, _ := insert(keyless, river.UniqueOpts{})
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, doneID); err != nil {
		t.Fatal(err)
	}

	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := []turnJob{
		{`{"workflow": "import"}`, live[:], &live, "available"},
		{`{"task_id": "` + done.String() + `", "workflow": "import"}`, doneKey, &done, "completed"},
		{`{"task_id": "` + keyless.String() + `", "workflow": "import"}`, nil, &keyless, "available"},
	}
	if diff := cmp.Diff(want, []turnJob{readTurnJob(t, pool, liveID), readTurnJob(t, pool, doneID), readTurnJob(t, pool, keylessID)}); diff != "" {
		t.Errorf("turn jobs after 00111 (-want +got):\n%s", diff)
	}
	// The task index serves the lookups by task.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN (COSTS OFF) SELECT id FROM river_job WHERE kind = 'braid_task' AND braid_turn_task(unique_key, args) = $1`, live)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	uses := false
	for _, l := range lines {
		uses = uses || strings.Contains(l, "braid_river_job_task")
	}
	if !uses {
		t.Errorf("a lookup by task does not use braid_river_job_task:\n%v", lines)
	}
	_ = tx.Rollback(ctx)

	if _, err := m.DownTo(ctx, 110); err != nil {
		t.Fatal(err)
	}
	want = []turnJob{
		{`{"task_id": "` + live.String() + `", "workflow": "import"}`, riverKey, nil, "available"},
		{`{"task_id": "` + done.String() + `", "workflow": "import"}`, doneKey, nil, "completed"},
	}
	if diff := cmp.Diff(want, []turnJob{readTurnJob(t, pool, liveID), readTurnJob(t, pool, doneID)}); diff != "" {
		t.Errorf("turn jobs after reverting 00111 (-want +got):\n%s", diff)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
}

// 00111 moves a live turn job's span link from its metadata to its task,
// and reverting it moves the link back. Reverting rebuilds River's key as
// Go's encoding/json writes the args, for a workflow whose name has the
// characters it escapes.
func TestTurnKeyMigrationMovesALiveTurnsLinkToItsTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := before111(t)
	run, task := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	const name = "a<b>&c\u2028d\u2029"
	if _, err := pool.Exec(ctx, `INSERT INTO braid_runs (id, workflow, status, input) VALUES ($1, $2, 'running', '{}')`, run, name); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO braid_tasks (id, run_id, key, workflow, status, input) VALUES ($1, $2, 'root', $3, 'pending', '{}')`,
		task, run, name); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const link = `{"braid_link": {"kind": "spawning turn", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`
	res, err := client.Insert(ctx, oldTurnArgs{TaskID: task.String(), Workflow: name},
		&river.InsertOpts{UniqueOpts: oldTurnUnique, Metadata: []byte(link)})
	if err != nil {
		t.Fatal(err)
	}
	job, riverKey := res.Job.ID, res.Job.UniqueKey

	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var turnLink, metadata string
	if err := pool.QueryRow(ctx, `SELECT t.turn_link::text, j.metadata::text FROM braid_tasks t, river_job j WHERE t.id = $1 AND j.id = $2`,
		task, job).Scan(&turnLink, &metadata); err != nil {
		t.Fatal(err)
	}
	wantLink := `{"job": ` + strconv.FormatInt(job, 10) + `, "kind": "spawning turn", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`
	if diff := cmp.Diff([]string{wantLink, "{}"}, []string{turnLink, metadata}); diff != "" {
		t.Errorf("the task's link and the job's metadata after 00111 (-want +got):\n%s", diff)
	}

	if _, err := m.DownTo(ctx, 110); err != nil {
		t.Fatal(err)
	}
	var key []byte
	if err := pool.QueryRow(ctx, `SELECT unique_key, metadata::text FROM river_job WHERE id = $1`, job).Scan(&key, &metadata); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{riverKey, link}, []any{key, metadata}); diff != "" {
		t.Errorf("the job's key and metadata after reverting 00111 (-want +got):\n%s", diff)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
}
