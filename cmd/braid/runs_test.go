package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestRunsShowJSON(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	code, out, errOut := braid(t, "runs", "show", failedRun, "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var run workflow.RunInfo
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatalf("runs show --json is not a run: %v\n%s", err, out)
	}
	type node struct{ Key, Parent, Status string }
	var got []node
	keys := map[string]string{}
	for _, task := range run.Tasks {
		keys[task.ID] = task.Key
	}
	for _, task := range run.Tasks {
		got = append(got, node{task.Key, keys[task.ParentID], task.Status})
	}
	want := []node{{"root", "", "failed"}, {"fetch/0", "root", "completed"}, {"fetch/1", "root", "completed"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	if run.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || run.Status != "failed" || len(run.Tasks[0].Steps) != 3 {
		t.Errorf("run: trace %q, status %q, %d root steps", run.TraceID, run.Status, len(run.Tasks[0].Steps))
	}
	if s := run.Tasks[0].Steps[2]; s.Name != "send" || s.Error != "smtp: 550 mailbox unavailable" || s.Attempts != 3 {
		t.Errorf("failed step: %+v", s)
	}

	code, out, _ = braid(t, "runs", "list", "--json", "--status", "cancelled", "--database-url", url)
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("an empty list in JSON: code %d, %q; want []", code, out)
	}
}

// TestRunsCancelRetry drives a run started by a real engine, which is never
// started, so the run stays where the CLI puts it.
func TestRunsCancelRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	greet := workflow.Define("greet", func(t *workflow.Task, name string) (string, error) { return "hello " + name, nil })
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{greet}, DisableDelayProcessor: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(ctx) })
	run, err := greet.Start(ctx, eng, "ada", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := run.ID
	turns := func() map[string]int {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT state::text, count(*)::int FROM river_job WHERE kind = $1 GROUP BY state`, workflow.TaskKind)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for rows.Next() {
			var s string
			var n int
			if err := rows.Scan(&s, &n); err != nil {
				t.Fatal(err)
			}
			m[s] = n
		}
		return m
	}

	steps := []struct {
		args    []string
		code    int
		out     string
		errOut  string
		status  string
		turnsBy map[string]int
	}{
		{[]string{"runs", "cancel", id}, 0, "cancelled run " + id + " (greet); it is now cancelled", "", "cancelled", map[string]int{"cancelled": 1}},
		{[]string{"runs", "cancel", id}, 1, "", "braid runs: run " + id + " is already cancelled; only an unfinished run can be cancelled", "cancelled", map[string]int{"cancelled": 1}},
		{[]string{"runs", "retry", id}, 0, "retried run " + id + " (greet); it is now pending", "", "pending", map[string]int{"cancelled": 1, "available": 1}},
		{[]string{"runs", "retry", id}, 1, "", "braid runs: run " + id + " is pending; only a failed or cancelled run can be retried", "pending", map[string]int{"cancelled": 1, "available": 1}},
	}
	for _, s := range steps {
		code, out, errOut := braid(t, append(s.args, "--database-url", url)...)
		if code != s.code || strings.TrimSpace(out) != s.out || strings.TrimSpace(errOut) != s.errOut {
			t.Fatalf("braid %v: code %d, stdout %q, stderr %q; want code %d, %q, %q", s.args, code, out, errOut, s.code, s.out, s.errOut)
		}
		info, err := eng.Run(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != s.status {
			t.Errorf("after braid %v the run is %s; want %s", s.args, info.Status, s.status)
		}
		if diff := cmp.Diff(s.turnsBy, turns()); diff != "" {
			t.Errorf("turn jobs by state after braid %v (-want +got):\n%s", s.args, diff)
		}
	}

	code, out, _ := braid(t, "runs", "cancel", id, "--json", "--database-url", url)
	var info workflow.RunInfo
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.ID != id || info.Status != "cancelled" {
		t.Errorf("runs cancel --json: code %d, %s", code, out)
	}
}

// TestRunsCancelWhoseTurnStillRuns cancels a run whose turn job is still
// running in River because the process that took it died: Cancel gives up
// waiting for the turn after workflow.TurnEndWaitDefault, with the run
// cancelled all the same, so the command says the run is cancelled, warns
// that its turn still runs, and succeeds, rather than failing a cancel that
// took effect.
func TestRunsCancelWhoseTurnStillRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	greet := workflow.Define("greet", func(t *workflow.Task, name string) (string, error) { return "hello " + name, nil })
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{greet}, DisableDelayProcessor: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(ctx) })
	run, err := greet.Start(ctx, eng, "ada", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A worker took the turn and died: River still has it running.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = '{gone}'
		WHERE kind = $1`, workflow.TaskKind); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := braid(t, "runs", "cancel", run.ID, "--database-url", url)
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "cancelled" {
		t.Fatalf("after braid runs cancel the run is %s; want cancelled", info.Status)
	}
	wantOut := "cancelled run " + run.ID + " (greet); it is now cancelled"
	if code != 0 || strings.TrimSpace(out) != wantOut || !strings.Contains(errOut, "1 turn still running") {
		t.Errorf("braid runs cancel: code %d, stdout %q, stderr %q; want code 0, %q, and a warning that 1 turn is still running", code, out, errOut, wantOut)
	}
}

