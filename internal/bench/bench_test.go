package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// tiny are sizes that run every scenario in a few seconds. River's
// scheduled jobs still wait for its scheduler's tick, up to 5s.
var tiny = Sizes{
	Runs: 20, Hops: 3, Chains: 1, Fanout: 20,
	Delays: 5, DelayMin: 10 * time.Millisecond, DelayMax: 50 * time.Millisecond, DelaySpread: 50 * time.Millisecond,
	StepTasks: 3, StepsPerTask: 2, PoolRuns: 5,
}

// reportFields are the fields every report has, by JSON path.
var reportFields = []string{
	"machine.cpus", "machine.go", "machine.postgres",
	"config.workers", "config.fetch_cooldown_ms", "config.fetch_poll_interval_ms",
	"scenarios.runs.n", "scenarios.runs.braid_per_sec", "scenarios.runs.river_per_sec", "scenarios.runs.ratio",
	"scenarios.hop.hops", "scenarios.hop.braid_p50_ms", "scenarios.hop.braid_p99_ms", "scenarios.hop.river_p50_ms", "scenarios.hop.river_p99_ms",
	"scenarios.fanout.children", "scenarios.fanout.braid_s", "scenarios.fanout.river_s", "scenarios.fanout.ratio",
	"scenarios.delay.n", "scenarios.delay.braid_p50_late_ms", "scenarios.delay.braid_p99_late_ms", "scenarios.delay.river_p50_late_ms", "scenarios.delay.river_p99_late_ms",
	"scenarios.steps.steps_per_task", "scenarios.steps.braid_steps_per_sec",
	"scenarios.pool.runs", "scenarios.pool.pool4_s", "scenarios.pool.pool16_s", "scenarios.pool.ratio", "scenarios.pool.lease_changes",
}

// lookup follows a dotted path through decoded JSON.
func lookup(v any, path string) (any, bool) {
	for _, key := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[key]; !ok {
			return nil, false
		}
	}
	return v, true
}

func TestRunReportsEveryField(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Config{DatabaseURL: testutil.URL(t), Sizes: tiny, Progress: &progress})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("the report is not valid JSON: %v\n%s", err, raw)
	}
	for _, path := range reportFields {
		v, ok := lookup(doc, path)
		if !ok {
			t.Errorf("the report has no %s:\n%s", path, raw)
			continue
		}
		switch x := v.(type) {
		case float64:
			if math.IsNaN(x) || x < 0 {
				t.Errorf("%s = %v, want a non-negative number", path, x)
			}
		case string:
			if x == "" {
				t.Errorf("%s is empty", path)
			}
		default:
			t.Errorf("%s = %v (%T), want a number or a string", path, v, v)
		}
	}

	// The sizes asked for are the sizes measured.
	s := rep.Scenarios
	got := []int{s.Runs.N, s.Hop.Hops, s.Hop.Chains, s.Fanout.Children, s.Delay.N, s.Steps.StepsPerTask, s.Steps.Tasks, s.Pool.Runs}
	want := []int{tiny.Runs, tiny.Hops, tiny.Chains, tiny.Fanout, tiny.Delays, tiny.StepsPerTask, tiny.StepTasks, tiny.PoolRuns}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sizes (-want +got):\n%s", diff)
	}
	// Work was measured on both sides.
	for name, v := range map[string]float64{
		"runs.braid_per_sec": s.Runs.BraidPerSec, "runs.river_per_sec": s.Runs.RiverPerSec,
		"hop.braid_p50_ms": s.Hop.BraidP50Ms, "hop.river_p50_ms": s.Hop.RiverP50Ms,
		"fanout.braid_s": s.Fanout.BraidS, "fanout.river_s": s.Fanout.RiverS,
		"steps.braid_steps_per_sec": s.Steps.BraidStepsPerSec, "steps.river_steps_per_sec": s.Steps.RiverStepsPerSec,
		"pool.pool4_s": s.Pool.Pool4S, "pool.pool16_s": s.Pool.Pool16S,
	} {
		if v <= 0 {
			t.Errorf("%s = %v, want a positive figure", name, v)
		}
	}
	if rep.Machine.Database != "url" {
		t.Errorf("machine.database = %q, want url", rep.Machine.Database)
	}
	if len(rep.Targets) != 6 {
		t.Errorf("%d target checks, want 6: %+v", len(rep.Targets), rep.Targets)
	}
	if !strings.Contains(progress.String(), "fanout: braid") {
		t.Errorf("no progress for the fanout scenario:\n%s", progress.String())
	}
}

func TestRunSelectedScenarios(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{DatabaseURL: testutil.URL(t), Sizes: tiny, Scenarios: []string{ScenarioSteps, ScenarioRuns, ScenarioRuns}})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Scenarios
	if s.Runs == nil || s.Steps == nil || s.Hop != nil || s.Fanout != nil || s.Delay != nil {
		t.Fatalf("scenarios run: %+v, want runs and steps only", s)
	}
	var figures []string
	for _, tc := range rep.Targets {
		figures = append(figures, tc.Figure)
	}
	if diff := cmp.Diff([]string{"runs.ratio"}, figures); diff != "" {
		t.Errorf("target figures (-want +got):\n%s", diff)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Scenarios: []string{"runs", "sideways"}}, `unknown scenario "sideways"`},
		{Config{Sizes: Sizes{Runs: -1}}, "Sizes.Runs is -1"},
		{Config{Sizes: Sizes{DelayMin: 2 * time.Second, DelayMax: time.Second}}, "delay lengths 2s to 1s"},
		{Config{Sizes: Sizes{DelaySpread: -time.Second}}, "Sizes.DelaySpread -1s is negative"},
		{Config{Workers: -3}, "Workers is -3"},
		{Config{FetchCooldown: time.Microsecond}, "FetchCooldown is 1µs"},
		{Config{FetchCooldown: time.Second, FetchPollInterval: 10 * time.Millisecond}, "FetchPollInterval 10ms is shorter than FetchCooldown 1s"},
		{Config{PoolMaxConns: 2}, "PoolMaxConns is 2"},
		{Config{Statements: -1}, "Statements is -1"},
	} {
		// Validation comes before any database is touched.
		_, err := Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestServerDropsScratchDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testutil.URL(t)
	srv, err := openServer(ctx, url, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	pool, release, err := srv.fresh(ctx, "probe")
	if err != nil {
		srv.close()
		t.Fatal(err)
	}
	// A clone is fully migrated.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_runs`).Scan(&n); err != nil {
		t.Errorf("a scratch database has no braid schema: %v", err)
	}
	release()
	if _, _, err := srv.fresh(ctx, "left_open"); err != nil {
		t.Fatal(err)
	}
	srv.close()

	admin := testutil.Pool(t, url)
	var left []string
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname`, srv.prefix)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		left = append(left, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("scratch databases left after close: %v", left)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {10, 1}, {100, 10}, {1, 1}} {
		if got := percentile(xs, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("percentile of nothing = %v, want NaN", got)
	}
	if xs[0] != 5 {
		t.Errorf("percentile sorted its input: %v", xs)
	}
}
