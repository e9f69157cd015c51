package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/braidflow/braid/testutil"
)

func TestBenchPrintsOneJSONObject(t *testing.T) {
	t.Parallel()
	code, out, errOut := braid(t, "bench", "--database-url", testutil.URL(t),
		"--scenarios", "runs,steps", "--runs", "10", "--step-tasks", "2", "--workers", "10")
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
		Scenarios map[string]map[string]float64 `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if rep.Machine.CPUs < 1 || rep.Machine.Postgres == "" || rep.Config.Workers != 10 {
		t.Errorf("machine or config missing: %+v\n%s", rep, out)
	}
	if rep.Scenarios["runs"]["n"] != 10 || rep.Scenarios["runs"]["braid_per_sec"] <= 0 || rep.Scenarios["runs"]["river_per_sec"] <= 0 {
		t.Errorf("runs scenario: %v", rep.Scenarios["runs"])
	}
	if rep.Scenarios["steps"]["braid_steps_per_sec"] <= 0 {
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
