package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// tiny are sizes that run every scenario in a few seconds. River's
// scheduled jobs still wait for its scheduler's tick, up to 5s.
var tiny = Sizes{
	Runs: 20, Trials: 2, Hops: 3, Chains: 1, Fanout: 20, DAGChains: 1, DAGWidth: 5,
	Delays: 5, DelayMin: 10 * time.Millisecond, DelayMax: 50 * time.Millisecond, DelaySpread: 50 * time.Millisecond,
	StepTasks: 3, StepsPerTask: 2, PoolRuns: 5,
	BurstDelays: 5,
	Sustained:   2 * time.Second, SustainedWindow: time.Second, SustainedRetention: time.Second,
}

// settle is the pause before a side's first reading of its commits in the
// tests that do not check the count's exactness.
const settle = 50 * time.Millisecond

// reportFields are the fields every report has, by JSON path.
var reportFields = []string{
	"machine.cpus", "machine.go", "machine.postgres",
	"config.workers", "config.fetch_cooldown_ms", "config.fetch_poll_interval_ms",
	"scenarios.runs.n", "scenarios.runs.braid_per_sec", "scenarios.runs.river_per_sec", "scenarios.runs.ratio",
	"scenarios.hop.hops", "scenarios.hop.braid_p50_ms", "scenarios.hop.braid_p99_ms", "scenarios.hop.river_p50_ms", "scenarios.hop.river_p99_ms",
	"scenarios.fanout.children", "scenarios.fanout.braid_s", "scenarios.fanout.river_s", "scenarios.fanout.ratio",
	"scenarios.dag.chain_nodes", "scenarios.dag.chains", "scenarios.dag.chain_braid_s", "scenarios.dag.chain_river_s",
	"scenarios.dag.chain_braid_ms_per_edge", "scenarios.dag.chain_river_ms_per_edge", "scenarios.dag.chain_ratio",
	"scenarios.dag.diamond_width", "scenarios.dag.diamond_braid_s", "scenarios.dag.diamond_river_s",
	"scenarios.dag.diamond_braid_ms_per_edge", "scenarios.dag.diamond_river_ms_per_edge", "scenarios.dag.diamond_ratio",
	"scenarios.delay.n", "scenarios.delay.braid_p50_late_ms", "scenarios.delay.braid_p99_late_ms", "scenarios.delay.river_p50_late_ms", "scenarios.delay.river_p99_late_ms",
	"scenarios.delay_burst.n", "scenarios.delay_burst.braid_p50_late_ms", "scenarios.delay_burst.braid_p99_late_ms",
	"scenarios.delay_burst.river_p50_late_ms", "scenarios.delay_burst.river_p99_late_ms",
	"scenarios.steps.steps_per_task", "scenarios.steps.braid_steps_per_sec",
	"scenarios.pool.runs", "scenarios.pool.pool4_s", "scenarios.pool.pool16_s", "scenarios.pool.ratio", "scenarios.pool.lease_changes",
	"scenarios.sustained.duration_s", "scenarios.sustained.window_s", "scenarios.sustained.retention_s",
	"scenarios.sustained.capacity_per_sec", "scenarios.sustained.offered_per_sec",
	"scenarios.sustained.braid_started", "scenarios.sustained.river_started",
	"scenarios.sustained.braid_growth", "scenarios.sustained.river_growth",
	"scenarios.sustained.braid_sizes.start.braid_runs", "scenarios.sustained.braid_sizes.start.braid_tasks",
	"scenarios.sustained.braid_sizes.start.braid_steps", "scenarios.sustained.braid_sizes.start.river_job",
	"scenarios.sustained.braid_sizes.end.braid_runs", "scenarios.sustained.braid_sizes.end.river_job",
	"scenarios.sustained.river_sizes.start.river_job", "scenarios.sustained.river_sizes.end.river_job",
}

