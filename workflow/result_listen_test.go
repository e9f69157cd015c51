package workflow_test

import (
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Result misses no run that finishes while its waiter's connection is
// still being opened: with a poll longer than the test's deadline, only a
// notification, or the wake-up of every waiter once the connection
// listens, can end each wait. The run finishes a few milliseconds after
// Result is called, when the connection of a process that waited on no run
// before is most likely not yet listening.
func TestResultMissesNoFinishWhileItStartsToListen(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	wf := workflow.Define("listen_race", func(t *workflow.Task, _ struct{}) (int, error) {
		entered <- struct{}{}
		select {
		case <-release:
			return 1, nil
		case <-t.Context().Done():
			return 0, t.Context().Err()
		}
	})
	cfg := testConfig(wf)
	cfg.ResultPollInterval = time.Hour
	eng := startEngine(t, pool, cfg)
	for i := range 20 {
		ctx := ctxTimeout(t, 30*time.Second)
		run, err := wf.Start(ctx, eng, struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatalf("wait %d: the run did not start", i)
		}
		waitFor(t, "the listener of the earlier wait to close", 20*time.Second, func() bool { return !listening(t, pool) })
		got := make(chan error, 1)
		go func() {
			_, err := run.Result(ctx)
			got <- err
		}()
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		release <- struct{}{}
		if err := <-got; err != nil {
			t.Fatalf("wait %d: Result = %v; want the run's output, notified", i, err)
		}
	}
}
