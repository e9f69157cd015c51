package chaos_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/internal/chaos"
)

// TestChaosSmoke runs every scenario at the smoke size, with real worker
// processes (this test binary, started again as workers) on a private
// cluster, and requires the four figures that must be zero to be zero.
func TestChaosSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Config{
		WorkerCommand: []string{os.Args[0], "-test.run=^$"},
		Quick:         true,
		Duration:      21 * time.Second,
		Workers:       2,
		Progress:      testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("report:\n%s", b)
	if len(rep.Scenarios) != len(chaos.Scenarios) {
		t.Fatalf("%d scenarios reported, want %d", len(rep.Scenarios), len(chaos.Scenarios))
	}
	for _, s := range rep.Scenarios {
		if s.Error != "" {
			t.Errorf("%s: %s", s.Name, s.Error)
		}
		if s.Started == 0 || s.Faults == 0 {
			t.Errorf("%s: %d runs started and %d faults injected; the scenario did nothing", s.Name, s.Started, s.Faults)
		}
		for _, f := range []struct {
			name string
			n    int64
		}{
			{"lost runs", int64(s.Lost)},
			{"steps recorded twice", int64(s.StepsRecordedTwice)},
			{"side effects duplicated", int64(s.SideEffectsDuplicated)},
			{"deadlocks", s.Deadlocks},
		} {
			if f.n != 0 {
				t.Errorf("%s: %d %s", s.Name, f.n, f.name)
			}
		}
		for _, lr := range s.LostRuns {
			t.Logf("%s: lost run %s (%s): %s; tasks %v; turns %v", s.Name, lr.ID, lr.Workflow, lr.Why, lr.Tasks, lr.Turns)
		}
	}
	for _, name := range []string{chaos.ScenarioKill, chaos.ScenarioTimeout, chaos.ScenarioErrors} {
		for _, s := range rep.Scenarios {
			if s.Name == name && s.Failed == 0 {
				t.Errorf("%s: no run failed on purpose", name)
			}
		}
	}
	if !rep.OK {
		t.Errorf("report not OK: %s", strings.Join(rep.Problems, "; "))
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
