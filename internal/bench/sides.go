package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// startBatch is how many runs one transaction starts, and how many River
// jobs one InsertMany inserts.
const startBatch = 100

// starters is how many goroutines start runs at once, as the request
// handlers of a service would.
const starters = 4

// pollEvery is how often a side's completion is polled once it is near,
// and so how precisely the end of a measured phase is known.
const pollEvery = 5 * time.Millisecond

// pollMax is the longest pause between two polls of a side's completion.
const pollMax = 100 * time.Millisecond

// side is one side of a scenario: a scratch database and, once started,
// the braid engine or the River client working it.
type side struct {
	b       *bench
	name    string
	db      string
	pool    *pgxpool.Pool
	release func()
	stop    func(context.Context) error
	ctx     context.Context
	cancel  context.CancelFunc

	// jobRetention, when set, is River's CompletedJobRetentionPeriod on
	// this side, for the engine's queue or the River client alike.
	jobRetention time.Duration

	// reads counts the benchmark's own statements on the side's database,
	// so that they are left out of its commits.
	reads atomic.Int64
	// commitsAt and readsAt are the readings of beginCommits.
	commitsAt, readsAt int64
	// profiled is set once the statements were printed.
	profiled bool
}

// newSide creates a scratch database for one side of a scenario.
func (b *bench) newSide(ctx context.Context, scenario, name string) (*side, error) {
	return b.newSideSized(ctx, scenario, name, b.cfg.PoolMaxConns)
}

// newSideSized is newSide with a pool of maxConns connections.
func (b *bench) newSideSized(ctx context.Context, scenario, name string, maxConns int) (*side, error) {
	pool, release, err := b.srv.freshSized(ctx, scenario+"_"+name, maxConns)
	if err != nil {
		return nil, err
	}
	timeout := b.cfg.ScenarioTimeout
	if scenario == ScenarioSustained {
		timeout += b.sizes.Sustained
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	return &side{
		b: b, name: name, db: pool.Config().ConnConfig.Database, pool: pool, release: release,
		ctx: sctx, cancel: cancel,
	}, nil
}

// close stops the engine or client and drops the side's database.
func (s *side) close() {
	s.halt()
	s.cancel()
	s.release()
}

// halt stops the engine or client, if still running, and prints the side's
// costliest statements when Config.Statements asks for them.
func (s *side) halt() {
	if s.stop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.stop(ctx); err != nil {
			s.b.say("%s: stopping: %v", s.name, err)
		}
		cancel()
		s.stop = nil
	}
	if s.b.cfg.Statements > 0 && !s.profiled {
		s.profiled = true
		s.statements()
	}
}

// beginCommits starts counting the transactions the side's database
// commits; endCommits ends the count. It pauses for Config.StatsSettle,
// then runs one statement on every idle connection of the pool, which
// makes its backend publish the counters it held, and reads xact_commit.
func (s *side) beginCommits() error {
	select {
	case <-s.ctx.Done():
		return s.ctx.Err()
	case <-time.After(s.b.cfg.StatsSettle):
	}
	for _, c := range s.pool.AcquireAllIdle(s.ctx) {
		_, err := c.Exec(s.ctx, "SELECT 1")
		c.Release()
		if err != nil {
			return fmt.Errorf("%s: settling statistics: %w", s.name, err)
		}
	}
	n, err := s.b.srv.commits(s.ctx, s.db)
	if err != nil {
		return err
	}
	s.commitsAt, s.readsAt = n, s.reads.Load()
	return nil
}

// endCommits stops the engine or client, closes the side's pool, waits
// until every backend of its database has exited (an exiting backend
// publishes all its counters) and returns the transactions committed since
// beginCommits, less the benchmark's own statements meanwhile.
func (s *side) endCommits() (int64, error) {
	s.halt()
	s.pool.Close()
	if err := s.b.srv.waitGone(s.ctx, s.db); err != nil {
		return 0, err
	}
	n, err := s.b.srv.commits(s.ctx, s.db)
	if err != nil {
		return 0, err
	}
	return n - s.commitsAt - (s.reads.Load() - s.readsAt), nil
}

// perUnit is commits per unit of work, rounded.
func perUnit(commits int64, units int) float64 {
	if units <= 0 {
		return 0
	}
	return round(float64(commits)/float64(units), 3)
}

// queueConfig is the braid side's River configuration. riverConfig gives
// the River side the same.
func (b *bench) queueConfig() *queue.Config {
	return &queue.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: b.cfg.Workers}},
		FetchCooldown:     b.cfg.FetchCooldown,
		FetchPollInterval: b.cfg.FetchPollInterval,
		Logger:            b.logger,
	}
}

func (b *bench) riverConfig(workers *river.Workers) *river.Config {
	return &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: b.cfg.Workers}},
		FetchCooldown:     b.cfg.FetchCooldown,
		FetchPollInterval: b.cfg.FetchPollInterval,
		Workers:           workers,
		Logger:            b.logger,
	}
}

