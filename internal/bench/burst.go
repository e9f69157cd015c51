package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/workflow"
)

// burstMargin is how many times the expected length of the delay_burst
// scenario's set-up it allows before the delays are due, so that a set-up
// a little slower than the runs scenario's throughput foretold still ends
// in time.
const burstMargin = 1.5

// burstIn is the input of a run of the delay_burst scenario: the instant
// its delay is due, the same for every run.
type burstIn struct {
	At time.Time `json:"at"`
}

// delayBurst measures the lateness of delays all due at one instant,
// against as many River jobs all scheduled at one instant. Lateness is
// read as in the delay scenario: the wake turn's attempted_at minus the
// delay's resume_at, and the River job's attempted_at minus its
// scheduled_at, on the database clock.
func (b *bench) delayBurst(ctx context.Context) (*DelayBurstResult, error) {
	n := b.sizes.BurstDelays
	b.say("delay_burst: %d delays due at one instant against %d River jobs scheduled at one instant", n, n)
	res := &DelayBurstResult{N: n}

	riverLate, riverCommits, err := b.riverBurst(ctx, n)
	if err != nil {
		return nil, err
	}
	res.RiverP50LateMs, res.RiverP99LateMs, res.RiverCommitsPerRun = lateFigures(riverLate, riverCommits, n)
	b.say("delay_burst: river late p50 %.1f ms, p99 %.1f ms, %.2f commits per job", res.RiverP50LateMs, res.RiverP99LateMs, res.RiverCommitsPerRun)

	braidLate, braidCommits, err := b.braidBurst(ctx, n)
	if err != nil {
		return nil, err
	}
	res.BraidP50LateMs, res.BraidP99LateMs, res.BraidCommitsPerRun = lateFigures(braidLate, braidCommits, n)
	b.say("delay_burst: braid late p50 %.1f ms, p99 %.1f ms, %.2f commits per delay", res.BraidP50LateMs, res.BraidP99LateMs, res.BraidCommitsPerRun)
	return res, nil
}

// burstAt returns the instant, on the database clock, at which a burst is
// due: BurstLead after a set-up expected to take setup, allowed
// burstMargin times as long.
func (s *side) burstAt(setup time.Duration) (time.Time, error) {
	offset, err := s.clockOffset()
	if err != nil {
		return time.Time{}, err
	}
	margin := time.Duration(float64(setup) * burstMargin)
	return time.Now().Add(offset + margin + s.b.sizes.BurstLead).UTC().Truncate(time.Microsecond), nil
}

// checkBurstSetup fails when the set-up, expected to take setup, ended
// after the burst was due: some waits would have begun late, and their
// lateness would not be the burst's.
func (s *side) checkBurstSetup(at time.Time, setup time.Duration) error {
	var early bool
	s.reads.Add(1)
	if err := s.pool.QueryRow(s.ctx, `SELECT clock_timestamp() < $1`, at).Scan(&early); err != nil {
		return fmt.Errorf("%s: reading the database clock: %w", s.name, err)
	}
	if !early {
		allowed := time.Duration(float64(setup)*burstMargin) + s.b.sizes.BurstLead
		return fmt.Errorf("%s: the burst's set-up, expected to take %s, took more than the %s allowed, so its waits were due before all had begun",
			s.name, setup.Round(time.Millisecond), allowed.Round(time.Millisecond))
	}
	return nil
}

// braidBurst starts n runs that each delay until one instant, startBatch
// per StartMany from starters goroutines, and returns their lateness
// and the commits from the first start to the last completion. The set-up
// (every run started and its delay set) is expected to take as long as n
// no-op runs at braid's measured throughput; the instant is BurstLead after
// that, with burstMargin to spare.
func (b *bench) braidBurst(ctx context.Context, n int) ([]float64, int64, error) {
	rate, err := b.capacity(ctx, ScenarioDelayBurst)
	if err != nil {
		return nil, 0, err
	}
	setup := time.Duration(float64(n) / rate * float64(time.Second))

	s, err := b.newSide(ctx, ScenarioDelayBurst, "braid")
	if err != nil {
		return nil, 0, err
	}
	defer s.close()
	wait := workflow.Define("bench_burst", func(t *workflow.Task, in burstIn) (struct{}, error) {
		return struct{}{}, t.DelayUntil("wait", in.At)
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
	at, err := s.burstAt(setup)
	if err != nil {
		return nil, 0, err
	}
	batches := (n + startBatch - 1) / startBatch
	err = parallel(batches, starters, func(i int) error {
		params := make([]workflow.StartManyParams[burstIn], min(n, (i+1)*startBatch)-i*startBatch)
		for j := range params {
			params[j].Input = burstIn{At: at}
		}
		_, err := wait.StartMany(s.ctx, eng, params)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	// The set-up ends once every run has set its delay.
	const delaysSet = `
		SELECT (SELECT count(*) FROM braid_steps WHERE kind = 'delay'),
		       (SELECT count(*) FROM braid_runs WHERE status IN ('failed', 'cancelled'))`
	if err := s.waitFor(delaysSet, n); err != nil {
		return nil, 0, err
	}
	if err := s.checkBurstSetup(at, setup); err != nil {
		return nil, 0, err
	}
	if err := s.waitFor(runsDone, n); err != nil {
		return nil, 0, err
	}
	return s.lateness(wakeLateness, n)
}

// riverBurst inserts n River jobs all scheduled at one instant, BurstLead
// after the start of one InsertMany, and returns their lateness and the
// commits from the insert to the last completion.
func (b *bench) riverBurst(ctx context.Context, n int) ([]float64, int64, error) {
	s, err := b.newSide(ctx, ScenarioDelayBurst, "river")
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
	if err := s.beginCommits(); err != nil {
		return nil, 0, err
	}
	at, err := s.burstAt(0)
	if err != nil {
		return nil, 0, err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: delayArgs{I: i}, InsertOpts: &river.InsertOpts{ScheduledAt: at}}
	}
	if _, err := client.InsertMany(s.ctx, params); err != nil {
		return nil, 0, err
	}
	if err := s.checkBurstSetup(at, 0); err != nil {
		return nil, 0, err
	}
	if err := s.waitFor(jobsDone, n); err != nil {
		return nil, 0, err
	}
	return s.lateness(scheduledLateness(delayArgs{}.Kind()), n)
}
