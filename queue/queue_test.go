package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/internal/testdb"
)

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[emailArgs]) error { return nil }))
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"heartbeat too short", Config{Heartbeats: map[string]time.Duration{"email": time.Millisecond}}, `Config.Heartbeats["email"] is 1ms; it must be at least 10ms`},
		{"heartbeat empty kind", Config{Heartbeats: map[string]time.Duration{"": time.Second}}, "empty job kind"},
		{"negative misses", Config{HeartbeatMisses: -1}, "Config.HeartbeatMisses is -1"},
		{"negative check", Config{HeartbeatCheckInterval: -time.Second}, "Config.HeartbeatCheckInterval"},
		{"negative age after", Config{AgeAfter: -time.Second}, "Config.AgeAfter"},
		{"negative age interval", Config{AgeInterval: -time.Second}, "Config.AgeInterval"},
		{"bad backoff", Config{RetryPolicy: Backoff{Base: time.Second, Jitter: 2}}, "Backoff.Jitter is 2"},
		{"bad backoff pointer", Config{RetryPolicy: &Backoff{}}, "Backoff.Base"},
		{"queues without workers", Config{Queues: map[string]river.QueueConfig{"a": {MaxWorkers: 1}}}, "Config.Workers is nil"},
		{"River's own check", Config{Workers: workers, FetchCooldown: time.Second, FetchPollInterval: time.Millisecond}, "configuring River"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(pool, testConfig(&tc.cfg))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(nil, nil); err == nil {
		t.Error("New(nil, nil) succeeded")
	}
	if _, err := New(pool, nil); err != nil {
		t.Errorf("New(pool, nil) = %v; an insert-only Queue needs no config", err)
	}
}