// startEngine builds and starts a braid engine on the side's database.
func (s *side) startEngine(cfg *workflow.Config) (*workflow.Engine, error) {
	c := *cfg
	c.Queue = s.b.queueConfig()
	c.Queue.CompletedJobRetentionPeriod = s.jobRetention
	c.Leases = &leases.Config{Logger: s.b.logger}
	c.Logger = s.b.logger
	eng, err := workflow.NewEngine(s.pool, &c)
	if err != nil {
		return nil, err
	}
	if err := eng.Start(s.ctx); err != nil {
		return nil, err
	}
	s.stop = eng.Stop
	return eng, nil
}

// startRiver builds and starts a raw River client on the side's database.
func (s *side) startRiver(workers *river.Workers) (*river.Client[pgx.Tx], error) {
	rc := s.b.riverConfig(workers)
	rc.CompletedJobRetentionPeriod = s.jobRetention
	client, err := river.NewClient(riverpgxv5.New(s.pool), rc)
	if err != nil {
		return nil, err
	}
	if err := client.Start(s.ctx); err != nil {
		return nil, err
	}
	s.stop = client.Stop
	return client, nil
}

// waitFor polls query, which returns (done, failed) counts, until done
// reaches want. It fails as soon as failed is not zero.
func (s *side) waitFor(query string, want int, args ...any) error {
	start := time.Now()
	for {
		var done, failed int
		s.reads.Add(1)
		if err := s.pool.QueryRow(s.ctx, query, args...).Scan(&done, &failed); err != nil {
			return fmt.Errorf("%s: waiting: %w", s.name, err)
		}
		if failed > 0 {
			return fmt.Errorf("%w: %s: %d of %d failed", errFailed, s.name, failed, want)
		}
		if done >= want {
			return nil
		}
		select {
		case <-s.ctx.Done():
			return fmt.Errorf("%s: %d of %d done: %w", s.name, done, want, s.ctx.Err())
		case <-time.After(nextPoll(time.Since(start), done, want)):
		}
	}
}

// nextPoll is how long waitFor pauses before its next poll, when done of
// want were done after elapsed: a quarter of the time the rest should take
// at the pace so far, between pollEvery and pollMax. A completion poll
// counts every row of the side's table, about 1.5 ms for 10,000 rows, so
// polling every pollEvery throughout would take a third of a core from the
// side it measures; polling fast only near the end keeps the end as
// precise at a small fraction of that cost, the same on both sides.
func nextPoll(elapsed time.Duration, done, want int) time.Duration {
	if done <= 0 || done >= want {
		return pollEvery
	}
	rest := time.Duration(float64(elapsed) * float64(want-done) / float64(done))
	return min(max(rest/4, pollEvery), pollMax)
}

// Completion queries for waitFor.
const (
	runsDone = `SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status IN ('failed', 'cancelled')) FROM braid_runs`
	jobsDone = `SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state IN ('discarded', 'cancelled', 'retryable')) FROM river_job`
)

// parallel runs fn(i) for i in [0, n) on up to workers goroutines and
// returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  int
	)
	for range min(n, workers) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= n || stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// stamps records, by index, when each unit of work began, on the
// monotonic clock.
type stamps struct {
	mu sync.Mutex
	at map[int]time.Time
}

func newStamps() *stamps { return &stamps{at: map[int]time.Time{}} }

// mark records i's time the first time it is marked.
func (s *stamps) mark(i int) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.at[i]; !ok {
		s.at[i] = now
	}
}

func (s *stamps) get(i int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[i]
	return t, ok
}

// percentile returns the p-th percentile (0 < p <= 100) of xs by the
// nearest-rank method.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// round keeps n decimals.
func round(x float64, n int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	p := math.Pow(10, float64(n))
	return math.Round(x*p) / p
}

// ratio is a/b, rounded, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a/b, 3)
}

// statements prints the side's costliest statements.
func (s *side) statements() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.reads.Add(1)
	rows, err := s.pool.Query(ctx, `
		SELECT calls, total_exec_time, mean_exec_time, regexp_replace(query, '\s+', ' ', 'g')
		  FROM pg_stat_statements
		 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		 ORDER BY total_exec_time DESC
		 LIMIT $1`, s.b.cfg.Statements)
	if err != nil {
		s.b.say("%s: reading pg_stat_statements: %v", s.name, err)
		return
	}
	defer rows.Close()
	s.b.say("%s: statements by total execution time (calls, total ms, mean ms, query):", s.name)
	for rows.Next() {
		var calls int64
		var total, mean float64
		var query string
		if err := rows.Scan(&calls, &total, &mean, &query); err != nil {
			s.b.say("%s: reading pg_stat_statements: %v", s.name, err)
			return
		}
		if len(query) > 160 {
			query = query[:160] + "…"
		}
		fmt.Fprintf(s.b.progress, "  %8d %10.1f %8.3f  %s\n", calls, total, mean, query)
	}
	if err := rows.Err(); err != nil {
		s.b.say("%s: reading pg_stat_statements: %v", s.name, err)
	}
}
