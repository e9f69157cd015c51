package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/listen"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// Channels the hub listens on: a run finished (payload: its ID), a job
// reported progress (payload: queue.JobProgress as JSON), a schedule or
// recurring job changed.
const (
	channelRunFinished = workflow.RunFinishedChannel
	channelProgress    = queue.ProgressChannel
	channelScheduler   = scheduler.NotifyChannel
)

// TickInterval is how often the event stream sends a tick. A page refreshes
// what it shows on a tick, so changes that no NOTIFY announces (a run that
// starts or suspends, a job that changes state) reach it within a second.
const TickInterval = time.Second

// Event is one message of the event stream (GET /api/events), sent as a
// Server-Sent Event whose event name is Type and whose data is Data.
//
//   - "run": a run finished; data {"id": run ID}.
//   - "progress": a job reported progress; data is queue.JobProgress.
//   - "schedule": a schedule or recurring job changed; data {}.
//   - "tick": sent every TickInterval; data {"at": server time}.
type Event struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// EventsLinger is how long the LISTEN connection of the event stream stays
// open after the last stream ends. A page reload, or a browser reconnecting
// a dropped stream (the stream asks it to wait a second), finds the
// connection still open instead of having it closed and another opened at
// once; past it, a server whose dashboards are all closed holds no
// connection.
const EventsLinger = 5 * time.Second

// hub holds one LISTEN connection for the whole server and fans its
// notifications out to the open event streams. It opens the connection
// with the first stream, reconnects after a lost connection, and closes it
// once no stream has been open for its linger (EventsLinger); the next
// stream opens it again.
type hub struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu     sync.Mutex
	subs   map[chan Event]struct{}
	linger time.Duration
	// cancel stops the running listener; nil when none runs. A stopped
	// listener may still be closing its connection: the next stream does
	// not wait for it, but starts a listener of its own.
	cancel context.CancelFunc
	// idle closes the listener when the linger passes with no stream;
	// nil unless it is pending. idleGen tells a pending timer from one
	// that was stopped too late to keep its function from running.
	idle    *time.Timer
	idleGen uint64
	closed  bool
	// wg counts the listeners, running or closing, and the idle timer's
	// function, pending or running: close waits for them all.
	wg sync.WaitGroup
}

func newHub(pool *pgxpool.Pool, log *slog.Logger) *hub {
	return &hub{pool: pool, log: log, subs: map[chan Event]struct{}{}, linger: EventsLinger}
}

// subscribe returns a channel of events and a function that ends the
// subscription. It returns nil once the hub is closed.
func (h *hub) subscribe() (chan Event, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, func() {}
	}
	ch := make(chan Event, 64)
	h.subs[ch] = struct{}{}
	h.stopIdle()
	if h.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.listen(ctx)
		}()
	}
	return ch, func() { h.unsubscribe(ch) }
}

// unsubscribe ends ch's subscription. The last one to leave starts the
// linger, after which the listener stops.
func (h *hub) unsubscribe(ch chan Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; !ok {
		return // close ended it
	}
	delete(h.subs, ch)
	if len(h.subs) > 0 || h.cancel == nil || h.idle != nil {
		return
	}
	h.idleGen++
	gen := h.idleGen
	h.wg.Add(1)
	h.idle = time.AfterFunc(h.linger, func() {
		defer h.wg.Done()
		h.expire(gen)
	})
}

// stopIdle stops the pending idle timer, if any. h.mu is held.
func (h *hub) stopIdle() {
	if h.idle == nil {
		return
	}
	if h.idle.Stop() {
		h.wg.Done() // its function will not run
	}
	h.idle = nil
}

// expire stops the listener when the linger of the idle timer gen has
// passed with no subscriber. A timer that was stopped, or replaced, after
// it fired does nothing.
func (h *hub) expire(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.idle == nil || h.idleGen != gen {
		return
	}
	h.idle = nil
	if len(h.subs) == 0 && h.cancel != nil {
		// Cancelled under h.mu, the listener publishes nothing more (see
		// publish), and the next subscriber starts a new one.
		h.cancel()
		h.cancel = nil
	}
}

// close stops the listener and waits for it, and closes every
// subscriber's channel, which ends its stream: a server mounted through
// Handler in a caller's http.Server has no request context that Close
// cancels, and the caller's Shutdown waits for the streams to end.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	h.stopIdle()
	if h.cancel != nil {
		h.cancel()
		h.cancel = nil
	}
	for ch := range h.subs {
		close(ch)
		delete(h.subs, ch)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// publish sends ev, received by the listener whose context is ctx, to
// every subscriber; a subscriber whose buffer is full misses it and
// catches up on the next tick. A stopped listener, still closing its
// connection, publishes nothing: its successor's subscribers get their
// events from their own.
func (h *hub) publish(ctx context.Context, ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// listen listens until ctx ends, on a connection of the pool (see package
// listen, which opens it again once lost), and publishes what it hears.
func (h *hub) listen(ctx context.Context) {
	l := &listen.Listener{
		Pool:     h.pool,
		Logger:   h.log,
		Subject:  "admin",
		What:     "live updates",
		Channels: []string{channelRunFinished, channelProgress, channelScheduler},
		Note: func(n *pgconn.Notification) {
			switch n.Channel {
			case channelRunFinished:
				data, _ := json.Marshal(map[string]string{"id": n.Payload})
				h.publish(ctx, Event{Type: "run", Data: data})
			case channelProgress:
				if json.Valid([]byte(n.Payload)) {
					h.publish(ctx, Event{Type: "progress", Data: json.RawMessage(n.Payload)})
				}
			case channelScheduler:
				h.publish(ctx, Event{Type: "schedule", Data: json.RawMessage(`{}`)})
			}
		},
	}
	l.Run(ctx)
}

func (s *Server) routeEvents() {
	s.add(&route{
		Method: "GET", Path: "/api/events", Tag: "events",
		Also:     map[int]string{http.StatusServiceUnavailable: "the server is shutting down"},
		Summary:  "Live updates as Server-Sent Events: run, progress, schedule and tick events",
		Response: Event{},
		Handle:   s.events,
	})
}

// events streams Server-Sent Events until the client goes away.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errorf(http.StatusInternalServerError, "streaming is not supported by this connection")
	}
	if r.Method == http.MethodHead {
		// A HEAD response has no body: answer the stream's headers and
		// end, or the handler would stream into nothing for ever.
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	ch, unsubscribe := s.hub.subscribe()
	defer unsubscribe()
	if ch == nil {
		return errorf(http.StatusServiceUnavailable, "the server is shutting down")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	flusher.Flush()
	tick := time.NewTicker(TickInterval)
	defer tick.Stop()
	for {
		var ev Event
		select {
		case <-r.Context().Done():
			return nil
		case e, ok := <-ch:
			if !ok {
				return nil
			}
			ev = e
		case t := <-tick.C:
			data, _ := json.Marshal(map[string]time.Time{"at": t.UTC()})
			ev = Event{Type: "tick", Data: data}
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, compact(ev.Data)); err != nil {
			return nil
		}
		flusher.Flush()
	}
}

// compact puts JSON on one line, as an SSE data field needs.
func compact(b json.RawMessage) []byte {
	var out []byte
	buf := make([]byte, 0, len(b))
	out = append(buf, b...)
	for i, c := range out {
		if c == '\n' || c == '\r' {
			out[i] = ' '
		}
	}
	return out
}
