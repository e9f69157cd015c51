package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/workflow"
)

// riverSchedulerInterval is how often River's scheduler makes scheduled
// jobs available (River's JobSchedulerIntervalDefault). By default the delay
// scenario spreads its starts over one interval, so that River's jobs meet
// its scheduler in every phase, as they would in a service that has been up
// for a while.
const riverSchedulerInterval = 5 * time.Second

// delayIn is the input of a run of the delay scenario.
type delayIn struct {
	Micros int64 `json:"micros"`
}

// delayArgs is the River side's scheduled no-op job, of the delay and
// delay_burst scenarios.
type delayArgs struct {
	I int `json:"i"`
}

func (delayArgs) Kind() string { return "bench_delay" }

type delayWorker struct {
	river.WorkerDefaults[delayArgs]
}

func (delayWorker) Work(context.Context, *river.Job[delayArgs]) error { return nil }

// delay measures the lateness of delays against River's scheduled jobs.
// Lateness is when the work after the wait was fetched minus when it was
// due, on the database clock: the wake turn's attempted_at minus the delay's
// resume_at, and the River job's attempted_at minus its scheduled_at.
func (b *bench) delay(ctx context.Context) (*DelayResult, error) {
	n := b.sizes.Delays
	lengths := make([]time.Duration, n)
	span := b.sizes.DelayMax - b.sizes.DelayMin
	for i := range lengths {
		lengths[i] = b.sizes.DelayMin
		if span > 0 {
			lengths[i] += time.Duration(b.rng.Int64N(int64(span)))
		}
	}
	b.say("delay: %d delays of %s to %s against %d scheduled River jobs, started over %s",
		n, b.sizes.DelayMin, b.sizes.DelayMax, n, b.sizes.DelaySpread)
	res := &DelayResult{N: n, MinMs: ms(b.sizes.DelayMin), MaxMs: ms(b.sizes.DelayMax), SpreadS: b.sizes.DelaySpread.Seconds()}

	riverLate, riverCommits, err := b.riverDelays(ctx, lengths)
	if err != nil {
		return nil, err
	}
	res.RiverP50LateMs, res.RiverP99LateMs, res.RiverCommitsPerRun = lateFigures(riverLate, riverCommits, n)
	b.say("delay: river late p50 %.1f ms, p99 %.1f ms, %.2f commits per job", res.RiverP50LateMs, res.RiverP99LateMs, res.RiverCommitsPerRun)

	braidLate, braidCommits, err := b.braidDelays(ctx, lengths)
	if err != nil {
		return nil, err
	}
	res.BraidP50LateMs, res.BraidP99LateMs, res.BraidCommitsPerRun = lateFigures(braidLate, braidCommits, n)
	b.say("delay: braid late p50 %.1f ms, p99 %.1f ms, %.2f commits per delay", res.BraidP50LateMs, res.BraidP99LateMs, res.BraidCommitsPerRun)
	return res, nil
}

// lateFigures gives a side's lateness percentiles (p50, p99, in ms to
// 0.1) and its commits per unit of n.
func lateFigures(late []float64, commits int64, n int) (p50, p99, commitsPerUnit float64) {
	return round(percentile(late, 50), 1), round(percentile(late, 99), 1), perUnit(commits, n)
}

// paced calls fn(i) for i in [0, n), spread evenly over spread.
func paced(ctx context.Context, n int, spread time.Duration, fn func(i int) error) error {
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(int64(spread) * int64(i) / int64(n)))
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		if err := fn(i); err != nil {
			return err
		}
	}
	return nil
}

