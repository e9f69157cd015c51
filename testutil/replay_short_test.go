package testutil_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestReplayRefusesCodeThatReturnsBeforeItsRecordedCalls replays the
// committed fixture (who, Go shout, delay pause, step greet; completed)
// against code that no longer makes the last call: it returns after the
// delay. The code takes another path than the run recorded, so Replay
// fails, naming the call, as it does for a call added after the last one.
func TestReplayRefusesCodeThatReturnsBeforeItsRecordedCalls(t *testing.T) {
	t.Parallel()
	_, upper := greeting(false)
	short := workflow.Define("greeting", func(t *workflow.Task, name string) (string, error) {
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
		return "hi " + loud, nil // step "greet" dropped
	})
	rec := &recorder{TB: t}
	rep := testutil.Replay(rec, short, filepath.Join("testdata", "greeting-run.json"), upper)
	if len(rec.errors) == 0 {
		t.Errorf("Replay passed code that drops the recorded step \"greet\" (durable call 3): report %+v", rep)
	}
	for _, e := range rec.errors {
		if !strings.Contains(e, "durable call 3") || !strings.Contains(e, `step "greet"`) || !strings.Contains(e, "no call (the code returned)") {
			t.Errorf("Replay's error %q; want it to name durable call 3, the step greet, and the code's return", e)
		}
	}
}
