package listen_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/braidflow/braid/internal/listen"
	"github.com/braidflow/braid/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// hookedPool opens a pool whose connections are finished by BeforeConnect:
// its configuration alone names a database that does not exist, as a pool
// whose password is a token set by the hook has none of its own. Its
// connections name themselves by AfterConnect.
func hookedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testutil.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	database := cfg.ConnConfig.Database
	cfg.ConnConfig.Database = "no_such_db"
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Database = database
		return nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET application_name = 'hooked'")
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// listening returns the backends of pool's database that listen: idle
// after a LISTEN, with the application name the pool's hook gave them.
func listening(t *testing.T, pool *pgxpool.Pool) []int32 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT pid FROM pg_stat_activity
		 WHERE datname = current_database() AND application_name = 'hooked'
		   AND state = 'idle' AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Listener listens on a connection the pool made, hooks included, and
// hears what is sent on its channels. When its backend is killed it
// listens again, on a new connection, calls Ready again (what was sent
// meanwhile is lost), and hears what is sent after. Once its context ends,
// Run returns with the connection closed and no goroutine left. Not
// parallel, so that goleak sees only this test.
func TestListenerListensThroughThePoolAndAgainOnceLost(t *testing.T) {
	pool := hookedPool(t)
	ignore := goleak.IgnoreCurrent() // the server's and the pool's
	notes := make(chan string, 16)
	var ready atomic.Int32
	l := &listen.Listener{
		Pool: pool, Subject: "test", What: "pings", Channels: []string{"braid_test_ping"},
		Ready: func() { ready.Add(1) },
		Note:  func(n *pgconn.Notification) { notes <- n.Payload },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	ping := func(payload string) {
		t.Helper()
		if _, err := pool.Exec(context.Background(), `SELECT pg_notify('braid_test_ping', $1)`, payload); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-notes:
			if got != payload {
				t.Fatalf("heard %q; want %q", got, payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("did not hear %q", payload)
		}
	}

	waitFor(t, "a listening backend made by the pool's hooks", func() bool { return len(listening(t, pool)) == 1 && ready.Load() == 1 })
	ping("first")
	pid := listening(t, pool)[0]
	if _, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new listening backend", func() bool {
		pids := listening(t, pool)
		return len(pids) == 1 && pids[0] != pid && ready.Load() == 2
	})
	ping("second")
	if st := pool.Stat(); st.AcquiredConns() != 0 {
		t.Errorf("the pool counts %d acquired connections; want the listening one removed from it", st.AcquiredConns())
	}

	cancel()
	<-done
	waitFor(t, "the listening backend to go", func() bool { return len(listening(t, pool)) == 0 })
	goleak.VerifyNone(t, append(testutil.IgnoreGoroutines(), ignore)...)
}