// commitFields are the commits per unit of work every scenario reports
// for each side (the pool scenario has no River side).
var commitFields = func() []string {
	var out []string
	for _, name := range Scenarios {
		out = append(out, "scenarios."+name+".braid_commits_per_run")
		if name != ScenarioPool {
			out = append(out, "scenarios."+name+".river_commits_per_run")
		}
	}
	return out
}()

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
	rep, err := Run(context.Background(), Config{DatabaseURL: testutil.URL(t), Sizes: tiny, StatsSettle: settle, Progress: &progress})
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
	for _, path := range append(reportFields, commitFields...) {
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
	got := []int{s.Runs.N, s.Hop.Hops, s.Hop.Chains, s.Fanout.Children, s.DAG.Chains, s.DAG.ChainNodes, s.DAG.DiamondWidth,
		s.Delay.N, s.DelayBurst.N, s.Steps.StepsPerTask, s.Steps.Tasks, s.Pool.Runs}
	want := []int{tiny.Runs, tiny.Hops, tiny.Chains, tiny.Fanout, tiny.DAGChains, DAGChainNodes, tiny.DAGWidth,
		tiny.Delays, tiny.BurstDelays, tiny.StepsPerTask, tiny.StepTasks, tiny.PoolRuns}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sizes (-want +got):\n%s", diff)
	}
	// The runs and fanout scenarios ran each side once a trial, and report
	// the median (of two: their mean) of the trials' times.
	for _, tr := range []struct {
		name                     string
		trials                   int
		braid, river             []float64
		braidMedian, riverMedian float64
	}{
		{"runs", s.Runs.Trials, s.Runs.BraidTrialsS, s.Runs.RiverTrialsS, s.Runs.BraidS, s.Runs.RiverS},
		{"fanout", s.Fanout.Trials, s.Fanout.BraidTrialsS, s.Fanout.RiverTrialsS, s.Fanout.BraidS, s.Fanout.RiverS},
	} {
		if tr.trials != tiny.Trials || len(tr.braid) != tiny.Trials || len(tr.river) != tiny.Trials {
			t.Errorf("%s: %d trials, braid %v, river %v; want %d of each", tr.name, tr.trials, tr.braid, tr.river, tiny.Trials)
			continue
		}
		for side, c := range map[string]struct {
			trials []float64
			median float64
		}{
			"braid": {tr.braid, tr.braidMedian}, "river": {tr.river, tr.riverMedian},
		} {
			if mean := (c.trials[0] + c.trials[1]) / 2; math.Abs(c.median-mean) > 0.0015 {
				t.Errorf("%s: %s time %v, want the median of its trials %v", tr.name, side, c.median, c.trials)
			}
		}
	}
	if got := strings.Count(progress.String(), "runs: trial "); got != tiny.Trials {
		t.Errorf("%d progress lines for the runs scenario's trials, want %d:\n%s", got, tiny.Trials, progress.String())
	}
	// Every side committed transactions: starts, inserts, outcomes.
	for _, path := range commitFields {
		v, _ := lookup(doc, path)
		if x, _ := v.(float64); x <= 0 {
			t.Errorf("%s = %v, want a positive figure", path, v)
		}
	}
	// The sustained scenario ran after runs, at 70% of its throughput.
	checkSustained(t, s.Sustained, tiny, s.Runs.BraidPerSec)
	// Work was measured on both sides.
	for name, v := range map[string]float64{
		"runs.braid_per_sec": s.Runs.BraidPerSec, "runs.river_per_sec": s.Runs.RiverPerSec,
		"hop.braid_p50_ms": s.Hop.BraidP50Ms, "hop.river_p50_ms": s.Hop.RiverP50Ms,
		"fanout.braid_s": s.Fanout.BraidS, "fanout.river_s": s.Fanout.RiverS,
		"dag.chain_braid_ms_per_edge": s.DAG.ChainBraidMsPerEdge, "dag.chain_river_ms_per_edge": s.DAG.ChainRiverMsPerEdge,
		"dag.diamond_braid_ms_per_edge": s.DAG.DiamondBraidMsPerEdge, "dag.diamond_river_ms_per_edge": s.DAG.DiamondRiverMsPerEdge,
		"dag.chain_ratio": s.DAG.ChainRatio, "dag.diamond_ratio": s.DAG.DiamondRatio,
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
	var figures []string
	for _, tc := range rep.Targets {
		figures = append(figures, tc.Figure)
	}
	wantFigures := []string{
		"runs.ratio", "runs.braid_commits_per_run", "hop.braid_p50_ms", "fanout.ratio",
		"dag.chain_ratio", "dag.diamond_ratio", "delay.braid_p99_late_ms", "delay_burst.braid_p99_late_ms", "steps.ratio",
		"pool.ratio", "pool.lease_changes", "sustained.braid_drift", "sustained.braid_growth",
	}
	if diff := cmp.Diff(wantFigures, figures); diff != "" {
		t.Errorf("target figures (-want +got):\n%s", diff)
	}
	if !strings.Contains(progress.String(), "fanout: braid") {
		t.Errorf("no progress for the fanout scenario:\n%s", progress.String())
	}
}