// TestRunsRetrySeededFailedRun retries the failed digest of the seed: the
// failed step is forgotten, the recorded ones are kept, and the root gets a
// new turn.
func TestRunsRetrySeededFailedRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := seeded(t)
	code, out, errOut := braid(t, "runs", "retry", failedRun, "--database-url", url)
	if want := "retried run " + failedRun + " (digest); it is now pending\n"; code != 0 || out != want {
		t.Fatalf("runs retry: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	pool := testutil.Pool(t, url)
	rows, err := pool.Query(ctx, `SELECT name FROM braid_steps WHERE task_id = '0195a1b2-1000-7000-8000-000000000001' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, s)
	}
	if diff := cmp.Diff([]string{"load", "window"}, steps); diff != "" {
		t.Errorf("root steps after the retry (-want +got):\n%s", diff)
	}
	var turns int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND braid_turn_task(unique_key, args) = '0195a1b2-1000-7000-8000-000000000001' AND state = 'available'`, workflow.TaskKind).Scan(&turns); err != nil {
		t.Fatal(err)
	}
	if turns != 1 {
		t.Errorf("the root has %d available turns after the retry; want 1", turns)
	}
	_, out, _ = braid(t, "runs", "show", failedRun, "--database-url", url)
	if !strings.Contains(out, "root         task   pending") || strings.Contains(out, "  send ") {
		t.Errorf("runs show after the retry:\n%s", out)
	}
}

// crashParse panics in a step, so that the run fails with the panic's
// stack recorded.
func crashParse(rows []string) string { return rows[len(rows)] }

// TestRunsShowPanicStack runs a workflow whose step panics on a real
// engine, then shows the run: the failed step is marked in the tree, and
// its whole error, the panic's stack included, is printed below it.
func TestRunsShowPanicStack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	importer := workflow.Define("import", func(t *workflow.Task, file string) (string, error) {
		return workflow.Step(t, "parse", func(context.Context) (string, error) {
			return crashParse([]string{file}), nil
		}, workflow.Retry{MaxAttempts: 1})
	}, workflow.WithMaxAttempts(1))
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{importer}, DisableDelayProcessor: true, Logger: quiet,
		Queue: &queue.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	run, err := importer.Start(ctx, eng, "orders.csv", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("the run of a panicking step ended with %v; want it failed", err)
	}

	code, out, errOut := braid(t, "runs", "show", run.ID, "--database-url", url)
	if code != 0 {
		t.Fatalf("runs show: code %d: %s", code, errOut)
	}
	table, failures, ok := strings.Cut(out, "\nFAILURES\n")
	if !ok {
		t.Fatalf("runs show of a failed run has no FAILURES section:\n%s", out)
	}
	var parseRow string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "parse ") {
			parseRow = line
		}
	}
	if !strings.Contains(parseRow, "✗ failed") || !strings.Contains(parseRow, "panic: runtime error: index out of range [1] with length 1") || strings.Contains(table, "goroutine ") {
		t.Errorf("the tree shows the failed step as %q; want it marked, with the panic's first line and no stack:\n%s", parseRow, table)
	}
	for _, want := range []string{
		"✗ step parse of task root (failed, 1 attempt):\n    panic: runtime error: index out of range [1] with length 1\n",
		"✗ task root (import, failed, attempt 1):\n    step \"parse\" failed after 1 attempts: panic: runtime error: index out of range [1] with length 1 (in full under step parse below)\n",
		"    goroutine ",
		"cmd/braid.crashParse(",
		"cmd/braid/runs_test.go:",
	} {
		if !strings.Contains(failures, want) {
			t.Errorf("the FAILURES section does not hold %q:\n%s", want, failures)
		}
	}
	if n := strings.Count(out, "cmd/braid.crashParse("); n != 1 {
		t.Errorf("the stack is printed %d times; want once:\n%s", n, out)
	}

	// --json keeps the whole error too.
	_, out, _ = braid(t, "runs", "show", run.ID, "--json", "--database-url", url)
	var info workflow.RunInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil || len(info.Tasks) != 1 || len(info.Tasks[0].Steps) != 1 ||
		!strings.Contains(info.Tasks[0].Steps[0].Error, "cmd/braid.crashParse(") {
		t.Errorf("runs show --json does not carry the stack: %v\n%s", err, out)
	}

	// The turn job that failed is a dead letter that shows its run, and
	// retrying it retries the run. The engine is stopped first, so that
	// the run stays where the CLI puts it.
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, out, _ = braid(t, "jobs", "dead", "--json", "--database-url", url)
	var dead []jobView
	if err := json.Unmarshal([]byte(out), &dead); err != nil || len(dead) != 1 || dead[0].Kind != workflow.TaskKind || dead[0].Run == nil || dead[0].Run.RunID != run.ID {
		t.Fatalf("jobs dead after the run failed: %v\n%s", err, out)
	}
	id := strconv.FormatInt(dead[0].ID, 10)
	code, out, errOut = braid(t, "jobs", "retry", id, "--database-url", url)
	if want := "job " + id + " is a turn job of run " + run.ID + " (import): retried the run, which is now pending\n"; code != 0 || out != want {
		t.Errorf("jobs retry %s: code %d, stdout %q, stderr %q; want %q", id, code, out, errOut, want)
	}
}

