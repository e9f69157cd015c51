package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/workflow"
)

const (
	// sustainedTick is how often the sustained scenario starts the runs,
	// or inserts the River jobs, that have fallen due, up to startBatch
	// per transaction as in the runs scenario, whose throughput sets the
	// load: smaller transactions would make each start dearer than the
	// ones that throughput was measured with.
	sustainedTick = 100 * time.Millisecond
	// sampleEvery is how often it reads the state and the sizes of the
	// side's tables.
	sampleEvery = time.Second
	// retentionInterval is how often the braid side deletes the runs
	// that outlived the retention (workflow.Config.RetentionInterval).
	retentionInterval = time.Second
	// maxGrowth is the most a table may grow, over the second half of the
	// time after retention applied, as a share of how fast it grew before
	// retention applied (when it kept every row), for it to count as no
	// longer growing: a table at maxGrowth still never gets back the space
	// of one row in twenty. River's own river_job reaches 0.001 in a
	// 10-minute run.
	maxGrowth = 0.05
)

// SustainedResult is a fixed load offered for DurationS seconds: OfferedPerSec
// runs started per second, the ones due every 100 ms started in one
// transaction (several when more than a hundred are due) from four
// goroutines, on the braid side, each run one task of one inline step, and
// as many no-op River jobs inserted per second on the River side. Started
// counts the runs (jobs) started; fewer than OfferedPerSec times DurationS
// means the starts could not keep up. The rate defaults to SustainedLoad times braid's
// throughput of no-op runs (CapacityPerSec). Both sides keep finished work
// for RetentionS seconds only: the braid side deletes finished runs, with
// their tasks, steps and finished turn jobs, every second
// (workflow.Config.Retention and RetentionInterval), and both sides' River
// clients delete completed jobs after as long (River's
// CompletedJobRetentionPeriod, applied by River's job cleaner every 30
// seconds).
//
// Completed counts the runs (jobs) that completed in each window of
// WindowS seconds: the ones started so far less the ones not yet finished,
// read at the window's end, less the previous windows'. Drift is the last
// window's count less the first's, over the first's.
//
// Sizes are pg_total_relation_size of the side's tables (the River side
// has river_job only), read every second: at the start, at the first
// reading after retention applied (RetentionAppliedS: the first reading at
// which the braid side's retention had deleted runs and River's job
// cleaner had deleted the first job; null when that did not happen within
// the scenario), and at the end. Growth is, over the tables, the largest
// ratio of a table's growth rate over the second half of the time after
// retention applied to its growth rate from the start until retention
// applied; Settled says that retention applied and that Growth is at most
// maxGrowth (0.05): every table grows at most a twentieth as fast as it
// did while it kept every row. PostgreSQL reuses the space of deleted rows
// only once a vacuum has visited the table. Autovacuum visits each
// database about once a minute by default, and River's job cleaner deletes
// every 30 seconds, so in a 60-second run the River side's river_job still
// grows after retention applied. The braid side deletes its runs' turn
// jobs with them, every second, and its maintenance loop vacuums a table
// once its new dead rows reach a fifth of its live rows, so that its
// tables can level off within the run. The 10-minute run (Config.Long)
// shows whether they stay level.
//
// CapacityPerSec is braid's throughput of no-op runs the rate was derived
// from, 0 when Sizes.SustainedRate set the rate and the runs scenario did
// not run. Commits are per run (per River job) started, the wait for the
// last ones to complete included.
type SustainedResult struct {
	DurationS      float64 `json:"duration_s"`
	WindowS        float64 `json:"window_s"`
	RetentionS     float64 `json:"retention_s"`
	CapacityPerSec float64 `json:"capacity_per_sec"`
	OfferedPerSec  float64 `json:"offered_per_sec"`

	BraidStarted           int         `json:"braid_started"`
	BraidCompleted         []int       `json:"braid_completed"`
	BraidDrift             float64     `json:"braid_drift"`
	BraidRetentionAppliedS *float64    `json:"braid_retention_applied_s"`
	BraidSizes             SizeSamples `json:"braid_sizes"`
	BraidGrowth            float64     `json:"braid_growth"`
	BraidSettled           bool        `json:"braid_settled"`
	BraidCommitsPerRun     float64     `json:"braid_commits_per_run"`

	RiverStarted           int         `json:"river_started"`
	RiverCompleted         []int       `json:"river_completed"`
	RiverDrift             float64     `json:"river_drift"`
	RiverRetentionAppliedS *float64    `json:"river_retention_applied_s"`
	RiverSizes             SizeSamples `json:"river_sizes"`
	RiverGrowth            float64     `json:"river_growth"`
	RiverSettled           bool        `json:"river_settled"`
	RiverCommitsPerRun     float64     `json:"river_commits_per_run"`
}

