package queue

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
)

// River's completer retries a batch whose statement failed with the same
// outcomes. The retry must judge them as the first try did: the outcome of
// a superseded attempt is dropped again, and does not land on the attempt
// that now runs the job.
func TestPilotJudgesARetriedBatchAsTheFirstTry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	newQueue(t, pool, &Config{}) // the schema
	var zombie, live int64
	if err := pool.QueryRow(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at)
		VALUES ('{}', 'pilot', 5, 'default', 'running', 2, now()), ('{}', 'pilot', 5, 'default', 'running', 1, now())
		RETURNING id`).Scan(&zombie); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT max(id) FROM river_job`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	// The batch's first statement fails, as it would while PostgreSQL
	// restarts; the next succeeds.
	if _, err := pool.Exec(ctx, `
		CREATE SEQUENCE pilot_tries;
		CREATE FUNCTION fail_first() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF nextval('pilot_tries') = 1 THEN
		        RAISE EXCEPTION 'the first try fails';
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER fail_first BEFORE UPDATE ON river_job FOR EACH STATEMENT EXECUTE FUNCTION fail_first();`); err != nil {
		t.Fatal(err)
	}
	p := newPilot(MaxErrorBytesDefault)
	// Attempt 1 of the first job lost it (attempt 2 runs it now) and has
	// returned.
	p.beforeReport(zombie, 1, true)
	now := time.Now()
	params := &riverdriver.JobSetStateIfRunningManyParams{
		ID:              []int64{zombie, live},
		Attempt:         []*int{nil, nil},
		ErrData:         [][]byte{nil, nil},
		FinalizedAt:     []*time.Time{&now, &now},
		MetadataDoMerge: []bool{true, false},
		MetadataUpdates: [][]byte{[]byte(`{"` + metadataSuperseded + `":1}`), nil},
		Now:             &now,
		ScheduledAt:     []*time.Time{nil, nil},
		State:           []rivertype.JobState{rivertype.JobStateCompleted, rivertype.JobStateCompleted},
	}
	exec := riverpgxv5.New(pool).GetExecutor()
	if _, err := p.JobSetStateIfRunningMany(ctx, exec, params); err == nil {
		t.Fatal("the first try succeeded; want the trigger's error")
	}
	if _, err := p.JobSetStateIfRunningMany(ctx, exec, params); err != nil {
		t.Fatal(err)
	}
	state := func(id int64) rivertype.JobState {
		var s rivertype.JobState
		if err := pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := state(zombie); s != rivertype.JobStateRunning {
		t.Errorf("the job whose late attempt returned is %s; want it left running for the attempt that runs it", s)
	}
	if s := state(live); s != rivertype.JobStateCompleted {
		t.Errorf("the other job is %s; want its outcome written", s)
	}
	if p.isSuperseded(zombie, 1) || p.dropped.Load() != 1 {
		t.Errorf("superseded still recorded: %v, dropped %d; want the record settled once, with the written batch", p.isSuperseded(zombie, 1), p.dropped.Load())
	}
}