// TestRunsShowDAG runs a DAG on a real engine, in which a false condition
// skips one node, a node fails, the node after it is skipped for that, and
// the on-failure node runs; then it shows the run: each node is drawn in
// its layer with the nodes it waits for, its status and, when skipped, why.
func TestRunsShowDAG(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	type article struct {
		URL string `json:"url"`
	}
	node := func(name string, out string) *workflow.Workflow[article, string] {
		return workflow.Define(name, func(t *workflow.Task, in article) (string, error) { return out, nil })
	}
	fetch, language, summarize, notify, cleanup := node("fetch_page", "<html>"), node("detect_language", "de"),
		node("summarize", "summary"), node("notify", "sent"), node("cleanup", "cleaned")
	index := workflow.Define("index_article", func(t *workflow.Task, in article) (string, error) {
		return "", errors.New("search index unavailable")
	}, workflow.WithMaxAttempts(1))
	dag := workflow.DAG[article]("publish",
		workflow.Node("fetch", fetch),
		workflow.Node("language", language, workflow.After("fetch")),
		workflow.Node("summary", summarize, workflow.After("language"), workflow.When(`language == "en"`)),
		workflow.Node("index", index, workflow.After("language", "summary")),
		workflow.Node("notify", notify, workflow.After("index")),
		workflow.Node("cleanup", cleanup, workflow.IfDAGFails()),
	)
	eng, err := workflow.NewEngine(pool, &workflow.Config{
		Workflows:             []workflow.Definition{dag, fetch, language, summarize, index, notify, cleanup},
		DisableDelayProcessor: true, Logger: quiet, Queue: &queue.Config{Logger: quiet},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	run, err := dag.Start(ctx, eng, article{URL: "https://example.com/a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), `node "index"`) {
		t.Fatalf("the DAG ended with %v; want it failed naming node index", err)
	}

	code, out, errOut := braid(t, "runs", "show", run.ID, "--database-url", url)
	if code != 0 {
		t.Fatalf("runs show: code %d: %s", code, errOut)
	}
	_, drawing, ok := strings.Cut(out, "\nDAG publish (task root): 6 nodes in 6 layers\n")
	if !ok {
		t.Fatalf("runs show of a DAG run does not draw the DAG:\n%s", out)
	}
	drawing, _, _ = strings.Cut(drawing, "\nFAILURES\n")
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(drawing), "\n") {
		cells := strings.Split(line, "  ")
		var row []string
		for _, c := range cells {
			if c = strings.TrimSpace(c); c != "" {
				row = append(row, c)
			}
		}
		got = append(got, row)
	}
	want := [][]string{
		{"LAYER", "NODE ← DEPENDENCIES", "STATUS", "DETAIL"},
		{"1", "fetch", "completed", "-"},
		{"2", "language ← fetch", "completed", "-"},
		{"3", "summary ← language", "skipped", `condition false: language == "en"`},
		{"4", "index ← language, summary", "✗ failed", "search index unavailable"},
		{"5", "notify ← index", "skipped", `the DAG failed: node "index" failed`},
		{"6", "cleanup (if the DAG fails)", "completed", "-"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the DAG's drawing (-want +got):\n%s\n%s", diff, out)
	}
	// The task tree names the skip reason too, and the failed node is
	// among the failures.
	for _, want := range []string{
		`summarize, 0 turns: condition false: language == "en"`,
		"\n✗ task index (index_article, failed, attempt 1):\n    search index unavailable\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("runs show does not hold %q:\n%s", want, out)
		}
	}

	// --json carries the nodes' dependencies and skip reasons.
	_, out, _ = braid(t, "runs", "show", run.ID, "--json", "--database-url", url)
	var info workflow.RunInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("runs show --json: %v\n%s", err, out)
	}
	reasons := map[string]string{}
	for _, task := range info.Tasks {
		if task.Node {
			reasons[task.Key] = task.Status + ": " + task.SkipReason
		}
	}
	wantReasons := map[string]string{
		"fetch": "completed: ", "language": "completed: ", "summary": `skipped: condition false: language == "en"`,
		"index": "failed: ", "notify": `skipped: the DAG failed: node "index" failed`, "cleanup": "completed: ",
	}
	if diff := cmp.Diff(wantReasons, reasons); diff != "" {
		t.Errorf("runs show --json nodes (-want +got):\n%s", diff)
	}
}

// TestPrintDAGsUnfinished draws a DAG that is under way: a node that runs,
// one that waits, and blocked nodes that say how many dependencies they
// still await; an on-failure node waits for every other one.
func TestPrintDAGsUnfinished(t *testing.T) {
	t.Parallel()
	node := func(key, status string, remaining int, deps ...string) workflow.TaskInfo {
		return workflow.TaskInfo{ID: key, ParentID: "r", Key: key, Workflow: "w", Status: status, Remaining: remaining, Node: true, DependsOn: deps}
	}
	run := &workflow.RunInfo{Tasks: []workflow.TaskInfo{
		{ID: "r", Key: "root", Workflow: "etl", Status: "waiting", Remaining: 6},
		node("extract", "completed", 0),
		node("geo", "running", 0, "extract"),
		node("prices", "waiting", 2, "extract"),
		node("load", "blocked", 2, "geo", "prices"),
		node("publish", "pending", 0),
		node("alert", "blocked", 3, "extract", "geo", "load", "prices", "publish"),
	}}
	var b strings.Builder
	printDAGs(&b, run)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		got = append(got, strings.Join(strings.Fields(line), " "))
	}
	want := []string{
		"DAG etl (task root): 6 nodes in 4 layers",
		"LAYER NODE ← DEPENDENCIES STATUS DETAIL",
		"1 extract completed -",
		"publish pending -",
		"2 geo ← extract running -",
		"prices ← extract waiting -",
		"3 load ← geo, prices blocked awaiting 2 of 2",
		"4 alert ← extract, geo, load, prices, publish blocked awaiting 3 of 5",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the DAG's drawing (-want +got):\n%s", diff)
	}
}