// SizeSamples are a side's table sizes at three points of the sustained
// scenario. Retention is null when retention did not apply.
type SizeSamples struct {
	Start     TableSizes  `json:"start"`
	Retention *TableSizes `json:"retention"`
	End       TableSizes  `json:"end"`
}

// TableSizes are table sizes in bytes, indexes and TOAST included. The
// River side has no braid tables.
type TableSizes struct {
	BraidRuns  int64 `json:"braid_runs,omitempty"`
	BraidTasks int64 `json:"braid_tasks,omitempty"`
	BraidSteps int64 `json:"braid_steps,omitempty"`
	RiverJob   int64 `json:"river_job"`
}

// String lists the sizes in kB.
func (t TableSizes) String() string {
	if t.BraidRuns == 0 {
		return fmt.Sprintf("river_job %d kB", t.RiverJob/1024)
	}
	return fmt.Sprintf("braid_runs %d kB, braid_tasks %d kB, braid_steps %d kB, river_job %d kB",
		t.BraidRuns/1024, t.BraidTasks/1024, t.BraidSteps/1024, t.RiverJob/1024)
}

// of returns the size of table, by name.
func (t TableSizes) of(table string) int64 {
	switch table {
	case "braid_runs":
		return t.BraidRuns
	case "braid_tasks":
		return t.BraidTasks
	case "braid_steps":
		return t.BraidSteps
	default:
		return t.RiverJob
	}
}

// Tables whose sizes each side reports.
var (
	braidTables = []string{"braid_runs", "braid_tasks", "braid_steps", "river_job"}
	riverTables = []string{"river_job"}
)

// reading is one reading of a side's state during the sustained scenario.
type reading struct {
	unfinished int // runs or jobs not finished
	failed     int // runs or jobs that failed
	kept       int // runs still stored; -1 on the River side, which has no runs
	firstJob   *int64
	sizes      TableSizes
}

// sizeSample is the sizes read at a time since the start.
type sizeSample struct {
	at    time.Duration
	sizes TableSizes
}

// offered is what one side of the sustained scenario measured.
type offered struct {
	started   int
	completed []int
	applied   time.Duration // -1 when retention did not apply
	samples   []sizeSample
	appliedAt int // index in samples of the first reading after retention applied
	commits   int64
}

