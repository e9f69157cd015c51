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
// connections are but not taken from the pool, and LISTENs on channels. A
// connection that waits for notifications is held for as long as it
// waits; taking it from the pool would starve the turns of a small pool,
// and would keep pool.Close from returning.
func listen(ctx context.Context, pool *pgxpool.Pool, channels ...string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	for _, channel := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return conn, nil
}

// notifier shares one LISTEN connection among every Run.Result and
// GetEvent waiting in this process. The connection is opened with the
// first waiter and closed when the last one leaves, so a process that
// waits on no run holds no connection, and Engine.Stop ends it at once.
// It listens on the channels of finished runs and of run events, whose
// payload is a run ID. Waiters also poll, so a lost notification only
// delays them.
type notifier struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu      sync.Mutex
	subs    map[notifierKey]map[chan struct{}]struct{}
	cancel  context.CancelFunc // of the running listener, or nil
	stopped bool
	wg      sync.WaitGroup
}

// notifierKey is what a waiter waits for: a notification on channel for
// a run.
type notifierKey struct{ channel, runID string }

// notifierChannels are the channels the notifier listens on.
var notifierChannels = []string{channelRunFinished, channelRunEvent}

func newNotifier(pool *pgxpool.Pool, logger *slog.Logger) *notifier {
	return &notifier{pool: pool, logger: logger, subs: map[notifierKey]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives when runID finishes, and the
// function that ends the subscription.
func (n *notifier) subscribe(runID string) (<-chan struct{}, func()) {
	return n.subscribeOn(runID, channelRunFinished)
}

// subscribeOn returns a channel that receives on a notification for runID
// on any of channels, and the function that ends the subscription.
func (n *notifier) subscribeOn(runID string, channels ...string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return ch, func() {}
	}
	keys := make([]notifierKey, len(channels))
	for i, channel := range channels {
		keys[i] = notifierKey{channel: channel, runID: runID}
		if n.subs[keys[i]] == nil {
			n.subs[keys[i]] = map[chan struct{}]struct{}{}
		}
		n.subs[keys[i]][ch] = struct{}{}
	}
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
		for _, k := range keys {
			delete(n.subs[k], ch)
			if len(n.subs[k]) == 0 {
				delete(n.subs, k)
			}
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
	conn, err := listen(ctx, n.pool, notifierChannels...)
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
		for ch := range n.subs[notifierKey{channel: note.Channel, runID: note.Payload}] {
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
