package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

// replayVersion is the "deployed code" of replayBranchy: 1 or 2.
var replayVersion atomic.Int32

// replayBranchy runs a step named by the code's version for inputs that
// are multiples of ten, then waits on a signal: a deploy of version 2
// diverges exactly the runs that took that branch.
var replayBranchy = workflow.Define("replay_branchy", func(t *workflow.Task, n int) (int, error) {
	if n%10 == 0 {
		name := "tally"
		if replayVersion.Load() == 2 {
			name = "tally-v2"
		}
		if _, err := workflow.Step(t, name, func(context.Context) (int, error) { return n, nil }); err != nil {
			return 0, err
		}
	}
	if _, err := workflow.Step(t, "common", func(context.Context) (int, error) { return n, nil }); err != nil {
		return 0, err
	}
	v, _, err := workflow.WaitSignal[int](t, "go", 0)
	return v, err
})

// TestCheckReplayListsTheRunsThatWouldDiverge: of 100 runs in flight, the
// 10 that recorded a step the new code renames are listed, each with its
// position and both calls; replaying runs no step body and writes
// nothing. With the old code, nothing diverges.
func TestCheckReplayListsTheRunsThatWouldDiverge(t *testing.T) {
	pool := testutil.DB(t)
	replayVersion.Store(1)
	eng := startEngine(t, pool, testConfig(replayBranchy))
	ctx := ctxTimeout(t, 90*time.Second)
	var params []workflow.StartManyParams[int]
	for i := range 100 {
		params = append(params, workflow.StartManyParams[int]{Input: i})
	}
	runs, err := replayBranchy.StartMany(ctx, eng, params)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every run to wait", 60*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == 100
	})
	snapshot := func() string {
		var s string
		if err := pool.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM braid_steps)::text || '/' || (SELECT max(updated_at) FROM braid_tasks)::text || '/' ||
			       (SELECT count(*) FROM river_job)::text || '/' || (SELECT max(updated_at) FROM braid_runs)::text`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()

	rep, err := eng.CheckReplay(ctx, workflow.ReplayFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 100 || len(rep.Divergences) != 0 || len(rep.Problems) != 0 {
		t.Fatalf("with the code the runs recorded: %d runs, %d divergences, %v", rep.Runs, len(rep.Divergences), rep.Problems)
	}

	replayVersion.Store(2) // the code about to be deployed
	t.Cleanup(func() { replayVersion.Store(1) })
	rep, err = eng.CheckReplay(ctx, workflow.ReplayFilter{Workflow: "replay_branchy"})
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for i, r := range runs {
		if i%10 == 0 {
			want = append(want, r.ID)
		}
	}
	for _, d := range rep.Divergences {
		got = append(got, d.RunID)
		if d.Position != 0 || d.Recorded != `step "tally"` || d.Called != `step "tally-v2"` || d.Workflow != "replay_branchy" {
			t.Errorf("divergence %+v, want position 0, recorded step \"tally\", called step \"tally-v2\"", d)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("divergent runs (-want +got):\n%s", diff)
	}
	if rep.Runs != 100 || rep.Tasks != 100 {
		t.Errorf("replayed %d runs and %d tasks, want 100 each", rep.Runs, rep.Tasks)
	}
	if after := snapshot(); after != before {
		t.Errorf("CheckReplay wrote: %s before, %s after", before, after)
	}
	// Only those named runs, with a filter.
	rep, err = eng.CheckReplay(ctx, workflow.ReplayFilter{RunIDs: []string{runs[10].ID, runs[11].ID}})
	if err != nil || rep.Runs != 2 || len(rep.Divergences) != 1 || rep.Divergences[0].RunID != runs[10].ID {
		t.Errorf("CheckReplay of two runs: %+v, %v", rep, err)
	}
	if _, err := eng.CheckReplay(ctx, workflow.ReplayFilter{RunIDs: []string{"nope"}}); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("CheckReplay of a bad run ID: %v", err)
	}
}

// TestReplayOfAnExportedRun: a completed run, exported, replays against
// the code that made it; against code that renames a step, the replay
// names the position; against code that adds a call after the last, it
// diverges there too.
func TestReplayOfAnExportedRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	// mk is the code: steps, a delay "nap" (written "nap" among them),
	// steps.
	mk := func(calls ...string) *workflow.Workflow[int, int] {
		return workflow.Define("replay_exported", func(t *workflow.Task, n int) (int, error) {
			for _, s := range calls {
				if s == "nap" {
					if err := t.Delay("nap", time.Millisecond); err != nil {
						return 0, err
					}
					continue
				}
				v, err := workflow.Step(t, s, func(context.Context) (int, error) { return n + 1, nil })
				if err != nil {
					return 0, err
				}
				n = v
			}
			return n, nil
		})
	}
	orig := mk("a", "b", "nap")
	eng := startEngine(t, pool, testConfig(orig))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := orig.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 3 {
		t.Fatalf("%d, %v", out, err)
	}
	h, err := workflow.ExportRun(ctx, pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := json.NewEncoder(&buf).Encode(h); err != nil {
		t.Fatal(err)
	}
	h, err = workflow.ReadRunHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		code *workflow.Workflow[int, int]
		want string // "" for no divergence
	}{
		{"same code", mk("a", "b", "nap"), ""},
		{"renamed", mk("a", "c", "nap"), `1: recorded step "b", called step "c"`},
		{"a call inserted", mk("a", "b", "c", "nap"), `2: recorded delay "nap", called step "c"`},
		{"a call added after the last", mk("a", "b", "nap", "c"), `3: recorded no call (the task had completed), called step "c"`},
	} {
		rep, err := workflow.Replay(ctx, h, tc.code)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Tasks != 1 || len(rep.Problems) != 0 {
			t.Errorf("%s: %+v", tc.name, rep)
		}
		switch {
		case tc.want == "" && len(rep.Divergences) != 0:
			t.Errorf("%s: diverged: %v", tc.name, rep.Divergences[0])
		case tc.want != "" && (len(rep.Divergences) != 1 || !strings.Contains(rep.Divergences[0].Error(), "durable call "+tc.want)):
			t.Errorf("%s: %v, want a divergence at durable call %s", tc.name, rep.Divergences, tc.want)
		}
	}
	if _, err := workflow.ReadRunHistory(strings.NewReader(`{"format":"other"}`)); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("a history of another format: %v", err)
	}
}
