package workflow_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// silentPool opens a pool on connString whose connections go through a
// wrapper that, the first time a write carries marker, silently drops that
// write and every later one on that connection: the statement never
// reaches the server and no answer ever comes, as when a firewall drops a
// connection's packets mid-statement. Every other connection works. It
// returns the pool, and whether a connection has gone silent.
func silentPool(t *testing.T, connString string, marker string) (*pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 10
	var silenced atomic.Bool
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &silentConn{Conn: c, marker: []byte(marker), silenced: &silenced}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, &silenced
}

// silentConn is a connection of silentPool.
type silentConn struct {
	net.Conn
	marker   []byte
	silenced *atomic.Bool
	mu       sync.Mutex
	silent   bool
}

func (c *silentConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if !c.silent && bytes.Contains(b, c.marker) && c.silenced.CompareAndSwap(false, true) {
		c.silent = true
	}
	silent := c.silent
	c.mu.Unlock()
	// Lost on the way; but for the Terminate that pgx sends as it closes
	// the connection, so that the server hangs up and the close, which
	// waits for that up to 15 s, ends at once.
	if silent && !bytes.Equal(b, []byte{'X', 0, 0, 0, 4}) {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// The delay processor's context ends only with its lease. When the
// connection under one of its statements stops answering, the statement
// gives up within the lease's TTL and the next pass goes on, on another
// connection: delays keep firing, where before the processor waited for
// the kernel to give up on the connection while the lease's renewals, on
// other connections, kept every other process from taking over.
func TestDelayProcessorGivesUpOnASilentConnection(t *testing.T) {
	t.Parallel()
	u := testutil.URL(t)
	direct := testutil.Pool(t, u)
	// The first wake's statement, and that connection, go silent.
	pool, silenced := silentPool(t, u, "fired AS (")
	nap := workflow.Define("silent_nap", func(t *workflow.Task, in int) (int, error) {
		if err := t.Delay("nap", 200*time.Millisecond); err != nil {
			return 0, err
		}
		return in, nil
	})
	eng := startEngine(t, pool, testConfig(nap))
	ctx := ctxTimeout(t, 60*time.Second)
	waitFor(t, "the delay processor's statement to go unanswered", 10*time.Second, silenced.Load)
	run, err := nap.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctxTimeout(t, 20*time.Second)); err != nil || out != 1 {
		var holder string
		var held bool
		_ = direct.QueryRow(ctx, `SELECT holder, expires_at > now() FROM braid_leases WHERE name = $1`, workflow.DelayLease).Scan(&holder, &held)
		t.Fatalf("a run with a delay of 200ms: %d, %v; want it completed (the delay lease is held by %s: %v)", out, err, holder, held)
	}
}

// A DelayUntil beyond the times PostgreSQL stores fails the call with an
// error that names the delay and the range, rather than the turn's
// outcome transaction at every attempt.
func TestDelayUntilOutsideTheTimesPostgreSQLStores(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var at atomic.Value
	far := workflow.Define("far_nap", func(t *workflow.Task, in int) (int, error) {
		if err := t.DelayUntil("far", at.Load().(time.Time)); err != nil {
			return 0, err
		}
		return in, nil
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(far))
	ctx := ctxTimeout(t, 30*time.Second)
	for _, when := range []time.Time{
		time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		at.Store(when)
		run, err := far.Start(ctx, eng, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = run.Result(ctx)
		if err == nil || !strings.Contains(err.Error(), `delay "far" is until`) || !strings.Contains(err.Error(), "outside the times PostgreSQL stores") {
			t.Errorf("a delay until %s: %v; want an error naming the delay and the range", when, err)
		}
	}
	// The ends of the range are kept.
	for _, when := range []time.Time{workflow.DelayUntilMin, time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC)} {
		at.Store(when)
		run, err := far.Start(ctx, eng, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := run.Result(ctx); err != nil || out != 2 {
			t.Errorf("a delay until %s, long past: %d, %v; want it fired at once", when, out, err)
		}
	}
}
