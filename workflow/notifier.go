package workflow

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/listen"
)

// notifier shares one LISTEN connection among every Run.Result and
// GetEvent waiting in this process. The connection is opened with the
// first waiter and closed when the last one leaves, so a process that
// waits on no run holds no connection, and Engine.Stop ends it at once.
// It listens on the channels of finished runs and of run events, whose
// payload is a run ID.
//
// No wake-up is lost: a waiter subscribes before it reads the run's
// state, and every waiter is woken, to read it again, each time the
// connection starts to listen (see wakeAll), so a change made before the
// LISTEN took effect is read and one made after it is notified. Waiters
// also poll, which covers a connection that cannot be opened.
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
	l := &listen.Listener{
		Pool:     n.pool,
		Logger:   n.logger,
		Subject:  "workflow",
		What:     "finished runs and run events",
		Channels: notifierChannels,
		Ready:    n.wakeAll,
		Note:     n.wake,
	}
	l.Run(ctx)
}

// wake wakes the waiters of note's channel and run.
func (n *notifier) wake(note *pgconn.Notification) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs[notifierKey{channel: note.Channel, runID: note.Payload}] {
		nudge(ch)
	}
}

// wakeAll wakes every waiter, once the connection listens: a waiter that
// subscribed before then may have read the run's state before it changed
// and missed the notification of the change, sent while nothing listened.
// Woken, it reads the state again, after LISTEN took effect, and so sees
// the change or is notified of it.
func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, chs := range n.subs {
		for ch := range chs {
			nudge(ch)
		}
	}
}

// nudge sends on ch, a channel of capacity one, unless a wake-up waits
// there already.
func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
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
