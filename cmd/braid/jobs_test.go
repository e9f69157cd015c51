package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
)

func TestJobsRetryAndPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := seeded(t)
	pool := testutil.Pool(t, url)
	job := func(id int64) (state string, priority, maxAttempts int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT state::text, priority, max_attempts FROM river_job WHERE id = $1`, id).Scan(&state, &priority, &maxAttempts); err != nil {
			t.Fatal(err)
		}
		return state, priority, maxAttempts
	}

	code, out, errOut := braid(t, "jobs", "retry", "6", "7", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("jobs retry: code %d: %s", code, errOut)
	}
	var retried []jobView
	if err := json.Unmarshal([]byte(out), &retried); err != nil {
		t.Fatalf("jobs retry --json: %v\n%s", err, out)
	}
	var got []string
	for _, j := range retried {
		got = append(got, j.Kind+" "+string(j.State))
	}
	if diff := cmp.Diff([]string{"resize_image available", "send_email available"}, got); diff != "" {
		t.Errorf("retried jobs (-want +got):\n%s", diff)
	}
	if state, _, maxAttempts := job(6); state != "available" || maxAttempts != 4 {
		t.Errorf("dead letter 6 after retry: %s with %d max attempts; want available with one more attempt (4)", state, maxAttempts)
	}
	_, out, _ = braid(t, "jobs", "dead", "--database-url", url)
	if strings.TrimSpace(out) != "no dead letters" {
		t.Errorf("jobs dead after retrying both dead letters:\n%s", out)
	}

	code, out, errOut = braid(t, "jobs", "priority", "2", "low", "--database-url", url)
	if code != 0 || !strings.Contains(out, "send_email") || !strings.Contains(out, " low ") {
		t.Fatalf("jobs priority 2 low: code %d\n%s%s", code, out, errOut)
	}
	if _, p, _ := job(2); p != 4 {
		t.Errorf("job 2 has priority %d after jobs priority low; want 4", p)
	}
	if code, _, errOut = braid(t, "jobs", "priority", "2", "1", "--database-url", url); code != 0 {
		t.Fatalf("jobs priority 2 1: code %d: %s", code, errOut)
	}
	if _, p, _ := job(2); p != 1 {
		t.Errorf("job 2 has priority %d after jobs priority 1; want 1", p)
	}
}
