package testdb

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrLinkCut is the error of a connection attempted while a Link is cut.
var ErrLinkCut = errors.New("testdb: link to the database is cut")

// Link stands for the network between one pool and its database server, so
// that a test can cut a process off from the database while other pools
// (other processes) keep working, as a failed switch or a partition would.
// Cut closes every connection made through the Link and fails every new
// one until Restore. The pool sees the broken connections as PostgreSQL
// clients do: statements fail with connection errors.
type Link struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// LinkedPool opens a pool on connString whose connections all go through a
// new Link. The pool is closed when the test ends.
func LinkedPool(tb testing.TB, connString string) (*pgxpool.Pool, *Link) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	if cfg.MaxConns < PoolMaxConnsDefault {
		cfg.MaxConns = PoolMaxConnsDefault
	}
	l := &Link{conns: make(map[net.Conn]struct{})}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if l.isCut() {
			return nil, ErrLinkCut
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return l.track(c)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, l
}

// Cut closes every connection made through l and makes new ones fail
// with ErrLinkCut until Restore.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		_ = c.Close()
		delete(l.conns, c)
	}
}

// Restore lets new connections through again. The connections closed by
// Cut stay closed; the pool replaces them as it would after an outage.
func (l *Link) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
}

func (l *Link) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// track registers c, unless the link was cut while it was being dialled.
func (l *Link) track(c net.Conn) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		_ = c.Close()
		return nil, ErrLinkCut
	}
	l.conns[c] = struct{}{}
	return &linkedConn{Conn: c, l: l}, nil
}

// linkedConn forgets itself when the pool closes it.
type linkedConn struct {
	net.Conn
	l *Link
}

func (c *linkedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c.Conn)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