func TestRunSelectedScenarios(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{DatabaseURL: testutil.URL(t), Sizes: tiny, StatsSettle: settle, Scenarios: []string{ScenarioSteps, ScenarioRuns, ScenarioRuns}})
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
	if diff := cmp.Diff([]string{"runs.ratio", "runs.braid_commits_per_run", "steps.ratio"}, figures); diff != "" {
		t.Errorf("target figures (-want +got):\n%s", diff)
	}
}

func TestDAGScenarioAlone(t *testing.T) {
	t.Parallel()
	sizes := tiny
	sizes.DAGChains, sizes.DAGWidth = 2, 7
	rep, err := Run(context.Background(), Config{DatabaseURL: testutil.URL(t), Sizes: sizes, StatsSettle: settle, Scenarios: []string{ScenarioDAG}})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Scenarios
	if s.DAG == nil || s.Runs != nil || s.Hop != nil || s.Fanout != nil {
		t.Fatalf("scenarios run: %+v, want dag only", s)
	}
	d := s.DAG
	if d.Chains != 2 || d.ChainNodes != DAGChainNodes || d.DiamondWidth != 7 {
		t.Errorf("sizes: %d chains of %d nodes, a diamond %d wide; want 2 of %d, 7", d.Chains, d.ChainNodes, d.DiamondWidth, DAGChainNodes)
	}
	// Time per edge is each phase's time over its edges: 19 a chain, twice
	// the width for the diamond.
	for _, c := range []struct {
		name     string
		s, perMs float64
		edges    int
	}{
		{"chain braid", d.ChainBraidS, d.ChainBraidMsPerEdge, 2 * (DAGChainNodes - 1)},
		{"chain river", d.ChainRiverS, d.ChainRiverMsPerEdge, 2 * (DAGChainNodes - 1)},
		{"diamond braid", d.DiamondBraidS, d.DiamondBraidMsPerEdge, 14},
		{"diamond river", d.DiamondRiverS, d.DiamondRiverMsPerEdge, 14},
	} {
		if c.s <= 0 || math.Abs(c.perMs*float64(c.edges)-c.s*1000) > float64(c.edges)*0.001+1 {
			t.Errorf("%s: %vs for %d edges, %v ms per edge", c.name, c.s, c.edges, c.perMs)
		}
	}
	if d.ChainRatio <= 0 || d.DiamondRatio <= 0 || d.BraidCommitsPerRun <= 0 || d.RiverCommitsPerRun <= 0 {
		t.Errorf("ratios %v and %v, commits %v and %v; want positive figures", d.ChainRatio, d.DiamondRatio, d.BraidCommitsPerRun, d.RiverCommitsPerRun)
	}
	var figures []string
	for _, tc := range rep.Targets {
		figures = append(figures, tc.Figure)
		if want := tc.Value <= 1.5; tc.Met != want {
			t.Errorf("%s = %v: met %t, want %t", tc.Figure, tc.Value, tc.Met, want)
		}
	}
	if diff := cmp.Diff([]string{"dag.chain_ratio", "dag.diamond_ratio"}, figures); diff != "" {
		t.Errorf("target figures (-want +got):\n%s", diff)
	}
}

