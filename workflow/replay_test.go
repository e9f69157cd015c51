package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestReplayRefusesDivergedCode: a run in flight whose code changes
// between its turns (a step renamed, two steps reordered, a delay
// removed) fails its next turn with a *NondeterminismError that names the
// task, the position and both calls, before any step body runs: a ledger
// shows that none ran a second time. With the old code back, Retry
// completes the run, still without running a recorded step again.
func TestReplayRefusesDivergedCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		v1, v2           []string // the calls before the signal "go", in order
		recorded, called string
		position         int
	}{
		{name: "renamed", v1: []string{"step charge"}, v2: []string{"step charge-card"},
			recorded: `step "charge"`, called: `step "charge-card"`, position: 0},
		{name: "reordered", v1: []string{"step a", "step b"}, v2: []string{"step b", "step a"},
			recorded: `step "a"`, called: `step "b"`, position: 0},
		{name: "delay removed", v1: []string{"step a", "delay cool", "step b"}, v2: []string{"step a", "step b"},
			recorded: `delay "cool"`, called: `step "b"`, position: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testutil.DB(t)
			ledger(t, pool)
			var version atomic.Int32
			version.Store(1)
			caught := make(chan error, 10)
			wf := workflow.Define("replay_"+strings.ReplaceAll(tc.name, " ", "_"), func(t *workflow.Task, _ struct{}) (string, error) {
				calls := tc.v1
				if version.Load() == 2 {
					calls = tc.v2
				}
				for _, c := range append(calls, "signal go", "step last") {
					kind, name, _ := strings.Cut(c, " ")
					var err error
					switch kind {
					case "step":
						_, err = workflow.Step(t, name, func(context.Context) (int, error) {
							return 0, recordStep(pool, t, name)
						})
					case "delay":
						err = t.Delay(name, 50*time.Millisecond)
					case "signal":
						_, _, err = workflow.WaitSignal[int](t, name, 0)
					}
					var nd *workflow.NondeterminismError
					if errors.As(err, &nd) {
						caught <- err
						// The code swallows it: the turn fails all the same.
						continue
					}
					if err != nil {
						return "", err
					}
				}
				return "done", nil
			}, workflow.WithMaxAttempts(1))
			eng := startEngine(t, pool, testConfig(wf))
			ctx := ctxTimeout(t, 60*time.Second)
			run, err := wf.Start(ctx, eng, struct{}{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the wait on the signal", 30*time.Second, func() bool {
				return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == 1
			})
			ranBefore := count(t, pool, `SELECT count(*) FROM ledger`)

			version.Store(2) // a deploy while the run waits
			if err := eng.Signal(ctx, run.ID, "go", 1, nil); err != nil {
				t.Fatal(err)
			}
			_, err = run.Result(ctx)
			want := []string{"diverged from its recorded history", fmt.Sprintf("durable call %d:", tc.position),
				"recorded " + tc.recorded, "called " + tc.called, "no step body ran", "retry the run"}
			for _, w := range want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("run error %v; want it to say %q", err, w)
				}
			}
			select {
			case err := <-caught:
				var nd *workflow.NondeterminismError
				if !errors.As(err, &nd) || nd.Position != tc.position || nd.Recorded != tc.recorded || nd.Called != tc.called || nd.RunID != run.ID || nd.TaskID == "" {
					t.Errorf("the call returned %#v", nd)
				}
			default:
				t.Error("no durable call returned a *NondeterminismError")
			}
			if n := count(t, pool, `SELECT count(*) FROM ledger`); n != ranBefore {
				t.Errorf("%d step bodies ran after the change, want none", n-ranBefore)
			}
			if n := count(t, pool, `SELECT count(*) FROM ledger GROUP BY step ORDER BY 1 DESC LIMIT 1`); n != 1 {
				t.Errorf("a step body ran %d times", n)
			}

			// The fix: the old code again. Retry completes the run; no
			// recorded step runs again.
			version.Store(1)
			if err := eng.Retry(ctx, run.ID); err != nil {
				t.Fatal(err)
			}
			if out, err := run.Result(ctx); err != nil || out != "done" {
				t.Fatalf("after the fix and Retry: %q, %v", out, err)
			}
			if n := count(t, pool, `SELECT count(*) FROM ledger`); n != ranBefore+1 {
				t.Errorf("%d step bodies ran after Retry, want 1 (the last step)", n-ranBefore)
			}
		})
	}
}
