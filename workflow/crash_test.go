package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Worker processes for the crash tests: the test binary runs itself with
// envWorker set to a database URL, and works turns until it is killed.
const (
	envWorker   = "BRAID_TEST_WORKER_DATABASE_URL"
	envHang     = "BRAID_TEST_HANG_AT_STEP3"
	envDefaults = "BRAID_TEST_WORKER_DEFAULT_RECOVERY"
	// envKillClaimed makes the worker kill itself (SIGKILL) right after
	// the first batch that claimed a continuation commits, before the
	// continuation's turn starts.
	envKillClaimed = "BRAID_TEST_KILL_BEFORE_CONTINUATION"
	// envKillClaimedWorkflow names a workflow: the worker kills itself
	// right after a batch that claimed a turn of it commits, before the
	// turn starts.
	envKillClaimedWorkflow = "BRAID_TEST_KILL_BEFORE_CLAIMED_TURN_OF"
)

// workerPool is the worker process's pool; step bodies record into its
// ledger.
var workerPool *pgxpool.Pool

func ledgerStep(ctx context.Context, t *workflow.Task, step string) error {
	_, err := workerPool.Exec(ctx, `INSERT INTO ledger (run_id, step, pid) VALUES ($1, $2, $3)`, t.RunID(), step, os.Getpid())
	return err
}

var crashFive = workflow.Define("crash_five", func(t *workflow.Task, _ struct{}) (int, error) {
	total := 0
	for i := 1; i <= 5; i++ {
		v, err := workflow.Step(t, fmt.Sprintf("step%d", i), func(ctx context.Context) (int, error) {
			if err := ledgerStep(ctx, t, fmt.Sprintf("step%d", i)); err != nil {
				return 0, err
			}
			if i == 3 && os.Getenv(envHang) == "1" {
				time.Sleep(time.Hour) // killed here
			}
			return i, nil
		})
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}, workflow.WithRetry(fast))

var crashSleepy = workflow.Define("crash_sleepy", func(t *workflow.Task, d time.Duration) (int, error) {
	if err := t.Delay("nap", d); err != nil {
		return 0, err
	}
	return workflow.Step(t, "after", func(ctx context.Context) (int, error) {
		return os.Getpid(), ledgerStep(ctx, t, "after")
	})
}, workflow.WithRetry(fast))

// hangInStep is a workflow body whose one step hangs when envHang is set,
// and otherwise returns the pid of the process that ran it.
func hangInStep(t *workflow.Task, _ struct{}) (int, error) {
	return workflow.Step(t, "hang", func(ctx context.Context) (int, error) {
		if err := ledgerStep(ctx, t, "hang"); err != nil {
			return 0, err
		}
		if os.Getenv(envHang) == "1" {
			time.Sleep(time.Hour) // killed here
		}
		return os.Getpid(), nil
	})
}

// crashLast hangs in its only attempt; crashLast2 has attempts to spare,
// so that a kill is retried rather than failed.
var (
	crashLast  = workflow.Define("crash_last", hangInStep, workflow.WithMaxAttempts(1))
	crashLast2 = workflow.Define("crash_hang", hangInStep)
)

// crashSnoozed fails its step once, which snoozes the turn without
// spending the attempt, then hangs in the step's second run when envHang
// is set.
var crashSnoozed = workflow.Define("crash_snoozed", func(t *workflow.Task, _ struct{}) (int, error) {
	return workflow.Step(t, "flaky", func(ctx context.Context) (int, error) {
		if err := ledgerStep(ctx, t, "flaky"); err != nil {
			return 0, err
		}
		var runs int
		if err := workerPool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE run_id = $1 AND step = 'flaky'`, t.RunID()).Scan(&runs); err != nil {
			return 0, err
		}
		if runs == 1 {
			return 0, errors.New("first run of the step fails")
		}
		if os.Getenv(envHang) == "1" {
			time.Sleep(time.Hour) // killed here
		}
		return os.Getpid(), nil
	}, workflow.Retry{MaxAttempts: 5, Backoff: queue.Backoff{Strategy: queue.Fixed, Base: 100 * time.Millisecond}})
})

// crashChild and crashParent: the parent starts the child and waits for
// it, so that the batch recording the parent's suspension inserts the
// child's first turn and claims it for the same worker.
var (
	crashChild = workflow.Define("crash_child", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "child", func(ctx context.Context) (int, error) {
			return os.Getpid(), ledgerStep(ctx, t, "child")
		})
	})
	crashParent = workflow.Define("crash_parent", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Go(t, "child", crashChild, struct{}{}).Get()
	})
)

func crashConfig() *workflow.Config {
	cfg := testConfig(crashFive, crashSleepy, crashLast, crashLast2, crashSnoozed, crashChild, crashParent)
	cfg.Workflows = append(cfg.Workflows, dagCrashWorkflows...)
	cfg.Workflows = append(cfg.Workflows, handleDouble, signalCollector)
	cfg.TurnHeartbeat = 200 * time.Millisecond
	if os.Getenv(envDefaults) == "1" {
		// Recovery as shipped: the turn heartbeat, the rescuer and its
		// retry delay at their defaults.
		cfg.TurnHeartbeat = 0
	}
	return cfg
}

// workerMain is the body of a worker process.
func workerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(envWorker))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer pool.Close()
	workerPool = pool
	if os.Getenv(envKillClaimed) == "1" {
		workflow.SetHookBeforeContinuation(func(*rivertype.JobRow) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		})
	}
	if wf := os.Getenv(envKillClaimedWorkflow); wf != "" {
		workflow.SetHookBeforeContinuation(killBeforeClaimedTurnOf(wf))
	}
	eng, err := workflow.NewEngine(pool, crashConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	if err := eng.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	if key := os.Getenv(envStartDouble); key != "" {
		if _, err := handleDouble.Start(ctx, eng, 21, &workflow.StartOpts{IdempotencyKey: key}); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			return 1
		}
	}
	fmt.Println("worker ready")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = eng.Stop(stopCtx)
	return 0
}

// startWorker starts a worker process on url. It is killed when the test
// ends, if still alive.
func startWorker(t *testing.T, url string, hang bool, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envWorker+"="+url), env...)
	if hang {
		cmd.Env = append(cmd.Env, envHang+"=1")
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	return cmd
}

func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = cmd.Process.Wait()
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCrashAfterStepTwoResumesInAnotherProcess(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	eng := newEngine(t, pool, crashConfig())
	ctx := ctxTimeout(t, 90*time.Second)
	run, err := crashFive.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}

	a := startWorker(t, url, true)
	waitFor(t, "step 3 to start after step 2 was recorded", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'step2' AND status = 'completed'`) == 1 &&
			count(t, pool, `SELECT count(*) FROM ledger WHERE step = 'step3'`) == 1
	})
	kill(t, a)

	startWorker(t, url, false)
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != 15 {
		t.Fatalf("output %d, want 15", out)
	}
	for step, limit := range map[string]int{"step1": 1, "step2": 1, "step3": 2, "step4": 1, "step5": 1} {
		n := count(t, pool, `SELECT count(*) FROM ledger WHERE step = $1`, step)
		if n < 1 || n > limit {
			t.Errorf("%s ran %d times, want 1..%d", step, n, limit)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step IN ('step1', 'step2') AND pid <> $1`, a.Process.Pid); n != 0 {
		t.Errorf("steps 1 and 2 ran again in the second process (%d times)", n)
	}
}

func TestDelaySurvivesAWorkerRestart(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	eng := newEngine(t, pool, crashConfig())
	ctx := ctxTimeout(t, 90*time.Second)
	run, err := crashSleepy.Start(ctx, eng, 3*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startWorker(t, url, false)
	waitFor(t, "the delay to start", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'waiting'`) == 1
	})
	kill(t, a)
	b := startWorker(t, url, false)
	pid, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid != b.Process.Pid {
		t.Fatalf("the step after the delay ran in process %d, want the restarted worker %d", pid, b.Process.Pid)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step = 'after'`); n != 1 {
		t.Fatalf("the step after the delay ran %d times", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger l, braid_steps s WHERE s.kind = 'delay' AND l.at < s.resume_at`); n != 0 {
		t.Fatal("the step after the delay ran before resume_at")
	}
}