// checkSustained checks the shape of a sustained result measured with
// sizes, at SustainedLoad of capacity.
func checkSustained(t *testing.T, u *SustainedResult, sizes Sizes, capacity float64) {
	t.Helper()
	if u == nil {
		t.Fatal("no sustained result")
	}
	windows := int(sizes.Sustained / sizes.SustainedWindow)
	if u.DurationS != sizes.Sustained.Seconds() || u.WindowS != sizes.SustainedWindow.Seconds() || u.RetentionS != sizes.SustainedRetention.Seconds() {
		t.Errorf("duration %vs, window %vs, retention %vs; want %s, %s, %s",
			u.DurationS, u.WindowS, u.RetentionS, sizes.Sustained, sizes.SustainedWindow, sizes.SustainedRetention)
	}
	if u.CapacityPerSec != capacity || u.OfferedPerSec != round(SustainedLoad*capacity, 1) || u.OfferedPerSec <= 0 {
		t.Errorf("offered %v/s of a capacity of %v/s, want %v of %v/s", u.OfferedPerSec, u.CapacityPerSec, SustainedLoad, capacity)
	}
	for _, side := range []struct {
		name      string
		started   int
		completed []int
		sizes     SizeSamples
		applied   *float64
		growth    float64
		settled   bool
	}{
		{"braid", u.BraidStarted, u.BraidCompleted, u.BraidSizes, u.BraidRetentionAppliedS, u.BraidGrowth, u.BraidSettled},
		{"river", u.RiverStarted, u.RiverCompleted, u.RiverSizes, u.RiverRetentionAppliedS, u.RiverGrowth, u.RiverSettled},
	} {
		if len(side.completed) != windows {
			t.Errorf("%s: %d windows, want %d: %v", side.name, len(side.completed), windows, side.completed)
		}
		total := 0
		for _, c := range side.completed {
			if c < 0 {
				t.Errorf("%s: a window completed %d", side.name, c)
			}
			total += c
		}
		// Every run started was offered, and none completed before it
		// started.
		if offered := int(u.OfferedPerSec * u.DurationS); side.started < 1 || side.started > offered || total > side.started {
			t.Errorf("%s: %d started of %d offered, %d completed in the windows", side.name, side.started, offered, total)
		}
		if side.sizes.Start.RiverJob <= 0 || side.sizes.End.RiverJob < side.sizes.Start.RiverJob {
			t.Errorf("%s: river_job from %d to %d bytes", side.name, side.sizes.Start.RiverJob, side.sizes.End.RiverJob)
		}
		// River's job cleaner runs once as it starts, then every 30s:
		// retention may apply to river_job in a scenario this short, or not.
		switch {
		case side.applied == nil && (side.sizes.Retention != nil || side.settled || side.growth != 0):
			t.Errorf("%s: retention did not apply, yet sizes %+v, growth %v, settled %t",
				side.name, side.sizes.Retention, side.growth, side.settled)
		case side.applied != nil && (*side.applied <= 0 || *side.applied > u.DurationS || side.sizes.Retention == nil || side.growth < 0):
			t.Errorf("%s: retention applied after %vs of %vs, sizes %+v, growth %v",
				side.name, *side.applied, u.DurationS, side.sizes.Retention, side.growth)
		}
	}
	if u.BraidSizes.Start.BraidRuns <= 0 || u.BraidSizes.End.BraidRuns < u.BraidSizes.Start.BraidRuns ||
		u.BraidSizes.End.BraidSteps < u.BraidSizes.Start.BraidSteps {
		t.Errorf("braid sizes from %+v to %+v", u.BraidSizes.Start, u.BraidSizes.End)
	}
	if u.RiverSizes.Start.BraidRuns != 0 {
		t.Errorf("the River side reports braid tables: %+v", u.RiverSizes.Start)
	}
}

func TestSustainedProbesThroughputAlone(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Config{DatabaseURL: testutil.URL(t), Sizes: tiny, StatsSettle: settle, Scenarios: []string{ScenarioSustained}, Progress: &progress})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if rep.Scenarios.Runs != nil {
		t.Errorf("the runs scenario ran though not selected")
	}
	u := rep.Scenarios.Sustained
	if u == nil || u.CapacityPerSec <= 0 {
		t.Fatalf("no throughput probed: %+v\nprogress:\n%s", u, progress.String())
	}
	checkSustained(t, u, tiny, u.CapacityPerSec)
	if !strings.Contains(progress.String(), "sustained: measuring braid's throughput") {
		t.Errorf("no progress for the probe:\n%s", progress.String())
	}
	var figures []string
	for _, tc := range rep.Targets {
		figures = append(figures, tc.Figure)
		if tc.Figure == "sustained.braid_growth" && tc.Met != u.BraidSettled {
			t.Errorf("the growth target's met is %t, settled %t", tc.Met, u.BraidSettled)
		}
	}
	if diff := cmp.Diff([]string{"sustained.braid_drift", "sustained.braid_growth"}, figures); diff != "" {
		t.Errorf("target figures (-want +got):\n%s", diff)
	}
}

