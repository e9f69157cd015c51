package testutil_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

var update = flag.Bool("update", false, "rewrite testdata/greeting-run.json from a run of the greeting workflow")

// greeting is the workflow of the fixture testdata/greeting-run.json: a
// step, a child, a delay and a step. politely renames its last step.
func greeting(politely bool) (*workflow.Workflow[string, string], *workflow.Workflow[string, string]) {
	upper := workflow.Define("greeting_upper", func(t *workflow.Task, s string) (string, error) {
		return workflow.Step(t, "upper", func(context.Context) (string, error) { return strings.ToUpper(s), nil })
	})
	g := workflow.Define("greeting", func(t *workflow.Task, name string) (string, error) {
		who, err := workflow.Step(t, "who", func(context.Context) (string, error) { return name, nil })
		if err != nil {
			return "", err
		}
		loud, err := workflow.Go(t, "shout", upper, who).Get()
		if err != nil {
			return "", err
		}
		if err := t.Delay("pause", time.Millisecond); err != nil {
			return "", err
		}
		last := "greet"
		if politely {
			last = "greet-politely"
		}
		return workflow.Step(t, last, func(context.Context) (string, error) { return "hello " + loud, nil })
	})
	return g, upper
}

// recorder is a testing.TB that keeps what Replay reports.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestReplayFixture: a run exported from a real engine replays against
// the code that made it, with no database; the committed fixture fails,
// naming the task and the position, against code that renamed a step.
func TestReplayFixture(t *testing.T) {
	t.Parallel()
	fixture := filepath.Join("testdata", "greeting-run.json")
	g, upper := greeting(false)
	if *update {
		exportRun(t, g, upper, fixture)
	}
	path := filepath.Join(t.TempDir(), "run.json")
	exportRun(t, g, upper, path)
	if rep := testutil.Replay(t, g, path, upper); rep.Tasks != 2 || len(rep.Divergences) != 0 {
		t.Errorf("replay of a fresh export: %+v", rep)
	}
	if rep := testutil.Replay(t, g, fixture, upper); rep.Tasks != 2 {
		t.Errorf("replay of the fixture: %+v", rep)
	}

	polite, upper2 := greeting(true)
	rec := &recorder{TB: t}
	testutil.Replay(rec, polite, fixture, upper2)
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], `diverged at durable call 3: recorded step "greet", called step "greet-politely"`) ||
		!strings.Contains(rec.errors[0], "greeting-run.json") {
		t.Errorf("replay against renamed code reported %q, want one divergence at durable call 3 naming both steps", rec.errors)
	}
}

// exportRun runs g once on a fresh database and writes its history to path.
func exportRun(t *testing.T, g, upper *workflow.Workflow[string, string], path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := testutil.DB(t)
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{g, upper}, DelayPollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = eng.Stop(context.Background()) }()
	run, err := g.Start(ctx, eng, "ada", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "hello ADA" {
		t.Fatalf("%q, %v", out, err)
	}
	h, err := workflow.ExportRun(ctx, pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