// sustained measures a fixed load on each side for Sizes.Sustained.
func (b *bench) sustained(ctx context.Context) (*SustainedResult, error) {
	capacity := b.runsPerSec
	rate := b.sizes.SustainedRate
	if rate == 0 {
		var err error
		if capacity, err = b.capacity(ctx, ScenarioSustained); err != nil {
			return nil, err
		}
		rate = round(SustainedLoad*capacity, 1)
	}
	if rate <= 0 {
		return nil, fmt.Errorf("an offered rate of %g per second", rate)
	}
	windows := int(b.sizes.Sustained / b.sizes.SustainedWindow)
	length := time.Duration(windows) * b.sizes.SustainedWindow
	b.say("sustained: %.1f runs/s (braid's throughput %.1f/s) for %s, windows of %s, retention %s, against as many River jobs",
		rate, capacity, length, b.sizes.SustainedWindow, b.sizes.SustainedRetention)
	res := &SustainedResult{
		DurationS: length.Seconds(), WindowS: b.sizes.SustainedWindow.Seconds(), RetentionS: b.sizes.SustainedRetention.Seconds(),
		CapacityPerSec: capacity, OfferedPerSec: rate,
	}

	river, err := b.riverSustained(ctx, rate, length)
	if err != nil {
		return nil, err
	}
	res.RiverStarted, res.RiverCompleted = river.started, river.completed
	res.RiverDrift = drift(river.completed)
	res.RiverRetentionAppliedS, res.RiverSizes = river.sizeSamples()
	res.RiverGrowth, res.RiverSettled = river.growth(riverTables)
	res.RiverCommitsPerRun = perUnit(river.commits, river.started)
	b.say("sustained: river completed %v per window, drift %.3f, growth %.3f (settled %t), %.2f commits per job",
		river.completed, res.RiverDrift, res.RiverGrowth, res.RiverSettled, res.RiverCommitsPerRun)

	braid, err := b.braidSustained(ctx, rate, length)
	if err != nil {
		return nil, err
	}
	res.BraidStarted, res.BraidCompleted = braid.started, braid.completed
	res.BraidDrift = drift(braid.completed)
	res.BraidRetentionAppliedS, res.BraidSizes = braid.sizeSamples()
	res.BraidGrowth, res.BraidSettled = braid.growth(braidTables)
	res.BraidCommitsPerRun = perUnit(braid.commits, braid.started)
	b.say("sustained: braid completed %v per window, drift %.3f, growth %.3f (settled %t), %.2f commits per run",
		braid.completed, res.BraidDrift, res.BraidGrowth, res.BraidSettled, res.BraidCommitsPerRun)
	return res, nil
}

// drift is the last window's count less the first's, over the first's.
func drift(completed []int) float64 {
	if len(completed) < 2 || completed[0] == 0 {
		return 0
	}
	first, last := float64(completed[0]), float64(completed[len(completed)-1])
	return round((last-first)/first, 3)
}

// sizeSamples returns when retention applied, in seconds since the start
// (nil when it did not), and the sizes at the start, then, and at the end.
func (o *offered) sizeSamples() (*float64, SizeSamples) {
	ss := SizeSamples{Start: o.samples[0].sizes, End: o.samples[len(o.samples)-1].sizes}
	if o.applied < 0 {
		return nil, ss
	}
	at := round(o.samples[o.appliedAt].at.Seconds(), 1)
	sizes := o.samples[o.appliedAt].sizes
	ss.Retention = &sizes
	return &at, ss
}

// growth returns the largest, over tables, of a table's growth rate over
// the second half of the time after retention applied over its growth rate
// until retention applied, and whether retention applied and that largest
// ratio is at most maxGrowth. A table that did not grow before retention
// applied counts as 0 if it did not grow after either, and as +Inf
// otherwise (reported as 0 with settled false).
func (o *offered) growth(tables []string) (float64, bool) {
	if o.applied < 0 {
		return 0, false
	}
	start, applied, end := o.samples[0], o.samples[o.appliedAt], o.samples[len(o.samples)-1]
	// The first reading at or after the middle of the time after
	// retention applied.
	midAt := applied.at + (end.at-applied.at)/2
	mid := end
	for _, smp := range o.samples[o.appliedAt:] {
		if smp.at >= midAt {
			mid = smp
			break
		}
	}
	if end.at <= mid.at || applied.at <= start.at {
		return 0, false
	}
	worst := 0.0
	for _, table := range tables {
		before := float64(applied.sizes.of(table)-start.sizes.of(table)) / (applied.at - start.at).Seconds()
		after := float64(end.sizes.of(table)-mid.sizes.of(table)) / (end.at - mid.at).Seconds()
		var g float64
		switch {
		case after <= 0:
			g = 0
		case before <= 0:
			g = math.Inf(1)
		default:
			g = after / before
		}
		worst = max(worst, g)
	}
	if math.IsInf(worst, 1) {
		return 0, false
	}
	return round(worst, 3), worst <= maxGrowth
}

