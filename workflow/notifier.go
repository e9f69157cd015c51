package workflow

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listen LISTENs on channels on a connection taken from the pool and
// then removed from it (Hijack).
//
// The connection is the pool's own rather than one dialled here from a
// copy of the pool's ConnConfig: only the pool runs its hooks
// (BeforeConnect, AfterConnect and whatever the pool gains later), which
// are where a rotating password such as a cloud IAM token, or a
// per-connection setting, is put. A connection dialled from the copy would
// lack them, fail where the pool's succeed, and stop whatever waits on it.
// Removed from the pool, the connection no longer counts against MaxConns,
// so holding it for as long as it waits starves no turn of a small pool,
// and pool.Close does not wait for it; the caller closes it.
func listen(ctx context.Context, pool *pgxpool.Pool, channels ...string) (*pgx.Conn, error) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	for _, channel := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			closeListener(conn)
			return nil, err
		}
	}
	return conn, nil
}

// closeListener closes a connection that listen opened, waiting at most a
// second for the server to hear of it.
func closeListener(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// listenRetryMin and listenRetryMax bound the pause before listening is
// tried again after it failed: the first failure waits listenRetryMin, and
// each one after that twice as long as the one before, up to
// listenRetryMax.
const (
	listenRetryMin = time.Second
	listenRetryMax = 30 * time.Second
)

// listener keeps a connection LISTENing on channels until ctx ends, and
// opens it again whenever it cannot be opened or is lost (a server at its
// connection limit, a proxy that drops idle connections). Those that rely
// on it must never depend on it alone: they poll meanwhile.
type listener struct {
	pool     *pgxpool.Pool
	logger   *slog.Logger
	what     string // what the notifications are for, in the log
	channels []string
	// ready is called each time the connection listens: notifications
	// sent before then were lost, so whoever waits must look again.
	ready func()
	// note is called on each notification.
	note func(*pgconn.Notification)
}

// run listens until ctx ends. The first failure of a streak is logged at
// WARN, the others at DEBUG, and listening again after one at INFO, so
// that a lasting failure neither floods the log nor goes unseen.
func (l *listener) run(ctx context.Context) {
	var pause time.Duration // zero while no failure is in a streak
	for ctx.Err() == nil {
		err := l.once(ctx, func() {
			if pause > 0 {
				l.logger.InfoContext(ctx, "workflow: listening for "+l.what+" again")
			}
			pause = 0
		})
		if ctx.Err() != nil {
			return
		}
		if pause == 0 {
			l.logger.WarnContext(ctx, "workflow: cannot listen for "+l.what+"; polling meanwhile", "error", err)
		} else {
			l.logger.DebugContext(ctx, "workflow: still cannot listen for "+l.what+"; polling meanwhile", "error", err)
		}
		pause = min(max(2*pause, listenRetryMin), listenRetryMax)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// once opens the connection, calls listening and then ready once it
// listens, and listens until the connection fails, returning the error.
func (l *listener) once(ctx context.Context, listening func()) error {
	conn, err := listen(ctx, l.pool, l.channels...)
	if err != nil {
		return err
	}
	defer closeListener(conn)
	listening()
	l.ready()
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.note(note)
	}
}

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
	l := &listener{
		pool:     n.pool,
		logger:   n.logger,
		what:     "finished runs and run events",
		channels: notifierChannels,
		ready:    n.wakeAll,
		note:     n.wake,
	}
	l.run(ctx)
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
