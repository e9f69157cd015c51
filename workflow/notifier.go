package workflow

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifier shares one LISTEN connection among every Run.Result waiting in
// this process. It starts on the first subscription and stops with the
// engine. Waiters also poll, so a lost notification only delays them.
type notifier struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	running bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newNotifier(pool *pgxpool.Pool, logger *slog.Logger) *notifier {
	return &notifier{pool: pool, logger: logger, subs: map[string]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives when runID finishes.
func (n *notifier) subscribe(runID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return ch, func() {}
	}
	if n.subs[runID] == nil {
		n.subs[runID] = map[chan struct{}]struct{}{}
	}
	n.subs[runID][ch] = struct{}{}
	if !n.running {
		n.running = true
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel, n.done = cancel, make(chan struct{})
		go n.listen(ctx, n.done)
	}
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.subs[runID], ch)
		if len(n.subs[runID]) == 0 {
			delete(n.subs, runID)
		}
	}
}

func (n *notifier) listen(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		if err := n.listenOnce(ctx); err != nil && ctx.Err() == nil {
			n.logger.WarnContext(ctx, "workflow: run notifications interrupted; waiters poll meanwhile", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (n *notifier) listenOnce(ctx context.Context) error {
	conn, err := n.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// The connection LISTENs: do not hand it back to the pool.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+channelRunFinished); err != nil {
		return err
	}
	for {
		note, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.mu.Lock()
		for ch := range n.subs[note.Payload] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		n.mu.Unlock()
	}
}

func (n *notifier) stop() {
	n.mu.Lock()
	n.stopped = true
	running, cancel, done := n.running, n.cancel, n.done
	n.running = false
	n.mu.Unlock()
	if running {
		cancel()
		<-done
	}
}
