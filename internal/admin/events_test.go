package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
)

// setLinger sets how long the hub keeps its connection after the last
// subscriber leaves.
func (h *hub) setLinger(d time.Duration) {
	h.mu.Lock()
	h.linger = d
	h.mu.Unlock()
}

// subscribers counts the hub's subscribers.
func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// listeners returns the PIDs of the sessions on pool's database that
// listen, idle after their last LISTEN took effect. Nothing in these
// tests listens but the hub.
func listeners(t *testing.T, pool *pgxpool.Pool) []int32 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND state = 'idle' AND query LIKE 'LISTEN %'
ORDER BY pid`)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int32
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return pids
}

// awaitListener waits until exactly one session listens, other than any
// of not, and returns its PID.
func awaitListener(t *testing.T, pool *pgxpool.Pool, not ...int32) int32 {
	t.Helper()
	var pids []int32
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		pids = listeners(t, pool)
		if len(pids) == 1 && !slices.Contains(not, pids[0]) {
			return pids[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("listening sessions %v, want one other than %v", pids, not)
	return 0
}

// awaitNoListener waits until no session listens.
func awaitNoListener(t *testing.T, pool *pgxpool.Pool, within time.Duration, why string) {
	t.Helper()
	var pids []int32
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if pids = listeners(t, pool); len(pids) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("sessions %v still listen %s (waited %s)", pids, why, within)
}

// notifyRun sends the NOTIFY of a finished run with ID id.
func notifyRun(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", channelRunFinished, id); err != nil {
		t.Fatal(err)
	}
}

// sseStream is an open GET /api/events, read line by line.
type sseStream struct {
	runs   chan string // the IDs of "run" events, in order
	cancel context.CancelFunc
	done   chan struct{}
}

// openEvents opens the event stream; it ends when the test does, or at
// close.
func (f *fixture) openEvents() *sseStream {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", f.http.URL+"/api/events", nil)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+readOnlySecret)
	res, err := f.http.Client().Do(req)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		cancel()
		f.t.Fatalf("GET /api/events: status %d", res.StatusCode)
	}
	s := &sseStream{runs: make(chan string, 100), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
				continue
			}
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || event != "run" {
				continue
			}
			var run struct{ ID string }
			if json.Unmarshal([]byte(data), &run) == nil {
				select {
				case s.runs <- run.ID:
				default:
				}
			}
		}
	}()
	f.t.Cleanup(s.close)
	return s
}

// close ends the stream, as a page that goes away does, and waits for its
// reader.
func (s *sseStream) close() {
	s.cancel()
	<-s.done
}

// expectRun waits for the "run" event of id.
func (s *sseStream) expectRun(t *testing.T, id string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-s.runs:
			if got == id {
				return
			}
		case <-s.done:
			t.Fatalf("the stream ended before the event of run %s", id)
		case <-timeout:
			t.Fatalf("no event for run %s", id)
		}
	}
}

// awaitSubscribers waits until the hub has n subscribers: a stream that a
// client closed leaves once its handler notices.
func awaitSubscribers(t *testing.T, h *hub, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.subscribers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the hub has %d subscribers, want %d", h.subscribers(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The LISTEN connection outlives the last stream by the linger only, and
// the next stream opens it again and gets events.
func TestEventsReleaseTheListenConnectionAfterTheLastStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.srv.hub.setLinger(100 * time.Millisecond)

	first := f.openEvents()
	pid := awaitListener(t, f.pool)
	notifyRun(t, f.pool, "first")
	first.expectRun(t, "first")
	first.close()
	awaitNoListener(t, f.pool, 10*time.Second, "after the last stream ended")

	again := f.openEvents()
	awaitListener(t, f.pool, pid)
	notifyRun(t, f.pool, "again")
	again.expectRun(t, "again")
}

// A stream that opens during the linger keeps the connection: the same
// session listens, with no gap, and the linger's end does not close it.
func TestEventsStreamDuringTheLingerReusesTheConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h := f.srv.hub
	h.setLinger(time.Minute)

	first := f.openEvents()
	pid := awaitListener(t, f.pool)
	first.close()
	awaitSubscribers(t, h, 0)
	h.mu.Lock()
	gen, lingering := h.idleGen, h.idle != nil
	h.mu.Unlock()
	if !lingering {
		t.Fatal("the last stream left and no linger began")
	}

	second := f.openEvents()
	awaitSubscribers(t, h, 1)
	// The idle timer fires as the stream arrives, too late to be stopped.
	h.expire(gen)
	notifyRun(t, f.pool, "second")
	second.expectRun(t, "second")
	if got := listeners(t, f.pool); !slices.Equal(got, []int32{pid}) {
		t.Errorf("listening sessions %v, want the first stream's %d still", got, pid)
	}
}

// A subscriber that arrives as the connection closes gets a working
// stream, from a connection of its own.
func TestEventsStreamAsTheConnectionClosesGetsEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h := f.srv.hub
	h.setLinger(time.Minute)

	first := f.openEvents()
	pid := awaitListener(t, f.pool)
	first.close()
	awaitSubscribers(t, h, 0)
	// The linger ends now: the listener stops and starts to close its
	// connection, and the subscriber arrives right then.
	h.mu.Lock()
	idle := h.idle
	if idle != nil {
		idle.Reset(0)
	}
	h.mu.Unlock()
	if idle == nil {
		t.Fatal("the last stream left and no linger began")
	}
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		h.mu.Lock()
		stopped := h.cancel == nil
		h.mu.Unlock()
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the linger ended and the listener did not stop")
		}
	}
	ch, unsubscribe := h.subscribe()
	defer unsubscribe()

	awaitListener(t, f.pool, pid)
	notifyRun(t, f.pool, "second")
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-ch:
			var run struct{ ID string }
			if json.Unmarshal(ev.Data, &run) == nil && run.ID == "second" {
				return
			}
		case <-timeout:
			t.Fatal("the subscriber that arrived as the connection closed got no event")
		}
	}
}

// Streams that come and go around a short linger each get events, however
// their arrival falls against the idle timer and the closing connection,
// and the connection is released at the end.
func TestEventsChurnAroundTheLinger(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	h := newHub(pool, slog.New(slog.DiscardHandler))
	defer h.close()
	h.setLinger(2 * time.Millisecond)
	var seq atomic.Int64
	for i := range 30 {
		ch, unsubscribe := h.subscribe()
		id := fmt.Sprintf("churn-%d", seq.Add(1))
		// Notify until the event comes: a new listener misses what is sent
		// before its LISTEN took effect.
		notify := time.NewTicker(50 * time.Millisecond)
		timeout := time.After(10 * time.Second)
		notifyRun(t, pool, id)
	wait:
		for {
			select {
			case ev := <-ch:
				var run struct{ ID string }
				if json.Unmarshal(ev.Data, &run) == nil && run.ID == id {
					break wait
				}
			case <-notify.C:
				notifyRun(t, pool, id)
			case <-timeout:
				notify.Stop()
				unsubscribe()
				t.Fatalf("subscriber %d: no event", i)
			}
		}
		notify.Stop()
		unsubscribe()
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
	}
	awaitNoListener(t, pool, 10*time.Second, "after the last subscriber left")
}

// A stream outlives the loss of the LISTEN connection: the hub listens
// again, and the open stream gets the events sent after.
func TestEventsSurviveALostListenConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s := f.openEvents()
	pid := awaitListener(t, f.pool)
	var killed bool
	if err := f.pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, killed, err)
	}
	awaitListener(t, f.pool, pid)
	notifyRun(t, f.pool, "after")
	s.expectRun(t, "after")
	if log := f.auditLog(); !strings.Contains(log, "cannot listen for live updates") {
		t.Errorf("the lost connection was not logged:\n%s", log)
	}
}

// Close during the linger closes the connection at once, and the idle
// timer does nothing after.
func TestCloseDuringTheLinger(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h := f.srv.hub
	h.setLinger(time.Minute)
	s := f.openEvents()
	awaitListener(t, f.pool)
	s.close()
	awaitSubscribers(t, h, 0)

	closed := make(chan struct{})
	go func() {
		f.srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the linger")
	}
	awaitNoListener(t, f.pool, 10*time.Second, "after Close")
	h.mu.Lock()
	idle, cancel := h.idle, h.cancel
	h.mu.Unlock()
	if idle != nil || cancel != nil {
		t.Errorf("after Close: idle timer %v, listener %v; want neither", idle != nil, cancel != nil)
	}
	if status, _ := f.do("GET", "/api/events", readOnlySecret, nil); status != http.StatusServiceUnavailable {
		t.Errorf("a stream after Close: status %d, want 503", status)
	}
}

// HEAD is served by every GET route, the event stream's too. Its answer is
// the stream's headers alone, at once: a handler that streamed into a
// HEAD response would never end, and the client's next request on the
// same connection would wait for ever.
func TestHeadOfTheEventStreamEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	// Cleanups run last registered first: end the streams (Server.Close)
	// before the fixture's httptest server waits for its connections.
	t.Cleanup(f.srv.Close)
	client := f.http.Client()
	client.Timeout = 3 * time.Second
	send := func(method, path string) (*http.Response, error) {
		req, err := http.NewRequest(method, f.http.URL+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+readOnlySecret)
		res, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res, nil
	}
	res, err := send("HEAD", "/api/events")
	if err != nil {
		t.Fatalf("HEAD /api/events: %v", err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("HEAD /api/events: %d, %q; want 200 and the stream's content type", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if _, err := send("GET", "/api/config"); err != nil {
		t.Fatalf("GET /api/config after HEAD /api/events on the same connection: %v", err)
	}
}
