package queue

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
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

// finishedArgs is the kind of TestPilotForgetsAFinishedJobAtItsNextOutcome.
type finishedArgs struct{}

func (finishedArgs) Kind() string { return "finished" }

// A worker that completed its job in its own transaction and then
// returned an error leaves River an outcome that is not a plain
// completion: the pilot forgets the job as finished at that outcome too,
// so that once an operator retries the job, the completion of its next
// attempt is written, not dropped as the first one's.
func TestPilotForgetsAFinishedJobAtItsNextOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	var q *Queue
	runs := make(chan int, 4)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[finishedArgs]) error {
		runs <- job.Attempt
		if job.Attempt > 1 {
			return nil // the retried attempt: an ordinary success
		}
		if err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
			return q.CompleteTx(ctx, tx, []*rivertype.JobRow{job.JobRow})
		}); err != nil {
			return err
		}
		q.Finished([]*rivertype.JobRow{job.JobRow})
		return errors.New("something after the commit failed")
	}))
	q = startQueue(t, pool, &Config{Workers: workers})
	res, err := q.Insert(ctx, finishedArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, runs, "the first attempt")
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
	// River's completer writes the first attempt's outcome.
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.pilot.mu.Lock()
		_, pending := q.pilot.finished[res.Job.ID]
		q.pilot.mu.Unlock()
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is still recorded as finished by its worker, 10 s after its attempt returned an error", res.Job.ID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := q.Retry(ctx, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	recv(t, runs, "the retried attempt")
	waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
}

// outputArgs is the kind of TestPilotStoresOutputJSONBRejects.
type outputArgs struct{ Output string }

func (outputArgs) Kind() string { return "output" }

// Output a worker records as it came (an upstream API's response) may be
// JSON that PostgreSQL's jsonb rejects, a lone UTF-16 surrogate escape or
// a number beyond its numeric: the pilot stores what jsonb can (the
// surrogate as U+FFFD) or leaves the metadata as it was, and River's
// completer goes on with the outcomes after it, rather than retry the
// batch for ever.
func TestPilotStoresOutputJSONBRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[outputArgs]) error {
		if job.Args.Output == "" {
			return nil
		}
		return river.RecordOutput(ctx, json.RawMessage(job.Args.Output))
	}))
	q := startQueue(t, testdb.DB(t), &Config{Workers: workers})
	for _, c := range []struct{ output, want string }{
		{`{"title": "\ud83d cut"}`, `{"title": "\ufffd cut"}`},
		{`{"title": "\ud83d\ude00 kept"}`, `{"title": "\ud83d\ude00 kept"}`},
		{`{"n": 1e200000}`, ``},
	} {
		res, err := q.Insert(ctx, outputArgs{Output: c.output}, nil)
		if err != nil {
			t.Fatal(err)
		}
		after, err := q.Insert(ctx, outputArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		job := waitState(t, q, res.Job.ID, rivertype.JobStateCompleted)
		waitState(t, q, after.Job.ID, rivertype.JobStateCompleted)
		var md map[string]json.RawMessage
		if err := json.Unmarshal(job.Metadata, &md); err != nil {
			t.Fatal(err)
		}
		got, want := md["output"], json.RawMessage(nil)
		if c.want != "" {
			var v any
			if err := json.Unmarshal([]byte(c.want), &v); err != nil {
				t.Fatal(err)
			}
			want, _ = json.Marshal(v)
			var g any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("output %s: stored %s, not JSON: %v", c.output, got, err)
			}
			got, _ = json.Marshal(g)
		}
		if string(got) != string(want) {
			t.Errorf("output %s: stored %s; want %s", c.output, got, want)
		}
	}
}
