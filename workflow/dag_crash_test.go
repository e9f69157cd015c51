package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// The diamond a → b, c → d, run by worker processes (crashConfig registers
// it) and killed at chosen points. Each node's one step records its run in
// the ledger; b runs after c has completed, so that b's finish is the one
// that releases d; with envHang set, b's step hangs instead.
var (
	dagCrashNodeWF = workflow.Define("dag_crash_node", dagCrashWork, workflow.WithRetry(fast))
	dagCrashA      = workflow.Node("a", dagCrashNodeWF)
	dagCrashB      = workflow.Node("b", dagCrashNodeWF, workflow.After("a"))
	dagCrashC      = workflow.Node("c", dagCrashNodeWF, workflow.After("a"))
	dagCrashJoinWF = workflow.Define("dag_crash_join", func(t *workflow.Task, _ struct{}) (string, error) {
		b, err := dagCrashB.Output(t)
		if err != nil {
			return "", err
		}
		c, err := dagCrashC.Output(t)
		if err != nil {
			return "", err
		}
		return workflow.Step(t, "work", func(ctx context.Context) (string, error) {
			return b + "+" + c, ledgerStep(ctx, t, t.Key())
		})
	}, workflow.WithRetry(fast))
	dagCrashD = workflow.Node("d", dagCrashJoinWF, workflow.After("b", "c"))
	dagCrash  = workflow.DAG[struct{}]("dag_crash", dagCrashA, dagCrashB, dagCrashC, dagCrashD)

	// dagCrashWorkflows are registered with the worker processes.
	dagCrashWorkflows = []workflow.Definition{dagCrash, dagCrashNodeWF, dagCrashJoinWF}
)