func TestDelayFiresAfterTheLeaseHolderIsKilled(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	eng := newEngine(t, pool, crashConfig())
	ctx := ctxTimeout(t, 90*time.Second)

	a := startWorker(t, url, false)
	b := startWorker(t, url, false)
	procs := map[int]*exec.Cmd{a.Process.Pid: a, b.Process.Pid: b}
	var holderPID int
	waitFor(t, "a delay processor to take the lease", 30*time.Second, func() bool {
		var holder string
		err := pool.QueryRow(ctx, `SELECT holder FROM braid_leases WHERE name = $1 AND expires_at > now()`, workflow.DelayLease).Scan(&holder)
		if err != nil {
			return false
		}
		for pid := range procs {
			if strings.Contains(holder, "-"+strconv.Itoa(pid)+"-") {
				holderPID = pid
				return true
			}
		}
		return false
	})
	run, err := crashSleepy.Start(ctx, eng, 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delay to start", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'waiting'`) == 1
	})
	kill(t, procs[holderPID])
	pid, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid == holderPID {
		t.Fatalf("the killed lease holder %d ran the step", pid)
	}
	var newHolder string
	if err := pool.QueryRow(ctx, `SELECT holder FROM braid_leases WHERE name = $1`, workflow.DelayLease).Scan(&newHolder); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(newHolder, "-"+strconv.Itoa(holderPID)+"-") {
		t.Fatalf("lease still held by the killed process: %s", newHolder)
	}
	if n := count(t, pool, `SELECT generation FROM braid_leases WHERE name = $1`, workflow.DelayLease); n < 2 {
		t.Fatalf("lease generation %d after a change of holder, want at least 2", n)
	}
}