// TestTablesEscapeControlCharacters stores a run's, a task's and a job's
// error holding escape sequences and a carriage return: the tables and the
// FAILURES and ERRORS sections print them escaped, so that they cannot
// repaint the screen or forge a line, where --json keeps them as stored.
func TestTablesEscapeControlCharacters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := seeded(t)
	pool := testutil.Pool(t, url)
	const stored = "boom\x1b[2J\x1b[1;1H\rok: all runs completed"
	for _, q := range []string{
		`UPDATE braid_runs SET error = jsonb_build_object('message', $1::text) WHERE id = '` + failedRun + `'`,
		`UPDATE braid_tasks SET error = jsonb_build_object('message', $1::text) WHERE run_id = '` + failedRun + `' AND parent_task_id IS NULL`,
		`UPDATE river_job SET errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', $1::text, 'trace', '')] WHERE id = 6`,
	} {
		if _, err := pool.Exec(ctx, q, stored); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"runs", "list"},
		{"runs", "show", failedRun},
		{"jobs", "dead"},
		{"jobs", "show", "6"},
	} {
		code, out, errOut := braid(t, append(args, "--database-url", url)...)
		if code != 0 {
			t.Fatalf("braid %q: code %d: %s", args, code, errOut)
		}
		if strings.ContainsAny(out, "\x1b\r") {
			t.Errorf("braid %q prints raw control characters from stored data:\n%q", args, out)
		}
		if !strings.Contains(out, `boom\x1b[2J`) {
			t.Errorf("braid %q does not show the stored error escaped:\n%q", args, out)
		}
	}
	code, out, _ := braid(t, "runs", "show", failedRun, "--json", "--database-url", url)
	if code != 0 || !strings.Contains(out, `boom\u001b[2J\u001b[1;1H\rok`) {
		t.Errorf("runs show --json: code %d, %q; want the error as stored, in JSON's escapes", code, out)
	}
}
