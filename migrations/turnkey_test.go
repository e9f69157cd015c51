package migrations_test

import (
	"context"
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

// 00111 moves a live turn job's task from its args to its unique key, and
// leaves finished ones as they were, readable all the same; reverting it
// gives the live job back the args and the very key River derives from
// them, so that the earlier code's one-live-turn rule still finds it.
func TestTurnKeyMigrationMovesALiveTurnsTaskToItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	m, err := migrations.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.DownTo(ctx, 110); err != nil {
		t.Fatal(err)
	}

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
