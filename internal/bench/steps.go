package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/workflow"
)

// stepsIn is the input of a task of the steps scenario.
type stepsIn struct {
	I     int `json:"i"`
	Steps int `json:"steps"`
}

// stepsArgs is the River side's job.
type stepsArgs stepsIn

func (stepsArgs) Kind() string { return "bench_steps" }

// stepsWorker makes as many plain INSERTs as a braid task records steps,
// each its own statement, as a step's record is.
type stepsWorker struct {
	river.WorkerDefaults[stepsArgs]
	pool  *pgxpool.Pool
	marks *stamps
}

func (w *stepsWorker) Work(ctx context.Context, job *river.Job[stepsArgs]) error {
	w.marks.mark(2 * job.Args.I)
	for k := range job.Args.Steps {
		if _, err := w.pool.Exec(ctx, `
			INSERT INTO bench_steps (job_id, name, output) VALUES ($1, $2, $3)
			ON CONFLICT (job_id, name) DO NOTHING`, job.ID, fmt.Sprintf("step#%d", k+1), []byte(fmt.Sprint(k))); err != nil {
			return err
		}
	}
	w.marks.mark(2*job.Args.I + 1)
	return nil
}

// steps measures the throughput of inline steps in tasks made available
// at once (started in one transaction), from the first step's start to the
// last step's end, against River jobs (inserted with one InsertMany) making
// as many plain INSERTs.
func (b *bench) steps(ctx context.Context) (*StepsResult, error) {
	tasks, per := b.sizes.StepTasks, b.sizes.StepsPerTask
	b.say("steps: %d tasks of %d inline steps against %d River jobs of %d INSERTs", tasks, per, tasks, per)
	res := &StepsResult{StepsPerTask: per, Tasks: tasks}

	river, err := b.riverSteps(ctx)
	if err != nil {
		return nil, err
	}
	res.RiverStepsPerSec = round(float64(tasks*per)/river.elapsed.Seconds(), 1)
	res.RiverCommitsPerRun = perUnit(river.commits, tasks*per)
	b.say("steps: river %.0f INSERTs/s, %.2f commits per INSERT", res.RiverStepsPerSec, res.RiverCommitsPerRun)

	braid, err := b.braidSteps(ctx)
	if err != nil {
		return nil, err
	}
	res.BraidStepsPerSec = round(float64(tasks*per)/braid.elapsed.Seconds(), 1)
	res.Ratio = ratio(res.BraidStepsPerSec, res.RiverStepsPerSec)
	res.BraidCommitsPerRun = perUnit(braid.commits, tasks*per)
	b.say("steps: braid %.0f steps/s, ratio %.3f, %.2f commits per step", res.BraidStepsPerSec, res.Ratio, res.BraidCommitsPerRun)
	return res, nil
}

// window is the time from the first start to the last end of n tasks
// stamped at 2i and 2i+1.
func window(marks *stamps, n int) (time.Duration, error) {
	var first, last time.Time
	for i := range n {
		start, ok1 := marks.get(2 * i)
		end, ok2 := marks.get(2*i + 1)
		if !ok1 || !ok2 {
			return 0, fmt.Errorf("task %d was not stamped", i)
		}
		if first.IsZero() || start.Before(first) {
			first = start
		}
		if end.After(last) {
			last = end
		}
	}
	return last.Sub(first), nil
}

// braidSteps returns the steps' window (not the phase's whole time) and
// the phase's commits, from the start of the runs to their completion.
func (b *bench) braidSteps(ctx context.Context) (phase, error) {
	s, err := b.newSide(ctx, ScenarioSteps, "braid")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	marks := newStamps()
	stepper := workflow.Define("bench_steps", func(t *workflow.Task, in stepsIn) (struct{}, error) {
		marks.mark(2 * in.I)
		for k := range in.Steps {
			if _, err := workflow.Step(t, "step", func(context.Context) (int, error) { return k, nil }); err != nil {
				return struct{}{}, err
			}
		}
		marks.mark(2*in.I + 1)
		return struct{}{}, nil
	})
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{stepper}})
	if err != nil {
		return phase{}, err
	}
	if err := s.beginCommits(); err != nil {
		return phase{}, err
	}
	// Every task becomes available at once, as the River side's do.
	n := b.sizes.StepTasks
	err = pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
		for i := range n {
			if _, err := stepper.StartTx(s.ctx, tx, eng, stepsIn{I: i, Steps: b.sizes.StepsPerTask}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return phase{}, err
	}
	if err := s.waitFor(runsDone, n); err != nil {
		return phase{}, err
	}
	return s.endWindow(marks, n)
}

// endWindow ends a side's count of commits and returns it with the window
// of n tasks stamped at 2i and 2i+1.
func (s *side) endWindow(marks *stamps, n int) (phase, error) {
	commits, err := s.endCommits()
	if err != nil {
		return phase{}, err
	}
	w, err := window(marks, n)
	return phase{elapsed: w, commits: commits}, err
}

// riverSteps is braidSteps on the River side.
func (b *bench) riverSteps(ctx context.Context) (phase, error) {
	s, err := b.newSide(ctx, ScenarioSteps, "river")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	if _, err := s.pool.Exec(s.ctx, `
		CREATE TABLE bench_steps (
		    job_id     bigint      NOT NULL,
		    name       text        NOT NULL,
		    output     jsonb,
		    created_at timestamptz NOT NULL DEFAULT now(),
		    PRIMARY KEY (job_id, name)
		)`); err != nil {
		return phase{}, err
	}
	marks := newStamps()
	workers := river.NewWorkers()
	river.AddWorker(workers, &stepsWorker{pool: s.pool, marks: marks})
	client, err := s.startRiver(workers)
	if err != nil {
		return phase{}, err
	}
	if err := s.beginCommits(); err != nil {
		return phase{}, err
	}
	n := b.sizes.StepTasks
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: stepsArgs{I: i, Steps: b.sizes.StepsPerTask}}
	}
	if _, err := client.InsertMany(s.ctx, params); err != nil {
		return phase{}, err
	}
	if err := s.waitFor(jobsDone, n); err != nil {
		return phase{}, err
	}
	return s.endWindow(marks, n)
}
