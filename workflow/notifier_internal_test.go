package workflow

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/braidflow/braid/internal/testdb"
)

// A waiter that subscribed before the notifier listened is woken once it
// listens, to read the run's state again: a run that finished before the
// LISTEN took effect notified no one, and without this wake-up its waiter
// would sleep until its poll.
func TestNotifierWakesTheWaitersOnceItListens(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	n := newNotifier(pool, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(n.stop)
	for i := range 3 {
		ch, unsubscribe := n.subscribe(uuid.NewString())
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("subscription %d: not woken 30s after it subscribed, with nothing notified; want it woken once the notifier listens", i)
		}
		unsubscribe()
	}
}