func TestSustainedRateSkipsTheProbe(t *testing.T) {
	t.Parallel()
	sizes := tiny
	sizes.SustainedRate = 25
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Config{DatabaseURL: testutil.URL(t), Sizes: sizes, StatsSettle: settle, Scenarios: []string{ScenarioSustained}, Progress: &progress})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	u := rep.Scenarios.Sustained
	if u.OfferedPerSec != 25 || u.CapacityPerSec != 0 {
		t.Errorf("offered %v/s of a capacity of %v/s, want 25 of none measured", u.OfferedPerSec, u.CapacityPerSec)
	}
	if strings.Contains(progress.String(), "measuring braid's throughput") {
		t.Errorf("a probe ran though the rate was given:\n%s", progress.String())
	}
	// 25 runs per second for 2 seconds, started on time on this scale.
	if u.BraidStarted < 25 || u.RiverStarted < 25 {
		t.Errorf("started %d runs and %d jobs of 50 offered", u.BraidStarted, u.RiverStarted)
	}
}

func TestCommitsCountEveryTransactionButTheBenchmarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The default pause, which the count's exactness rests on.
	b, err := newBench(Config{DatabaseURL: testutil.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	if b.srv, err = openServer(ctx, b.cfg.DatabaseURL, 4, false); err != nil {
		t.Fatal(err)
	}
	defer b.srv.close()
	s, err := b.newSide(ctx, "commits", "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	// Work before the count is not counted.
	for range 20 {
		if _, err := s.pool.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.beginCommits(); err != nil {
		t.Fatal(err)
	}
	const work, own = 40, 30
	for range work {
		if _, err := s.pool.Exec(ctx, "SELECT 2"); err != nil {
			t.Fatal(err)
		}
	}
	for range own {
		s.reads.Add(1)
		if _, err := s.pool.Exec(ctx, "SELECT 3"); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "CREATE TABLE counted (x int)")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.endCommits()
	if err != nil {
		t.Fatal(err)
	}
	// One transaction per statement, one for the explicit transaction, and
	// at most one more per connection that prepared a new statement.
	if got < work+1 || got > work+1+4 {
		t.Errorf("counted %d commits, want %d to %d", got, work+1, work+1+4)
	}
}

func TestDriftAndGrowth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		completed []int
		want      float64
	}{
		{[]int{100, 100, 90}, -0.1}, {[]int{80, 120}, 0.5}, {[]int{0, 10}, 0}, {[]int{7}, 0},
	} {
		if got := drift(tc.completed); got != tc.want {
			t.Errorf("drift(%v) = %v, want %v", tc.completed, got, tc.want)
		}
	}

	// sizes grows each table by perSec bytes a second until second flat,
	// and by perSec/slower after.
	sizes := func(perSec, flat, slower int64, upTo int) []sizeSample {
		var out []sizeSample
		for i := 0; i <= upTo; i++ {
			n := int64(i) * perSec
			if int64(i) > flat {
				n = flat*perSec + (int64(i)-flat)*perSec/slower
			}
			out = append(out, sizeSample{at: time.Duration(i) * time.Second, sizes: TableSizes{
				BraidRuns: 8192 + n, BraidTasks: 8192 + 2*n, BraidSteps: 8192, RiverJob: 8192 + 3*n,
			}})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		o       offered
		growth  float64
		settled bool
	}{
		{"retention did not apply", offered{applied: -1, samples: sizes(1000, 100, 1, 60)}, 0, false},
		{"growing on", offered{applied: 20 * time.Second, appliedAt: 20, samples: sizes(1000, 100, 1, 60)}, 1, false},
		{"a tenth as fast", offered{applied: 20 * time.Second, appliedAt: 20, samples: sizes(1000, 30, 10, 60)}, 0.1, false},
		{"a fiftieth as fast", offered{applied: 20 * time.Second, appliedAt: 20, samples: sizes(1000, 30, 50, 60)}, 0.02, true},
		{"no time after", offered{applied: 20 * time.Second, appliedAt: 20, samples: sizes(1000, 20, 1, 60)[:21]}, 0, false},
	} {
		growth, settled := tc.o.growth(braidTables)
		if growth != tc.growth || settled != tc.settled {
			t.Errorf("%s: growth %v, settled %t; want %v, %t", tc.name, growth, settled, tc.growth, tc.settled)
		}
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
		{Config{Sizes: Sizes{Trials: -2}}, "Sizes.Trials is -2"},
		{Config{Sizes: Sizes{DelayMin: 2 * time.Second, DelayMax: time.Second}}, "delay lengths 2s to 1s"},
		{Config{Sizes: Sizes{DelaySpread: -time.Second}}, "Sizes.DelaySpread -1s is negative"},
		{Config{Sizes: Sizes{BurstDelays: -1}}, "Sizes.BurstDelays is -1"},
		{Config{Sizes: Sizes{DAGChains: -2}}, "Sizes.DAGChains is -2"},
		{Config{Sizes: Sizes{DAGWidth: -1}}, "Sizes.DAGWidth is -1"},
		{Config{Sizes: Sizes{BurstLead: -time.Second}}, "Sizes.BurstLead -1s is negative"},
		{Config{Sizes: Sizes{Sustained: 15 * time.Second}}, "Sizes.Sustained 15s holds fewer than two windows of 10s"},
		{Config{Quick: true, Sizes: Sizes{SustainedWindow: 11 * time.Second}}, "Sizes.Sustained 20s holds fewer than two windows of 11s"},
		{Config{Sizes: Sizes{SustainedRate: -5}}, "Sizes.SustainedRate -5 is not a non-negative rate"},
		{Config{Workers: -3}, "Workers is -3"},
		{Config{FetchCooldown: time.Microsecond}, "FetchCooldown is 1µs"},
		{Config{FetchCooldown: time.Second, FetchPollInterval: 10 * time.Millisecond}, "FetchPollInterval 10ms is shorter than FetchCooldown 1s"},
		{Config{PoolMaxConns: 2}, "PoolMaxConns is 2"},
		{Config{Statements: -1}, "Statements is -1"},
		{Config{StatsSettle: -time.Second}, "StatsSettle -1s is negative"},
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

func TestNextPollIsFastOnlyNearTheEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		elapsed    time.Duration
		done, want int
		poll       time.Duration
	}{
		{0, 0, 10000, pollEvery},                        // nothing done yet: no pace to go by
		{time.Second, 1000, 10000, pollMax},             // 9 s to go
		{time.Second, 5000, 10000, pollMax},             // 1 s to go: a quarter is over pollMax
		{time.Second, 9000, 10000, time.Second / 9 / 4}, // 111 ms to go
		{time.Second, 9990, 10000, pollEvery},           // 1 ms to go
		{time.Second, 10000, 10000, pollEvery},          // done
		{time.Second, 12000, 10000, pollEvery},          // more than wanted
	} {
		if got := nextPoll(tc.elapsed, tc.done, tc.want); got != tc.poll {
			t.Errorf("nextPoll(%s, %d, %d) = %s, want %s", tc.elapsed, tc.done, tc.want, got, tc.poll)
		}
	}
}

func TestMedianTakesEachFigureOnItsOwn(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		ps   []phase
		want phase
	}{
		{[]phase{{ms(7), 3}}, phase{ms(7), 3}},
		// Odd: the middle value of each, from different trials.
		{[]phase{{ms(900), 10}, {ms(300), 50}, {ms(500), 30}}, phase{ms(500), 30}},
		{[]phase{{ms(100), 90}, {ms(300), 10}, {ms(200), 40}}, phase{ms(200), 40}},
		// Even: the mean of the middle two.
		{[]phase{{ms(400), 8}, {ms(100), 2}, {ms(200), 4}, {ms(1000), 100}}, phase{ms(300), 6}},
	} {
		if got := median(tc.ps); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.ps, got, tc.want)
		}
	}
	if got, want := seconds([]phase{{ms(1500), 0}, {1234567 * time.Microsecond, 0}}), []float64{1.5, 1.235}; !slices.Equal(got, want) {
		t.Errorf("seconds = %v, want %v", got, want)
	}
}

// TestSizesDefineDAGsTheEngineAccepts registers the DAGs of the dag
// scenario at the full and the quick sizes, which the other tests run
// smaller: each is within the engine's limits on a DAG's size.
func TestSizesDefineDAGsTheEngineAccepts(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	for name, sizes := range map[string]Sizes{"full": FullSizes, "quick": QuickSizes} {
		node := noopWorkflow()
		defs := []workflow.Definition{node, chainDAG(node), diamondDAG(node, sizes.DAGWidth)}
		if _, err := workflow.NewEngine(pool, &workflow.Config{Workflows: defs}); err != nil {
			t.Errorf("the %s sizes' DAGs: %v", name, err)
		}
	}
}
