package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/braidflow/braid/testutil"
)

func TestBenchPrintsOneJSONObject(t *testing.T) {
	t.Parallel()
	code, out, errOut := braid(t, "bench", "--run", "--database-url", testutil.URL(t),
		"--scenarios", "runs,steps", "--runs", "10", "--trials", "2", "--step-tasks", "2", "--workers", "10")
	if code != 0 {
		t.Fatalf("bench: code %d\n%s", code, errOut)
	}
	var rep struct {
		Machine struct {
			CPUs     int    `json:"cpus"`
			Postgres string `json:"postgres"`
		} `json:"machine"`
		Config struct {
			Workers int `json:"workers"`
		} `json:"config"`
		Scenarios map[string]map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if rep.Machine.CPUs < 1 || rep.Machine.Postgres == "" || rep.Config.Workers != 10 {
		t.Errorf("machine or config missing: %+v\n%s", rep, out)
	}
	// num is a figure of the report, or -1 when it is not a number.
	num := func(scenario, figure string) float64 {
		if x, ok := rep.Scenarios[scenario][figure].(float64); ok {
			return x
		}
		return -1
	}
	if num("runs", "n") != 10 || num("runs", "braid_per_sec") <= 0 || num("runs", "river_per_sec") <= 0 || num("runs", "trials") != 2 {
		t.Errorf("runs scenario: %v", rep.Scenarios["runs"])
	}
	if trials, _ := rep.Scenarios["runs"]["braid_trials_s"].([]any); len(trials) != 2 {
		t.Errorf("runs scenario: braid_trials_s %v, want 2 trials", rep.Scenarios["runs"]["braid_trials_s"])
	}
	if num("steps", "braid_steps_per_sec") <= 0 {
		t.Errorf("steps scenario: %v", rep.Scenarios["steps"])
	}
	if _, ok := rep.Scenarios["fanout"]; ok {
		t.Errorf("fanout ran though not selected: %s", out)
	}
	if !strings.Contains(errOut, "bench: runs: braid") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--scenarios", "runs,sideways"}, `unknown scenario "sideways"`},
		{[]string{"bench", "now"}, `unexpected argument "now"`},
		{[]string{"bench", "--quick=maybe"}, "invalid boolean value"},
	} {
		code, _, errOut := braid(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("braid %s: code %d, stderr %q; want code 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
}

// TestBenchWithoutRunSaysWhatItWouldDo runs bench without --run: it
// describes the benchmark its flags ask for, asks for --run or make bench,
// and runs nothing. DATABASE_URL is unset, so that the benchmark without
// --database-url would start its private PostgreSQL whatever server the
// tests run on.
func TestBenchWithoutRunSaysWhatItWouldDo(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, tc := range []struct {
		args []string
		want []string
		not  []string
	}{
		{nil, []string{
			"at the full sizes:\n",
			"  runs         5000 single-task runs, and as many River jobs: 3 trials a side, alternately, each figure their median\n",
			"  fanout       a Map over 10000 children",
			"  dag          10 chain DAGs of 20 nodes and a diamond DAG 1000 wide, and River chains and a River diamond\n",
			"  sustained    runs offered at 70% of braid's runs throughput for 1m0s on each side\n",
			"It starts a private PostgreSQL",
			"A full run takes about five minutes.",
		}, nil},
		{[]string{"--quick", "--scenarios", "runs,sustained", "--runs", "20", "--database-url", "postgres://bench@db.example:5433/prod"}, []string{
			"at the quick sizes:\n",
			"  runs       20 single-task runs",
			"  sustained  runs offered at 70% of braid's runs throughput for 20s on each side\n",
			"on the server at db.example:5433 in scratch databases it creates and drops (the role needs CREATEDB); database prod is never written to.",
			"A quick run takes well under two minutes.",
		}, []string{"fanout", "private PostgreSQL"}},
		{[]string{"--quick", "--scenarios", "dag", "--dag-chains", "4", "--dag-width", "50"}, []string{
			"  dag  4 chain DAGs of 20 nodes and a diamond DAG 50 wide, and River chains and a River diamond\n",
		}, []string{"fanout", "  runs"}},
		{[]string{"--quick", "--scenarios", "fanout", "--trials", "5"}, []string{
			"  fanout  a Map over 1000 children, and as many River jobs: 5 trials a side, alternately, each figure their median\n",
		}, []string{"  runs"}},
		{[]string{"--long", "--sustained-rate", "50"}, []string{
			"runs offered at 50 runs a second for 10m0s on each side",
		}, nil},
	} {
		code, out, errOut := braid(t, append([]string{"bench"}, tc.args...)...)
		last := "braid bench: nothing was run: add --run to start the benchmark, or run `make bench` (QUICK=1 for the quick sizes)\n"
		if code != 2 || out != "" || !strings.HasSuffix(errOut, last) || strings.Contains(errOut, "bench: runs: braid") {
			t.Errorf("braid bench %v: code %d, stdout %q, stderr:\n%s\nwant code 2, nothing on stdout and stderr ending %q", tc.args, code, out, errOut, last)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("braid bench %v does not say %q:\n%s", tc.args, w, errOut)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(errOut, w) {
				t.Errorf("braid bench %v says %q:\n%s", tc.args, w, errOut)
			}
		}
	}
}
