package check_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/braidflow/braid/check"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestCheckDoesNotPassRunsItLeftOut: two runs in flight, the newer one
// diverges under the new code. A check whose limit leaves the newer one
// out (as the default 10,000 does on a busy database) exits 1 and says how
// many runs it did not replay, rather than exit 0 as if every unfinished
// run were safe.
func TestCheckDoesNotPassRunsItLeftOut(t *testing.T) {
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deployed.Store(1)
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{pricing}})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 10} { // 10 runs step "quote", which version 2 renames
		if _, err := pricing.Start(ctx, eng, n, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	deployed.Store(2)
	defer deployed.Store(1)
	var stdout, stderr bytes.Buffer
	code := check.Run(ctx, []string{"--database-url", url, "--limit", "1"}, &stdout, &stderr, pricing)
	want := "replayed 1 unfinished runs (1 tasks): 0 would diverge, 0 could not be replayed\n" +
		"1 more unfinished runs were not replayed (over --limit): raise it to check them\n"
	if code != 1 || stdout.String() != want {
		t.Errorf("check --limit 1 with 2 unfinished runs, the second divergent: exit %d\nstdout: %q\nstderr: %q\nwant exit 1 and %q", code, stdout.String(), stderr.String(), want)
	}
}
