package check_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/check"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// deployed is the version of the code of pricing: 1 as the runs recorded
// it, 2 as it is about to be deployed.
var deployed atomic.Int32

// pricing runs a step for inputs that are multiples of ten, whose name
// version 2 changes, then waits on a signal.
var pricing = workflow.Define("check_pricing", func(t *workflow.Task, n int) (int, error) {
	if n%10 == 0 {
		name := "quote"
		if deployed.Load() == 2 {
			name = "quote-with-tax"
		}
		if _, err := workflow.Step(t, name, func(context.Context) (int, error) { return n, nil }); err != nil {
			return 0, err
		}
	}
	v, _, err := workflow.WaitSignal[int](t, "paid", 0)
	return v, err
})

// TestCheckListsExactlyTheDivergentRuns: of 100 runs in flight, the 10
// that the new code would diverge are listed, and the check exits 1;
// with the code the runs recorded, it exits 0.
func TestCheckListsExactlyTheDivergentRuns(t *testing.T) {
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	deployed.Store(1)
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{pricing}})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var params []workflow.StartManyParams[int]
	for i := range 100 {
		params = append(params, workflow.StartManyParams[int]{Input: i})
	}
	runs, err := pricing.StartMany(ctx, eng, params)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 100 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	if code := check.Run(ctx, []string{"--database-url", url}, &stdout, &stderr, pricing); code != 0 {
		t.Fatalf("with the recorded code: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "replayed 100 unfinished runs (100 tasks): 0 would diverge") {
		t.Errorf("with the recorded code:\n%s", stdout.String())
	}

	deployed.Store(2)
	defer deployed.Store(1)
	stdout.Reset()
	if code := check.Run(ctx, []string{"--database-url", url}, &stdout, &stderr, pricing); code != 1 {
		t.Fatalf("with the new code: exit %d, want 1\n%s%s", code, stdout.String(), stderr.String())
	}
	var want []string
	for i, r := range runs {
		if i%10 == 0 {
			want = append(want, r.ID)
		}
	}
	var listed []string
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && slices.Contains(runIDs(runs), f[0]) {
			listed = append(listed, f[0])
			if !strings.Contains(line, `step "quote"`) || !strings.Contains(line, `step "quote-with-tax"`) {
				t.Errorf("row %q does not name both calls", line)
			}
		}
	}
	slices.Sort(want)
	slices.Sort(listed)
	if diff := cmp.Diff(want, listed); diff != "" {
		t.Errorf("runs listed (-want +got):\n%s\n%s", diff, stdout.String())
	}

	stdout.Reset()
	if code := check.Run(ctx, []string{"--database-url", url, "--json"}, &stdout, &stderr, pricing); code != 1 {
		t.Fatalf("--json: exit %d", code)
	}
	var rep workflow.ReplayReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Divergences) != 10 || rep.Runs != 100 {
		t.Errorf("--json: %v, %+v", err, rep)
	}
}

func runIDs(runs []*workflow.Run[int]) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids
}

// TestCheckUsage: the check refuses what it cannot do, clearly, with exit
// status 2.
func TestCheckUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		defs []workflow.Definition
		want string
	}{
		{nil, nil, "registers no workflows"},
		{[]string{"--limit", "0", "--database-url", "postgres://x"}, []workflow.Definition{pricing}, "--limit 0 is below 1"},
		{[]string{"extra"}, []workflow.Definition{pricing}, `unexpected argument "extra"`},
		{[]string{"--run", "nope", "--database-url", testutil.URL(t)}, []workflow.Definition{pricing}, `"nope" is not a UUID`},
	} {
		var stdout, stderr bytes.Buffer
		if code := check.Run(ctx, tc.args, &stdout, &stderr, tc.defs...); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("check %q: exit %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
