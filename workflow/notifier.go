package workflow

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listen opens a dedicated connection, configured as the pool's
// connections are but not taken from the pool, and LISTENs on channel. A
// connection that waits for notifications is held for as long as it
// waits; taking it from the pool would starve the turns of a small pool,
// and would keep pool.Close from returning.
func listen(ctx context.Context, pool *pgxpool.Pool, channel string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// notifier shares one LISTEN connection among every Run.Result waiting in
// this process. The connection is opened with the first waiter and closed
// when the last one leaves, so a process that waits on no run holds no
// connection, and Engine.Stop ends it at once. Waiters also poll, so a
// lost notification only delays them.
type notifier struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	cancel  context.CancelFunc // of the running listener, or nil
	stopped bool
	wg      sync.WaitGroup
}

func newNotifier(pool *pgxpool.Pool, logger *slog.Logger) *notifier {
	return &notifier{pool: pool, logger: logger, subs: map[string]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives when runID finishes, and the
// function that ends the subscription.
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
	if n.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.listen(ctx)
		}()
	}
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.subs[runID], ch)
		if len(n.subs[runID]) == 0 {
			delete(n.subs, runID)
		}
		if len(n.subs) == 0 && n.cancel != nil {
			n.cancel()
			n.cancel = nil
		}
	}
}

func (n *notifier) listen(ctx context.Context) {
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
	conn, err := listen(ctx, n.pool, channelRunFinished)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for {
		note, err := conn.WaitForNotification(ctx)
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

// start lets subscriptions open a listener again after stop.
func (n *notifier) start() {
	n.mu.Lock()
	n.stopped = false
	n.mu.Unlock()
}

// stop ends the listener, if any, and waits for it. Until start, later
// subscriptions get no notifications; their waiters poll.
func (n *notifier) stop() {
	n.mu.Lock()
	n.stopped = true
	if n.cancel != nil {
		n.cancel()
		n.cancel = nil
	}
	n.mu.Unlock()
	n.wg.Wait()
}
