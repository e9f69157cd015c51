package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/workflow"
)

// env is what every scenario shares: the cluster, the coordinator's pool
// and engine, and the workers.
type env struct {
	cfg    Config
	size   size
	cl     *cluster
	pool   *pgxpool.Pool
	eng    *workflow.Engine
	leases *leases.Manager
	fleet  *fleet
}

func (e *env) say(format string, args ...any) {
	fmt.Fprintf(e.cfg.Progress, "chaos: "+format+"\n", args...)
}

// Expectations of a run.
const (
	expectComplete = "complete"
	expectFail     = "fail, then complete on Retry"
)

// tracked is a run the scenario started, and what it expects of it.
type tracked struct {
	id       string
	workflow string
	expect   string
	sum      int // the output's Sum once completed

	failed bool   // it failed, as meant
	why    string // set when it is lost
}

// scene is one scenario in progress: its runs, faults and counters.
type scene struct {
	*env
	name  string
	phase time.Duration

	mu        sync.Mutex
	runs      []*tracked
	fig       Figures
	lastFault time.Time
	deadlocks deadlockMeter
	lost      []LostRun
}

// fault counts an injected fault of the given kind.
func (s *scene) fault(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fig.Faults++
	if s.fig.FaultKinds == nil {
		s.fig.FaultKinds = map[string]int{}
	}
	s.fig.FaultKinds[kind]++
	s.lastFault = time.Now()
}

// opError counts an unexpected error of a coordinator call.
func (s *scene) opError(op string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fig.OpErrors == nil {
		s.fig.OpErrors = map[string]int{}
	}
	s.fig.OpErrors[errKind(op, err)]++
}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// errKind names an error without the IDs in it, so that errors of one
// kind count together.
func errKind(op string, err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %s (SQLSTATE %s)", op, pe.Message, pe.Code)
	}
	msg := uuidPattern.ReplaceAllString(err.Error(), "…")
	if len(msg) > 120 {
		msg = msg[:120] + "…"
	}
	return op + ": " + msg
}

func (s *scene) track(r *tracked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, r)
	s.fig.Started++
}

// snapshot returns the runs started so far.
func (s *scene) snapshot() []*tracked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracked(nil), s.runs...)
}

// start starts a run with a fixed ID, trying again while the server is
// unreachable: starting the same ID twice returns the existing run, so a
// start whose outcome was unknown is never doubled.
func start[In any](ctx context.Context, s *scene, w *workflow.Workflow[In, Out], in In) (string, error) {
	id := uuid.Must(uuid.NewV7()).String()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := w.Start(ctx, s.eng, in, &workflow.StartOpts{ID: id})
		if err == nil {
			return id, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			s.opError("start", err)
			return "", err
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// startFlow starts a chaos_flow run that must complete.
func (s *scene) startFlow(ctx context.Context, in FlowIn) error {
	id, err := start(ctx, s, flow, in)
	if err != nil {
		return err
	}
	s.track(&tracked{id: id, workflow: flowName, expect: expectComplete, sum: in.expectedSum()})
	return nil
}

// startFail starts a run of w that must fail, then complete on Retry.
func (s *scene) startFail(ctx context.Context, w *workflow.Workflow[FailIn, Out], in FailIn) (string, error) {
	id, err := start(ctx, s, w, in)
	if err != nil {
		return "", err
	}
	s.track(&tracked{id: id, workflow: w.Name(), expect: expectFail, sum: failSum})
	return id, nil
}

// randomFlow draws a chaos_flow input of the scenario's size.
func (s *scene) randomFlow(minDelay time.Duration) FlowIn {
	in := FlowIn{
		Children: 1 + rand.IntN(s.size.children),
		WorkMs:   rand.IntN(int(s.size.work/time.Millisecond) + 1),
	}
	if minDelay > 0 || rand.IntN(3) > 0 {
		d := minDelay + time.Duration(rand.Int64N(int64(s.size.delay-minDelay)+1))
		in.DelayMs = int(d / time.Millisecond)
	}
	return in
}

// load starts chaos_flow runs at the scenario's rate for d.
func (s *scene) load(ctx context.Context, d time.Duration, minDelay time.Duration) {
	end := time.Now().Add(d)
	every := time.Duration(float64(time.Second) / s.size.rate)
	for time.Now().Before(end) && ctx.Err() == nil {
		if err := s.startFlow(ctx, s.randomFlow(minDelay)); err != nil && ctx.Err() != nil {
			return
		}
		_ = sleep(ctx, every)
	}
}

// every calls fn n times, spread evenly over d, the last time at its end,
// so that the last fault falls where the load ends and settle_seconds
// measures recovery rather than the tail of the load.
func every(ctx context.Context, d time.Duration, n int, fn func()) {
	gap := d / time.Duration(n)
	for range n {
		if sleep(ctx, gap) != nil {
			return
		}
		fn()
	}
}

// deadlockMeter measures the growth of pg_stat_database.deadlocks. An
// immediate shutdown discards the server's statistics, so a restart
// checkpoints it before the shutdown and rebases it after the start.
type deadlockMeter struct {
	base, acc int64
}

func readDeadlocks(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT coalesce(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

func (m *deadlockMeter) rebase(ctx context.Context, pool *pgxpool.Pool) {
	if n, err := readDeadlocks(ctx, pool); err == nil {
		m.base = n
	}
}

func (m *deadlockMeter) checkpoint(ctx context.Context, pool *pgxpool.Pool) {
	if n, err := readDeadlocks(ctx, pool); err == nil && n > m.base {
		m.acc += n - m.base
		m.base = n
	}
}
