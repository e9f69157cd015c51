package workflow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// gather makes one round trip of the requests that concurrent turns of
// this process make at about the same time: a turn hands in its request
// and waits, and whichever of the gather's goroutines is free takes every
// request waiting, up to max, and serves them with one call. Nothing
// lingers: a request that finds a goroutine free is served at once, and
// the requests that arrive while the goroutines are busy wait for the
// next round trip together. Turns load their tasks this way (loader.go),
// and record their steps (steprecord.go).
//
// More than one goroutine serves, so that one slow round trip does not
// hold up every turn of the process.
type gather[Q, A any] struct {
	// serve answers a batch of requests in one round trip, setting each
	// one's answer. An error is every request's.
	serve   func(ctx context.Context, batch []*gathered[Q, A]) error
	timeout time.Duration
	workers int
	in      chan *gathered[Q, A]
	running atomic.Bool

	mu   sync.Mutex
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// gathered is one request and, once done is closed, its answer.
type gathered[Q, A any] struct {
	q    Q
	a    A
	err  error
	done chan struct{}
	// state is gatherQueued until a goroutine takes the request
	// (gatherTaken) or its caller gives up on it first (gatherAbandoned).
	state atomic.Int32
}

// The states of a gathered request.
const (
	gatherQueued int32 = iota
	gatherTaken
	gatherAbandoned
)

func newGather[Q, A any](max, workers int, timeout time.Duration, serve func(context.Context, []*gathered[Q, A]) error) *gather[Q, A] {
	return &gather[Q, A]{serve: serve, timeout: timeout, workers: workers, in: make(chan *gathered[Q, A], max)}
}

func (g *gather[Q, A]) start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	for range g.workers {
		g.wg.Go(func() { g.run(ctx) })
	}
	g.running.Store(true)
}

// halt stops the goroutines. Call it after every turn has returned.
func (g *gather[Q, A]) halt() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stop != nil {
		g.running.Store(false)
		g.stop()
		g.wg.Wait()
		g.stop = nil
	}
}

// call hands in q and returns its answer. ok is false when the gather is
// not running, and the caller makes its round trip alone.
//
// When ctx ends first, a request that no goroutine has taken yet is
// abandoned, and no round trip serves it later; one already taken is
// waited for (its round trip is bounded by the gather's timeout), so that
// nothing the call asked for happens after it returns: a turn that gave
// up on a step's record must not find it written once its task has been
// cancelled and retried.
func (g *gather[Q, A]) call(ctx context.Context, q Q) (a A, ok bool, err error) {
	if !g.running.Load() {
		return a, false, nil
	}
	r := &gathered[Q, A]{q: q, done: make(chan struct{})}
	select {
	case g.in <- r:
	case <-ctx.Done():
		return a, true, context.Cause(ctx)
	}
	select {
	case <-r.done:
		return r.a, true, r.err
	case <-ctx.Done():
		if r.state.CompareAndSwap(gatherQueued, gatherAbandoned) {
			return a, true, context.Cause(ctx)
		}
		<-r.done
		if r.err == nil {
			// Served: its answer holds, though the caller's context
			// ended meanwhile.
			return r.a, true, nil
		}
		return a, true, context.Cause(ctx)
	}
}

// take reports whether a goroutine may serve r: whether its caller has
// not abandoned it.
func (r *gathered[Q, A]) take() bool {
	return r.state.CompareAndSwap(gatherQueued, gatherTaken)
}

func (g *gather[Q, A]) run(ctx context.Context) {
	max := cap(g.in)
	for {
		var batch []*gathered[Q, A]
		select {
		case r := <-g.in:
			if r.take() {
				batch = append(batch, r)
			}
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < max {
			select {
			case r := <-g.in:
				if r.take() {
					batch = append(batch, r)
				}
			default:
				break more
			}
		}
		if len(batch) == 0 {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, g.timeout)
		err := g.serve(sctx, batch)
		cancel()
		for _, r := range batch {
			if err != nil {
				r.err = err
			}
			close(r.done)
		}
	}
}