// dagCrashWork is the body of the nodes a, b and c: one step that records
// its run and returns the node's name.
func dagCrashWork(t *workflow.Task, _ struct{}) (string, error) {
	return workflow.Step(t, "work", func(ctx context.Context) (string, error) {
		if err := ledgerStep(ctx, t, t.Key()); err != nil {
			return "", err
		}
		if t.Key() != "b" {
			return t.Key(), nil
		}
		if os.Getenv(envHang) == "1" {
			time.Sleep(time.Hour) // killed here
		}
		for {
			var status string
			err := workerPool.QueryRow(ctx, `
				SELECT status FROM braid_tasks WHERE run_id = $1 AND key = 'c' AND dependents IS NOT NULL`, t.RunID()).Scan(&status)
			if err != nil {
				return "", err
			}
			if status == "completed" {
				return t.Key(), nil
			}
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}

// killBeforeClaimedTurnOf returns a hook that kills the worker process
// (SIGKILL) right after a batch that claimed a turn of the workflow wf
// committed, before that turn starts.
func killBeforeClaimedTurnOf(wf string) func(*rivertype.JobRow) {
	return func(row *rivertype.JobRow) {
		var args struct {
			Workflow string `json:"workflow"`
		}
		if json.Unmarshal(row.EncodedArgs, &args) != nil || args.Workflow != wf {
			return
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// awaitSIGKILL waits for the worker to kill itself at its hook.
func awaitSIGKILL(ctx context.Context, t *testing.T, cmd *exec.Cmd, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("worker ended with %v; want it killed by SIGKILL", err)
		}
	case <-ctx.Done():
		t.Fatalf("the worker was never killed: %s", what)
	}
}

// TestDAGSIGKILLMidDiamond kills the worker process running a diamond
// at three points, then lets a second worker process finish the run, and
// checks that no node's recorded step ran again, no node is left blocked
// or pending, and d had exactly one turn, after both b and c.
func TestDAGSIGKILLMidDiamond(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hang bool
		env  []string
		// killed brings the worker down, and checks the state it left.
		killed func(ctx context.Context, t *testing.T, a *exec.Cmd, c *dagCrashCheck)
	}{{
		// b's step runs (its body wrote the ledger, nothing recorded) and
		// c has completed: b's turn must run again, c must not.
		name: "while b's step runs",
		hang: true,
		killed: func(ctx context.Context, t *testing.T, a *exec.Cmd, c *dagCrashCheck) {
			waitFor(t, "b's step to run after c completed", 30*time.Second, func() bool {
				return c.ledger("b") == 1 && c.status("c") == "completed"
			})
			kill(t, a)
			if n := c.recorded("b"); n != 0 {
				t.Fatalf("b's step has %d records before the kill; it hangs, so want none", n)
			}
			if st, rem := c.status("d"), c.remaining("d"); st != "blocked" || rem != 1 {
				t.Fatalf("d is %s with remaining %d at the kill; want blocked on b alone", st, rem)
			}
		},
	}, {
		// The batch that completed b (c completed before it) released d
		// and claimed d's turn for the dying worker: d's turn is running
		// with no process working it.
		name: "after b's batch released d",
		env:  []string{envKillClaimedWorkflow + "=" + dagCrashJoinWF.Name()},
		killed: func(ctx context.Context, t *testing.T, a *exec.Cmd, c *dagCrashCheck) {
			awaitSIGKILL(ctx, t, a, "d's turn was never claimed")
			for _, node := range []string{"a", "b", "c"} {
				if st := c.status(node); st != "completed" {
					t.Fatalf("node %s is %s at the kill; want completed", node, st)
				}
			}
			if st := c.status("d"); st != "pending" {
				t.Fatalf("d is %s at the kill; want pending (released)", st)
			}
			state, attempt := c.turn("d")
			if state != "running" || attempt != 1 {
				t.Fatalf("d's turn is %s at attempt %d; want running at attempt 1, claimed by the dead worker", state, attempt)
			}
			if n := c.ledger("d"); n != 0 {
				t.Fatalf("d's step ran %d times before the kill; its turn must not have started", n)
			}
		},
	}, {
		// The batch that completed a released b and c and claimed one of
		// their turns for the dying worker.
		name: "after a's batch released b and c",
		env:  []string{envKillClaimed + "=1"},
		killed: func(ctx context.Context, t *testing.T, a *exec.Cmd, c *dagCrashCheck) {
			awaitSIGKILL(ctx, t, a, "no turn was claimed")
			if st := c.status("a"); st != "completed" {
				t.Fatalf("a is %s at the kill; want completed", st)
			}
			claimed := 0
			for _, node := range []string{"b", "c"} {
				if st := c.status(node); st != "pending" {
					t.Fatalf("node %s is %s at the kill; want pending (released)", node, st)
				}
				if state, attempt := c.turn(node); state == "running" && attempt == 1 {
					claimed++
				}
			}
			if claimed == 0 {
				t.Fatal("neither b's nor c's turn is claimed at the kill")
			}
			if st, rem := c.status("d"), c.remaining("d"); st != "blocked" || rem != 2 {
				t.Fatalf("d is %s with remaining %d at the kill; want blocked on b and c", st, rem)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := testutil.URL(t)
			pool := testutil.Pool(t, url)
			ledger(t, pool)
			eng := newEngine(t, pool, crashConfig())
			ctx := ctxTimeout(t, 90*time.Second)
			run, err := dagCrash.Start(ctx, eng, struct{}{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := &dagCrashCheck{t: t, pool: pool, runID: run.ID}

			a := startWorker(t, url, tc.hang, tc.env...)
			tc.killed(ctx, t, a, c)
			killedPID := a.Process.Pid
			// What the killed worker recorded, and how often each node's
			// step body ran there.
			recordedBefore, ranBefore := map[string]int{}, map[string]int{}
			for _, node := range c.nodes() {
				recordedBefore[node] = c.recorded(node)
				ranBefore[node] = c.ledger(node)
			}

			startWorker(t, url, false)
			res, err := run.Result(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := dagCrashD.From(res); err != nil || got != "b+c" {
				t.Fatalf("d = %q, %v; want b+c", got, err)
			}

			// Every node completed; nothing in the run is left blocked,
			// pending or unfinished.
			status, _ := nodeStatuses(t, pool, run.ID)
			for _, node := range []string{"a", "b", "c", "d"} {
				if status[node] != "completed" {
					t.Errorf("node %s is %q, want completed", node, status[node])
				}
			}
			if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status NOT IN ('completed')`, run.ID); n != 0 {
				t.Errorf("%d tasks of the run are not completed", n)
			}

			// Each node's step is recorded once. A step recorded before
			// the kill never ran again; one that was not ran at most once
			// in the killed worker and once in the second.
			for _, node := range []string{"a", "b", "c", "d"} {
				if n := c.recorded(node); n != 1 {
					t.Errorf("node %s's step has %d completed records, want 1", node, n)
				}
				killedRuns := count(t, pool, `SELECT count(*) FROM ledger WHERE run_id = $1 AND step = $2 AND pid = $3`, run.ID, node, killedPID)
				laterRuns := c.ledger(node) - killedRuns
				if killedRuns != ranBefore[node] {
					t.Errorf("node %s's step ran %d times in the killed worker, %d at the kill", node, killedRuns, ranBefore[node])
				}
				switch {
				case recordedBefore[node] == 1 && laterRuns != 0:
					t.Errorf("node %s's step was recorded before the kill, yet ran again %d times", node, laterRuns)
				case recordedBefore[node] == 1 && killedRuns != 1:
					t.Errorf("node %s's step was recorded before the kill after %d runs, want 1", node, killedRuns)
				case recordedBefore[node] == 0 && (killedRuns > 1 || laterRuns != 1):
					t.Errorf("node %s's step, unrecorded at the kill, ran %d times before it and %d after; want at most 1 and 1", node, killedRuns, laterRuns)
				}
			}

			// d had one turn, completed, which started after b and c had
			// both finished.
			if n := nodeTurns(t, pool, run.ID, "d"); n != 1 {
				t.Errorf("d had %d turns, want 1", n)
			}
			if state, _ := c.turn("d"); state != string(rivertype.JobStateCompleted) {
				t.Errorf("d's turn is %s, want completed", state)
			}
			if n := count(t, pool, `
				SELECT count(*) FROM braid_tasks dd JOIN braid_tasks m ON m.parent_task_id = dd.parent_task_id AND m.key IN ('b', 'c')
				 WHERE dd.run_id = $1 AND dd.key = 'd' AND dd.started_at >= m.finished_at`, run.ID); n != 2 {
				t.Errorf("d started before %d of b and c finished", 2-n)
			}
		})
	}
}

// dagCrashCheck reads the state of a run of dagCrash.
type dagCrashCheck struct {
	t     *testing.T
	pool  *pgxpool.Pool
	runID string
}

// nodes are the nodes of the diamond.
func (c *dagCrashCheck) nodes() []string { return []string{"a", "b", "c", "d"} }

// status is the node's status.
func (c *dagCrashCheck) status(node string) string {
	c.t.Helper()
	var s string
	if err := c.pool.QueryRow(context.Background(), `
		SELECT status FROM braid_tasks WHERE run_id = $1 AND key = $2 AND dependents IS NOT NULL`, c.runID, node).Scan(&s); err != nil {
		c.t.Fatalf("reading node %s's status: %v", node, err)
	}
	return s
}

// remaining is the node's count of unfinished dependencies.
func (c *dagCrashCheck) remaining(node string) int {
	c.t.Helper()
	return count(c.t, c.pool, `
		SELECT remaining FROM braid_tasks WHERE run_id = $1 AND key = $2 AND dependents IS NOT NULL`, c.runID, node)
}

// recorded counts the completed records of the node's steps.
func (c *dagCrashCheck) recorded(node string) int {
	c.t.Helper()
	return count(c.t, c.pool, `
		SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		 WHERE k.run_id = $1 AND k.key = $2 AND k.dependents IS NOT NULL AND s.status = 'completed'`, c.runID, node)
}

// ledger counts the runs of the node's step body.
func (c *dagCrashCheck) ledger(node string) int {
	c.t.Helper()
	return count(c.t, c.pool, `SELECT count(*) FROM ledger WHERE run_id = $1 AND step = $2`, c.runID, node)
}

// turn is the state and attempt of the node's turn job; the node must
// have exactly one.
func (c *dagCrashCheck) turn(node string) (state string, attempt int) {
	c.t.Helper()
	if err := c.pool.QueryRow(context.Background(), `
		SELECT j.state::text, j.attempt FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND k.key = $2 AND k.dependents IS NOT NULL`, c.runID, node).Scan(&state, &attempt); err != nil {
		c.t.Fatalf("reading node %s's turn: %v", node, err)
	}
	return state, attempt
}
