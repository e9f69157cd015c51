package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// EnvWorker is set in a worker process's environment, to its settings as
// JSON. A program that can serve as the worker checks IsWorker first thing
// and runs WorkerMain.
const EnvWorker = "BRAID_CHAOS_WORKER"

// Timing of the workers, short so that faults are noticed in seconds.
const (
	turnHeartbeat   = 300 * time.Millisecond
	heartbeatMisses = 3
	rescueCheck     = 250 * time.Millisecond
	leaseTTL        = 2 * time.Second
	leaseHeartbeat  = 400 * time.Millisecond
	delayPoll       = 200 * time.Millisecond
)

// rescueWindow is the longest a turn whose process stopped can stay
// unrescued, when the maintenance leader is alive.
const rescueWindow = heartbeatMisses*turnHeartbeat + rescueCheck

// workerSettings is what the coordinator tells a worker.
type workerSettings struct {
	URL   string `json:"url"`
	Slots int    `json:"slots"` // River workers of the default queue
}

// IsWorker reports whether this process was started as a chaos worker.
func IsWorker() bool { return os.Getenv(EnvWorker) != "" }

// WorkerMain is the body of a worker process: it runs an engine with the
// workload until SIGTERM or SIGINT, and returns the exit code. It prints
// "ready" on stdout once the engine has started, and its warnings on
// stderr.
func WorkerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := work(ctx, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker %d: %v\n", os.Getpid(), err)
		return 1
	}
	return 0
}

func work(ctx context.Context, ready io.Writer) error {
	var s workerSettings
	if err := json.Unmarshal([]byte(os.Getenv(EnvWorker)), &s); err != nil {
		return fmt.Errorf("reading %s: %w", EnvWorker, err)
	}
	pc, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(s.Slots + 6)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	ec := pc.Copy()
	ec.MaxConns = int32(s.Slots + 2)
	if effects, err = pgxpool.NewWithConfig(ctx, ec); err != nil {
		return err
	}
	defer effects.Close()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("pid", os.Getpid())
	eng, err := workflow.NewEngine(pool, engineConfig(s.Slots, logger))
	if err != nil {
		return err
	}
	// The server may be restarting: keep trying to start, as a supervised
	// service would.
	for {
		if err = eng.Start(ctx); err == nil {
			break
		}
		logger.Warn("chaos worker: starting the engine; trying again", "error", err)
		if sleep(ctx, 500*time.Millisecond) != nil {
			return nil
		}
	}
	fmt.Fprintln(ready, "ready")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = eng.Stop(stopCtx)
	return nil
}

// engineConfig is the configuration of every engine of the suite: the
// workers', which work turns, and the coordinator's, which only starts,
// cancels and retries runs. They declare the same heartbeats, as the queue
// asks.
func engineConfig(slots int, logger *slog.Logger) *workflow.Config {
	return &workflow.Config{
		Workflows:          definitions(),
		DelayPollInterval:  delayPoll,
		ResultPollInterval: 200 * time.Millisecond,
		TurnHeartbeat:      turnHeartbeat,
		Leases: &leases.Config{
			Holder:    fmt.Sprintf("chaos-%d-%s", os.Getpid(), token()[:8]),
			TTL:       leaseTTL,
			Heartbeat: leaseHeartbeat,
		},
		Queue: &queue.Config{
			Queues:                 map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: slots}},
			RetryPolicy:            retry,
			HeartbeatMisses:        heartbeatMisses,
			HeartbeatCheckInterval: rescueCheck,
		},
		Logger: logger,
	}
}
