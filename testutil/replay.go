package testutil

import (
	"context"
	"os"
	"testing"

	"github.com/braidflow/braid/workflow"
)

// Replay replays the current code of def (and of defs, the workflows of
// its children) against the run history in the file path, as `braid runs
// export ID > run.json` wrote it, with no database: a run from production
// becomes a regression test. Each task whose code makes another durable
// call than its history recorded fails the test, naming the task, the
// position and both calls; so does a task that could not be replayed. No
// step body runs.
func Replay(tb testing.TB, def workflow.Definition, path string, defs ...workflow.Definition) *workflow.ReplayReport {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatalf("testutil: replay: %v", err)
	}
	defer f.Close()
	h, err := workflow.ReadRunHistory(f)
	if err != nil {
		tb.Fatalf("testutil: replay of %s: %v", path, err)
	}
	rep, err := workflow.Replay(context.Background(), h, append([]workflow.Definition{def}, defs...)...)
	if err != nil {
		tb.Fatalf("testutil: replay of %s: %v", path, err)
	}
	for _, d := range rep.Divergences {
		tb.Errorf("testutil: replay of %s: task %s of workflow %q (run %s) diverged at durable call %d: recorded %s, called %s",
			path, d.TaskID, d.Workflow, d.RunID, d.Position, d.Recorded, d.Called)
	}
	for _, p := range rep.Problems {
		tb.Errorf("testutil: replay of %s: task %s (%s): %s", path, p.TaskID, p.Workflow, p.Reason)
	}
	return rep
}