// offer offers rate units of work per second on side s for length. The
// units fall due evenly; starters goroutines start them, up to startBatch
// per transaction: start opens a transaction, starts n units in it and
// hands it to commit. read reads the side's state, every sampleEvery and at
// the end of every window. Commits and readings exclude each other, so
// that a reading sees exactly the units counted as started. After length,
// offer waits for the units started to complete (done is a waitFor query
// taking the count as $1) and ends the count of commits.
func (b *bench) offer(s *side, rate float64, length time.Duration, start func(n int, commit func(tx pgx.Tx) error) error,
	read func() (reading, error), done string) (*offered, error) {
	o := &offered{applied: -1}
	window := b.sizes.SustainedWindow
	var (
		mu      sync.RWMutex // held to read, shared to commit
		started atomic.Int64 // units committed
	)
	commit := func(n int) func(tx pgx.Tx) error {
		return func(tx pgx.Tx) error {
			mu.RLock()
			defer mu.RUnlock()
			if err := tx.Commit(s.ctx); err != nil {
				return err
			}
			started.Add(int64(n))
			return nil
		}
	}

	var firstJob *int64
	var braidApplied, riverApplied bool
	prevCompleted := 0
	// sample reads the state at elapsed, checks for failures, and records
	// sizes, retention and, at a window's end, the window's completions.
	sample := func(elapsed time.Duration, windowEnd bool) error {
		mu.Lock()
		r, err := read()
		n := int(started.Load())
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s: reading the tables: %w", s.name, err)
		}
		if r.failed > 0 {
			return fmt.Errorf("%w: %s: %d of %d failed", errFailed, s.name, r.failed, n)
		}
		o.samples = append(o.samples, sizeSample{at: elapsed, sizes: r.sizes})
		if r.kept < n {
			braidApplied = true // always on the River side, whose kept is -1
		}
		switch {
		case firstJob == nil:
			firstJob = r.firstJob
		case r.firstJob == nil || *r.firstJob > *firstJob:
			riverApplied = true
		}
		if o.applied < 0 && braidApplied && riverApplied {
			o.applied, o.appliedAt = elapsed, len(o.samples)-1
			s.b.say("sustained: %s: retention applied after %s", s.name, elapsed.Round(100*time.Millisecond))
		}
		if windowEnd {
			completed := n - r.unfinished
			o.completed = append(o.completed, completed-prevCompleted)
			s.b.say("sustained: %s: %d completed in window %d, %d started, sizes %s", s.name, completed-prevCompleted, len(o.completed), n, r.sizes)
			prevCompleted = completed
		}
		return nil
	}

	if err := s.beginCommits(); err != nil {
		return nil, err
	}
	if err := sample(0, false); err != nil {
		return nil, err
	}
	t0 := time.Now()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	batches := make(chan int, 1024)
	var wg sync.WaitGroup
	var startErr error
	var errOnce sync.Once
	for range starters {
		wg.Go(func() {
			for n := range batches {
				if time.Since(t0) >= length || ctx.Err() != nil {
					continue // due too late: the scenario is over
				}
				if err := start(n, commit(n)); err != nil {
					errOnce.Do(func() { startErr = err })
					cancel()
				}
			}
		})
	}
	// Hand out the units as they fall due, and read the state on time.
	dispatched := 0
	nextSample, nextWindow := sampleEvery, window
	tick := time.NewTicker(sustainedTick)
	var err error
	for err == nil {
		elapsed := min(time.Since(t0), length)
		for due := int(rate*elapsed.Seconds()) - dispatched; due > 0; {
			k := min(due, startBatch)
			batches <- k
			dispatched += k
			due -= k
		}
		if elapsed >= nextSample || elapsed >= nextWindow {
			windowEnd := elapsed >= nextWindow
			if err = sample(elapsed, windowEnd); err != nil {
				break
			}
			for nextSample <= elapsed {
				nextSample += sampleEvery
			}
			if windowEnd {
				nextWindow += window
			}
		}
		if elapsed >= length {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%s: %d started: %w", s.name, started.Load(), ctx.Err())
		case <-tick.C:
		}
	}
	tick.Stop()
	close(batches)
	wg.Wait()
	if startErr != nil {
		return nil, fmt.Errorf("%s: starting: %w", s.name, startErr)
	}
	if err != nil {
		return nil, err
	}
	o.started = int(started.Load())
	if offered := int(rate * length.Seconds()); o.started < offered*95/100 {
		s.b.say("sustained: %s: started only %d of the %d offered: the starts could not keep up", s.name, o.started, offered)
	}
	if err := s.waitFor(done, o.started, o.started); err != nil {
		return nil, err
	}
	o.commits, err = s.endCommits()
	return o, err
}

