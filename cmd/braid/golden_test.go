package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Fixed IDs of testdata/seed.sql.
const (
	failedRun  = "0195a1b2-0000-7000-8000-000000000001"
	waitingRun = "0195a1b2-0000-7000-8000-000000000003"
	pendingRun = "0195a1b2-0000-7000-8000-000000000004"
	panicRun   = "0195a1b2-0000-7000-8000-000000000005"
	// dagRun is the failed DAG run of testdata/seed-dag.sql.
	dagRun = "0195a1b2-0000-7000-8000-000000000010"
	// deadTurnJob is the dead turn job of panicRun's root task.
	deadTurnJob = "9"
)

// seeded returns the URL of a fresh database holding the files of
// testdata named, by default seed.sql.
func seeded(t *testing.T, files ...string) string {
	t.Helper()
	if len(files) == 0 {
		files = []string{"seed.sql"}
	}
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	for _, f := range files {
		sql, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(context.Background(), string(sql)); err != nil {
			t.Fatalf("seeding %s: %v", f, err)
		}
	}
	return url
}

// golden compares got with testdata/<name>.golden, or rewrites the file
// with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/braid -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("braid output differs from %s (-want +got); if the change is intended, run go test ./cmd/braid -update:\n%s", path, diff)
	}
}

// TestGolden checks the human output of the read-only commands on a fixed
// database.
func TestGolden(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	// The DAG run has a database of its own, so that the listings of
	// seed.sql stay as they are.
	dbs := map[string]string{"runs-show-dag": seeded(t, "seed-dag.sql")}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"runs-show-dag", []string{"runs", "show", dagRun}},
		{"runs-list", []string{"runs", "list"}},
		{"runs-list-digest-failed", []string{"runs", "list", "--workflow", "digest", "--status", "failed"}},
		{"runs-list-empty", []string{"runs", "list", "--status", "cancelled"}},
		{"runs-show-failed", []string{"runs", "show", failedRun}},
		{"runs-show-waiting", []string{"runs", "show", waitingRun}},
		{"runs-show-pending", []string{"runs", "show", pendingRun}},
		{"runs-show-panic", []string{"runs", "show", panicRun}},
		{"jobs-stats", []string{"jobs", "stats"}},
		{"jobs-list", []string{"jobs", "list"}},
		{"jobs-list-default-available", []string{"jobs", "list", "--queue", "default", "--state", "available"}},
		{"jobs-list-limit", []string{"jobs", "list", "--kind", "send_email", "--limit", "2"}},
		{"jobs-dead", []string{"jobs", "dead"}},
		{"jobs-dead-media", []string{"jobs", "dead", "--queue", "media"}},
		{"jobs-show-running", []string{"jobs", "show", "3"}},
		{"jobs-show-retryable", []string{"jobs", "show", "4"}},
		{"jobs-show-dead-turn", []string{"jobs", "show", deadTurnJob}},
		{"jobs-show-completed", []string{"jobs", "show", "1"}},
		{"schedules-list", []string{"schedules", "list"}},
		{"schedules-list-disabled", []string{"schedules", "list", "--enabled=false"}},
		{"schedules-get", []string{"schedules", "get", "nightly-report"}},
		{"recurring-list", []string{"recurring", "list"}},
		{"recurring-list-dead", []string{"recurring", "list", "--dead"}},
		{"recurring-list-kind-enabled", []string{"recurring", "list", "--kind", "fetch_feed", "--enabled", "--dead=false"}},
		{"leases-list", []string{"leases", "list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := url
			if dbs[tc.name] != "" {
				db = dbs[tc.name]
			}
			code, out, errOut := braid(t, append(tc.args, "--database-url", db)...)
			if code != 0 || errOut != "" {
				t.Fatalf("braid %v: code %d, stderr %q", tc.args, code, errOut)
			}
			golden(t, tc.name, out)
		})
	}
}