func TestSIGKILLOnTheLastAttemptFailsTheRun(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	eng := newEngine(t, pool, crashConfig())
	run, err := crashLast.Start(ctxTimeout(t, 5*time.Second), eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startWorker(t, url, true)
	waitFor(t, "the last attempt to start its step", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM ledger WHERE step = 'hang'`) == 1
	})
	startWorker(t, url, false)
	kill(t, a)
	msg := requireFailed(t, pool, eng, run.ID)
	if !strings.Contains(msg, "heartbeat") {
		t.Errorf("task error %q does not say the attempt's heartbeat stopped", msg)
	}
	if pid := retryAndComplete(t, eng, run); pid == a.Process.Pid {
		t.Fatalf("the retried run ran in the killed process")
	}
}

// recoveryBound is how soon, with default settings, a turn whose process
// was killed runs again on another process: three missed heartbeats and
// two seconds.
const recoveryBound = 3*workflow.TurnHeartbeatDefault + 2*time.Second

// testRecoveryAfterKill kills the process running wf's step named step
// and measures, on the database clock, how soon another process runs the
// step again.
func testRecoveryAfterKill(t *testing.T, wf interface {
	Start(context.Context, *workflow.Engine, struct{}, *workflow.StartOpts) (*workflow.Run[int], error)
}, step string, startedRuns int) {
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	// This process holds the maintenance lease (it starts first) and works
	// no turns: its queue is not the turns' queue.
	cfg := crashConfig()
	cfg.Queue.Queues = map[string]river.QueueConfig{"control": {MaxWorkers: 1}}
	cfg.TurnHeartbeat = 0
	eng := startEngine(t, pool, cfg)
	waitFor(t, "this process to hold the maintenance lease", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_leases WHERE name = $1 AND expires_at > now()`, queue.MaintenanceLease) == 1
	})
	ctx := ctxTimeout(t, 90*time.Second)
	a := startWorker(t, url, true, envDefaults+"=1")
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the step to hang", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM ledger WHERE step = $1`, step) == startedRuns
	})
	b := startWorker(t, url, false, envDefaults+"=1")
	kill(t, a)
	var killedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&killedAt); err != nil {
		t.Fatal(err)
	}
	pid, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid != b.Process.Pid {
		t.Fatalf("the step ran again in process %d, want %d", pid, b.Process.Pid)
	}
	var rerunAt time.Time
	if err := pool.QueryRow(ctx, `SELECT min(at) FROM ledger WHERE step = $1 AND pid = $2`, step, b.Process.Pid).Scan(&rerunAt); err != nil {
		t.Fatal(err)
	}
	d := rerunAt.Sub(killedAt)
	t.Logf("the killed turn ran again %s after the kill", d.Round(time.Millisecond))
	if d > recoveryBound {
		t.Fatalf("the killed turn ran again %s after the kill, want within %s", d.Round(time.Millisecond), recoveryBound)
	}
}

func TestKilledTurnRunsAgainWithinThreeHeartbeats(t *testing.T) {
	t.Parallel()
	testRecoveryAfterKill(t, crashLast2, "hang", 1)
}

func TestKilledTurnRunsAgainAfterASnooze(t *testing.T) {
	t.Parallel()
	testRecoveryAfterKill(t, crashSnoozed, "flaky", 2)
}

// A worker dies right after the batch that claimed a continuation (the
// child's first turn) committed, before that turn starts: the claimed turn
// is running in the database with no process working it. The heartbeat
// rescuer takes it back, and another process runs it.
func TestCrashBeforeClaimedContinuationRunsOnAnotherProcess(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	eng := newEngine(t, pool, crashConfig())
	ctx := ctxTimeout(t, 90*time.Second)
	run, err := crashParent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}

	a := startWorker(t, url, false, envKillClaimed+"=1")
	awaitSIGKILL(ctx, t, a, "it never claimed a continuation")

	// The batch committed: the parent waits on its child, whose first turn
	// is claimed (running, attempt 1, by the dead worker) and never started.
	var (
		state       string
		attempt     int
		attemptedBy []string
	)
	err = pool.QueryRow(ctx, `
		SELECT j.state::text, j.attempt, j.attempted_by FROM river_job j
		  JOIN braid_tasks c ON braid_turn_task(j.unique_key, j.args) = c.id AND c.key = 'child'
		 WHERE j.kind = $1`, workflow.TaskKind).Scan(&state, &attempt, &attemptedBy)
	if err != nil {
		t.Fatal(err)
	}
	if state != "running" || attempt != 1 || len(attemptedBy) != 1 {
		t.Fatalf("child's turn is %s at attempt %d by %v; want running at attempt 1, claimed by the dead worker", state, attempt, attemptedBy)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE key = 'root' AND status = 'waiting' AND remaining = 1`); n != 1 {
		t.Fatal("the parent's suspension did not commit with the claim")
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step = 'child'`); n != 0 {
		t.Fatalf("the child ran %d times before the kill; its turn must not have started", n)
	}

	b := startWorker(t, url, false)
	pid, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid != b.Process.Pid {
		t.Fatalf("the child ran in process %d, want the second worker %d", pid, b.Process.Pid)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step = 'child'`); n != 1 {
		t.Fatalf("the child ran %d times, want once", n)
	}
}