// waitLeader waits until query returns true: a leader was elected.
func (s *side) waitLeader(query string) error {
	for {
		var ok bool
		s.reads.Add(1)
		if err := s.pool.QueryRow(s.ctx, query).Scan(&ok); err != nil {
			return fmt.Errorf("%s: waiting for a leader: %w", s.name, err)
		}
		if ok {
			return nil
		}
		select {
		case <-s.ctx.Done():
			return fmt.Errorf("%s: no leader elected: %w", s.name, s.ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// clockOffset returns how far the database clock is ahead of this
// process's, so that a time computed here can be put on the database
// clock, which lateness is read on.
func (s *side) clockOffset() (time.Duration, error) {
	before := time.Now()
	var dbNow time.Time
	s.reads.Add(1)
	if err := s.pool.QueryRow(s.ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		return 0, fmt.Errorf("%s: reading the database clock: %w", s.name, err)
	}
	return dbNow.Sub(before.Add(time.Since(before) / 2)), nil
}

// lateness reads lateness figures, in milliseconds, with query, and ends
// the side's count of commits.
func (s *side) lateness(query string, want int) ([]float64, int64, error) {
	late, err := s.readLateness(query, want)
	if err != nil {
		return nil, 0, err
	}
	commits, err := s.endCommits()
	return late, commits, err
}

// readLateness reads lateness figures, in milliseconds, with query.
func (s *side) readLateness(query string, want int) ([]float64, error) {
	s.reads.Add(1)
	rows, err := s.pool.Query(s.ctx, query)
	if err != nil {
		return nil, err
	}
	late, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return nil, fmt.Errorf("%s: reading lateness: %w", s.name, err)
	}
	if len(late) != want {
		return nil, fmt.Errorf("%s: found the lateness of %d waits, not %d", s.name, len(late), want)
	}
	return late, nil
}

// Queries for waitLeader: the delay processor's lease, and River's leader.
const (
	delayLeader = `SELECT EXISTS (SELECT 1 FROM braid_leases WHERE name = '` + workflow.DelayLease + `' AND expires_at > now())`
	riverLeader = `SELECT EXISTS (SELECT 1 FROM river_leader WHERE expires_at > now())`
)

// wakeLateness reads, on the braid side, the lateness of every delay: the
// start of its task's wake turn, which is the task's last turn job, minus
// its resume_at.
const wakeLateness = `
	WITH wake AS (
	    SELECT DISTINCT ON (braid_turn_task(unique_key, args)) braid_turn_task(unique_key, args) AS task_id, attempted_at
	      FROM river_job WHERE kind = '` + workflow.TaskKind + `'
	     ORDER BY braid_turn_task(unique_key, args), id DESC
	)
	SELECT extract(epoch FROM wake.attempted_at - s.resume_at)::float8 * 1000
	  FROM braid_steps s JOIN wake ON wake.task_id = s.task_id
	 WHERE s.kind = 'delay'`

// scheduledLateness is the query that reads, on the River side, the
// lateness of every job of kind: attempted_at minus scheduled_at.
func scheduledLateness(kind string) string {
	return `
		SELECT extract(epoch FROM attempted_at - scheduled_at)::float8 * 1000
		  FROM river_job WHERE kind = '` + kind + `'`
}

func (b *bench) braidDelays(ctx context.Context, lengths []time.Duration) ([]float64, int64, error) {
	s, err := b.newSide(ctx, ScenarioDelay, "braid")
	if err != nil {
		return nil, 0, err
	}
	defer s.close()
	wait := workflow.Define("bench_delay", func(t *workflow.Task, in delayIn) (struct{}, error) {
		return struct{}{}, t.Delay("wait", time.Duration(in.Micros)*time.Microsecond)
	})
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{wait}})
	if err != nil {
		return nil, 0, err
	}
	if err := s.waitLeader(delayLeader); err != nil {
		return nil, 0, err
	}
	if err := s.beginCommits(); err != nil {
		return nil, 0, err
	}
	err = paced(s.ctx, len(lengths), b.sizes.DelaySpread, func(i int) error {
		_, err := wait.Start(s.ctx, eng, delayIn{Micros: lengths[i].Microseconds()}, nil)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if err := s.waitFor(runsDone, len(lengths)); err != nil {
		return nil, 0, err
	}
	return s.lateness(wakeLateness, len(lengths))
}

func (b *bench) riverDelays(ctx context.Context, lengths []time.Duration) ([]float64, int64, error) {
	s, err := b.newSide(ctx, ScenarioDelay, "river")
	if err != nil {
		return nil, 0, err
	}
	defer s.close()
	workers := river.NewWorkers()
	river.AddWorker(workers, delayWorker{})
	client, err := s.startRiver(workers)
	if err != nil {
		return nil, 0, err
	}
	if err := s.waitLeader(riverLeader); err != nil {
		return nil, 0, err
	}
	// ScheduledAt is computed here, so it is corrected to the database
	// clock, which the lateness is read on.
	offset, err := s.clockOffset()
	if err != nil {
		return nil, 0, err
	}
	if err := s.beginCommits(); err != nil {
		return nil, 0, err
	}
	err = paced(s.ctx, len(lengths), b.sizes.DelaySpread, func(i int) error {
		at := time.Now().Add(offset + lengths[i])
		_, err := client.Insert(s.ctx, delayArgs{I: i}, &river.InsertOpts{ScheduledAt: at})
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if err := s.waitFor(jobsDone, len(lengths)); err != nil {
		return nil, 0, err
	}
	return s.lateness(scheduledLateness(delayArgs{}.Kind()), len(lengths))
}