// braidSustained offers rate runs per second, of one task of one inline
// step, to an engine that keeps finished runs for SustainedRetention.
func (b *bench) braidSustained(ctx context.Context, rate float64, length time.Duration) (*offered, error) {
	s, err := b.newSide(ctx, ScenarioSustained, "braid")
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.jobRetention = b.sizes.SustainedRetention
	wf := workflow.Define("bench_sustained", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "step", func(context.Context) (int, error) { return 1, nil })
	})
	eng, err := s.startEngine(&workflow.Config{
		Workflows:         []workflow.Definition{wf},
		Retention:         b.sizes.SustainedRetention,
		RetentionInterval: retentionInterval,
	})
	if err != nil {
		return nil, err
	}
	start := func(n int, commit func(tx pgx.Tx) error) error {
		tx, err := s.pool.Begin(s.ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(s.ctx)) }()
		if _, err := wf.StartManyTx(s.ctx, tx, eng, make([]workflow.StartManyParams[struct{}], n)); err != nil {
			return err
		}
		return commit(tx)
	}
	read := func() (reading, error) {
		var r reading
		s.reads.Add(1)
		err := s.pool.QueryRow(s.ctx, `
			SELECT count(*) FILTER (WHERE status NOT IN ('completed', 'failed', 'cancelled')),
			       count(*) FILTER (WHERE status IN ('failed', 'cancelled')),
			       count(*),
			       (SELECT min(id) FROM river_job),
			       pg_total_relation_size('braid_runs'), pg_total_relation_size('braid_tasks'),
			       pg_total_relation_size('braid_steps'), pg_total_relation_size('river_job')
			  FROM braid_runs`).Scan(&r.unfinished, &r.failed, &r.kept, &r.firstJob,
			&r.sizes.BraidRuns, &r.sizes.BraidTasks, &r.sizes.BraidSteps, &r.sizes.RiverJob)
		return r, err
	}
	const done = `
		SELECT $1::int - count(*) FILTER (WHERE status NOT IN ('completed', 'failed', 'cancelled')),
		       count(*) FILTER (WHERE status IN ('failed', 'cancelled'))
		  FROM braid_runs`
	return b.offer(s, rate, length, start, read, done)
}

// riverSustained offers rate no-op River jobs per second to a River client
// that keeps completed jobs for SustainedRetention.
func (b *bench) riverSustained(ctx context.Context, rate float64, length time.Duration) (*offered, error) {
	s, err := b.newSide(ctx, ScenarioSustained, "river")
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.jobRetention = b.sizes.SustainedRetention
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := s.startRiver(workers)
	if err != nil {
		return nil, err
	}
	start := func(n int, commit func(tx pgx.Tx) error) error {
		tx, err := s.pool.Begin(s.ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(s.ctx)) }()
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := client.InsertManyTx(s.ctx, tx, params); err != nil {
			return err
		}
		return commit(tx)
	}
	read := func() (reading, error) {
		r := reading{kept: -1}
		s.reads.Add(1)
		err := s.pool.QueryRow(s.ctx, `
			SELECT count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded')),
			       count(*) FILTER (WHERE state IN ('discarded', 'cancelled', 'retryable')),
			       min(id), pg_total_relation_size('river_job')
			  FROM river_job`).Scan(&r.unfinished, &r.failed, &r.firstJob, &r.sizes.RiverJob)
		return r, err
	}
	const done = `
		SELECT $1::int - count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded')),
		       count(*) FILTER (WHERE state IN ('discarded', 'cancelled', 'retryable'))
		  FROM river_job`
	return b.offer(s, rate, length, start, read, done)
}
