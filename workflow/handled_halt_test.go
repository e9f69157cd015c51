package workflow_test

// A handled failure whose record is refused as the code completes.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// refuseFailedSteps makes every record of a failed step fail.
func refuseFailedSteps(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	execSQL(t, pool, `
		CREATE FUNCTION refuse_failed_step() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.status = 'failed' THEN
		        RAISE EXCEPTION 'refused record of failed step %', NEW.name;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_failed_step BEFORE INSERT ON braid_steps
		    FOR EACH ROW EXECUTE FUNCTION refuse_failed_step();`)
}

// fallbackChild falls back on a failed step and completes.
func fallbackChild(name string) *workflow.Workflow[struct{}, string] {
	return workflow.Define(name, func(t *workflow.Task, _ struct{}) (string, error) {
		if _, err := workflow.Step(t, "lookup", func(context.Context) (string, error) { return "", errors.New("cache down") }); err != nil {
			return "default", nil
		}
		return "cached", nil
	}, workflow.WithMaxAttempts(1))
}

// On its last attempt, a child whose fallback's failure record is refused
// as it completes fails (it does not complete, and nothing is recorded);
// its parent gets a *ChildError from Get, and the run fails with it.
func TestAHaltedCompletionOnTheLastAttemptFailsTheChildAndTheRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	refuseFailedSteps(t, pool)
	child := fallbackChild("halted_halt_child")
	parent := workflow.Define("halted_halt_parent", func(t *workflow.Task, _ struct{}) (string, error) {
		out, err := workflow.Go(t, "c", child, struct{}{}).Get()
		var ce *workflow.ChildError
		if errors.As(err, &ce) {
			return "", err
		}
		return out, err
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(parent, child))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), "refused record") || !strings.Contains(err.Error(), `child "c"`) {
		t.Fatalf("the run's result: %v; want the child's failure to record its step", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND key = 'c' AND status = 'failed'`, run.ID); n != 1 {
		t.Errorf("%d failed children; want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id WHERE k.run_id = $1`, run.ID); n != 0 {
		t.Errorf("%d step records; want none", n)
	}
}

// The same for a DAG node: the node fails, and so does the run.
func TestAHaltedCompletionOfADAGNodeFailsTheRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	refuseFailedSteps(t, pool)
	node := fallbackChild("halted_halt_node")
	after := workflow.Define("halted_halt_after", func(t *workflow.Task, _ struct{}) (string, error) { return "after", nil })
	dag := workflow.DAG[struct{}]("halted_halt_dag", workflow.Node("a", node), workflow.Node("b", after, workflow.After("a")))
	eng := startEngine(t, pool, testConfig(dag, node, after))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := dag.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), `node "a"`) || !strings.Contains(err.Error(), "refused record") {
		t.Fatalf("the run's result: %v; want node a's failure", err)
	}
}
