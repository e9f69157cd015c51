package leases_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestAcquireFromADatabaseThatDoesNotAnswerIsAFailure acquires a lease
// from a server that never answers, as in a network partition that drops
// the database's packets: each attempt hangs rather than fails, and is
// given up after TTL less one Heartbeat. That is an outage, and
// LastFailure says so: the queue's rescuer relies on it after taking the
// maintenance lease.
func TestAcquireFromADatabaseThatDoesNotAnswerIsAFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The server reads and never answers; its connections are closed, and
	// its goroutines waited for, when the test ends.
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	defer func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://u:p@%s/db?sslmode=disable", ln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m := newManager(t, pool, "h", time.Second, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	_, err = m.Acquire(ctx, "blackhole")
	if err == nil {
		t.Fatal("Acquire took a lease from a server that never answered")
	}
	if m.LastFailure().IsZero() {
		t.Error("6s of a database that never answered left LastFailure zero")
	}
}
