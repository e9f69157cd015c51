package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/admin"
	"github.com/braidflow/braid/internal/termtext"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

func init() {
	register(&command{
		name:    "runs",
		summary: "list, inspect, cancel, retry, signal and export workflow runs",
		subs: []sub{
			{"list", "", "list runs, newest first", runsList},
			{"show", "ID", "show a run's tree of tasks, steps, delays and pending waits, its deadline, and the full error of each failure", runsShow},
			{"cancel", "ID", "cancel an unfinished run", runsCancel},
			{"retry", "ID", "retry a failed or cancelled run from its failed tasks", runsRetry},
			{"signal", "RUN NAME", "send a signal with a JSON payload to a run, by its ID or (--by-key) its idempotency key", runsSignal},
			{"export", "ID", "print a run's recorded history as JSON, for testutil.Replay", runsExport},
		},
	})
}

// runStatuses are the statuses a run can have, in lifecycle order.
var runStatuses = []string{"pending", "running", "waiting", "completed", "failed", "cancelled"}

// runsListMax is the most runs one listing returns (workflow.ListRuns's
// limit).
const runsListMax = 10_000

func runsList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs list")
	status := fs.String("status", "", "only runs in this status: "+strings.Join(runStatuses, ", "))
	wf := fs.String("workflow", "", "only runs of this workflow")
	limit := fs.Int("limit", 100, fmt.Sprintf("the most runs to list, newest first (1 to %d)", runsListMax))
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	if *status != "" && !slices.Contains(runStatuses, *status) {
		return usagef("unknown run status %q; use %s", *status, strings.Join(runStatuses, ", "))
	}
	if err := limitFlag(*limit, runsListMax); err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	runs, err := workflow.ListRuns(ctx, pool, workflow.RunFilter{Status: *status, Workflow: *wf, Limit: *limit})
	if err != nil {
		return err
	}
	if runs == nil {
		runs = []*workflow.RunInfo{}
	}
	return c.emit(runs, func(w *tabwriter.Writer) {
		if len(runs) == 0 {
			row(w, "no runs")
			return
		}
		row(w, "ID", "WORKFLOW", "STATUS", "CREATED", "DURATION", "ERROR")
		for _, r := range runs {
			row(w, r.ID, r.Workflow, r.Status, at(r.CreatedAt), between(r.StartedAt, r.FinishedAt), orDash(firstLine(r.Error, clipDefault)))
		}
	})
}

// runID reads the run ID argument.
func runID(rest []string) (string, error) {
	if err := wantArgs(rest, "ID"); err != nil {
		return "", err
	}
	if _, err := uuid.Parse(rest[0]); err != nil {
		return "", usagef("invalid run ID %q: a run ID is a UUID", rest[0])
	}
	return rest[0], nil
}

// runError turns the engine's errors about a run into one plain sentence.
func runError(ctx context.Context, pool *pgxpool.Pool, id string, err error) error {
	switch {
	case errors.Is(err, workflow.ErrRunNotFound):
		return fmt.Errorf("run %s not found", id)
	case errors.Is(err, workflow.ErrRunFinished):
		return fmt.Errorf("run %s is already %s; only an unfinished run can be cancelled", id, runStatus(ctx, pool, id))
	case errors.Is(err, workflow.ErrRunBeingDeleted):
		return fmt.Errorf("run %s is being deleted by retention, having finished more than the retention ago; it can no longer be retried", id)
	case errors.Is(err, workflow.ErrRunNotRetryable):
		return fmt.Errorf("run %s is %s; only a failed or cancelled run can be retried", id, runStatus(ctx, pool, id))
	}
	return err
}

func runStatus(ctx context.Context, pool *pgxpool.Pool, id string) string {
	if r, err := workflow.Inspect(ctx, pool, id); err == nil {
		return r.Status
	}
	return "finished"
}

func runsShow(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs show")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := runID(rest)
	if err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	run, err := workflow.Inspect(ctx, pool, id)
	if err != nil {
		return runError(ctx, pool, id, err)
	}
	now := time.Now()
	if err := c.emit(run, func(w *tabwriter.Writer) { printRun(w, run, now) }); err != nil || c.json {
		return err
	}
	// Below the table, so that multi-line errors and their tabs stay out
	// of its columns.
	return printFailures(c.stdout, run)
}

// printRun writes a run's summary and then its tree: each task with its
// steps, delays and waits, and below them the child tasks it started,
// indented. now is the moment the pending waits' timeouts are counted
// from.
func printRun(w io.Writer, r *workflow.RunInfo, now time.Time) {
	row(w, "run:", r.ID)
	row(w, "workflow:", r.Workflow)
	row(w, "status:", r.Status)
	row(w, "trace id:", orDash(r.TraceID))
	if r.IdempotencyKey != "" {
		row(w, "idempotency key:", r.IdempotencyKey)
	}
	row(w, "created:", at(r.CreatedAt))
	row(w, "started:", ts(r.StartedAt))
	row(w, "finished:", ts(r.FinishedAt))
	row(w, "duration:", between(r.StartedAt, r.FinishedAt))
	if r.DeadlineAt != nil || r.Timeout > 0 {
		row(w, "deadline:", fmt.Sprintf("%s (timeout %s)", ts(r.DeadlineAt), shortDuration(r.Timeout)))
	}
	if len(r.Input) > 0 {
		row(w, "input:", clip(string(r.Input), clipDefault))
	}
	if len(r.Output) > 0 {
		row(w, "output:", clip(string(r.Output), clipDefault))
	}
	if r.Error != "" {
		row(w, "error:", firstLine(r.Error, clipDefault))
	}
	if len(r.Tasks) == 0 {
		return
	}
	fmt.Fprintln(w)
	row(w, "TASK / STEP", "KIND", "STATUS", "ATTEMPTS", "DURATION", "DETAIL")

	children := map[string][]*workflow.TaskInfo{}
	known := map[string]bool{}
	for i := range r.Tasks {
		known[r.Tasks[i].ID] = true
	}
	var roots []*workflow.TaskInfo
	for i := range r.Tasks {
		t := &r.Tasks[i]
		if t.ParentID == "" || !known[t.ParentID] {
			roots = append(roots, t)
			continue
		}
		children[t.ParentID] = append(children[t.ParentID], t)
	}
	for _, t := range roots {
		printTask(w, t, children, 0, now)
	}
	printDAGs(w, r)
}

// printDAGs draws each DAG of a run below its task tree: the nodes in
// topological layers, each with the nodes it waits for ("index ← language,
// summary"), its status, and why it was skipped, or the first line of its
// error, or how many dependencies it still awaits.
func printDAGs(w io.Writer, r *workflow.RunInfo) {
	for _, dag := range admin.DAGs(r.Tasks) {
		nodes := map[string]*workflow.TaskInfo{}
		count := 0
		for i := range r.Tasks {
			if t := &r.Tasks[i]; t.Node && t.ParentID == dag.TaskID {
				nodes[t.Key] = t
				count++
			}
		}
		fmt.Fprintln(w)
		row(w, fmt.Sprintf("DAG %s (task %s): %s in %s", dag.Workflow, dag.TaskKey, counted(count, "node"), counted(len(dag.Layers), "layer")))
		row(w, "LAYER", "NODE ← DEPENDENCIES", "STATUS", "DETAIL")
		for i, layer := range dag.Layers {
			for j, name := range layer {
				n := nodes[name]
				num := ""
				if j == 0 {
					num = fmt.Sprint(i + 1)
				}
				node := n.Key
				if n.OnFailure {
					node += " (if the DAG fails)"
				} else if len(n.DependsOn) > 0 {
					node += " ← " + strings.Join(n.DependsOn, ", ")
				}
				row(w, num, node, mark(n.Status), nodeDetail(n))
			}
		}
	}
}

// counted writes n things: "1 node", "3 nodes".
func counted(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// nodeDetail says what a DAG node's status alone does not: why it was
// skipped, what its error was, or how many dependencies a blocked node
// still awaits.
func nodeDetail(n *workflow.TaskInfo) string {
	switch {
	case n.SkipReason != "":
		return n.SkipReason
	case n.Error != "":
		return firstLine(n.Error, clipDefault)
	case n.Status == "blocked" && n.Remaining > 0:
		return fmt.Sprintf("awaiting %d of %d", n.Remaining, len(n.DependsOn))
	}
	return "-"
}

// treeEntry is a step or a child task under a task, placed in time.
type treeEntry struct {
	at   *time.Time
	step *workflow.StepInfo
	task *workflow.TaskInfo
}

func printTask(w io.Writer, t *workflow.TaskInfo, children map[string][]*workflow.TaskInfo, depth int, now time.Time) {
	indent := strings.Repeat("  ", depth)
	detail := t.Workflow
	if t.Turns == 1 {
		detail += ", 1 turn"
	} else {
		detail += fmt.Sprintf(", %d turns", t.Turns)
	}
	if t.Status == "waiting" && t.Remaining > 0 {
		detail += fmt.Sprintf(", awaiting %d", t.Remaining)
	}
	if t.Error != "" {
		detail += ": " + firstLine(t.Error, clipDefault)
	}
	if t.SkipReason != "" {
		detail += ": " + t.SkipReason
	}
	row(w, indent+t.Key, "task", mark(t.Status), t.Attempt, between(t.StartedAt, t.FinishedAt), detail)

	// Steps are recorded in order; a child task goes where it was created
	// among them, so the tree reads in the order the task did things.
	var entries []treeEntry
	for i := range t.Steps {
		s := &t.Steps[i]
		e := treeEntry{step: s, at: s.StartedAt}
		if s.Kind == "delay" || e.at == nil {
			e.at = s.ResumeAt
		}
		if e.at == nil {
			e.at = s.FinishedAt
		}
		entries = append(entries, e)
	}
	for _, k := range children[t.ID] {
		created := k.CreatedAt
		entries = append(entries, treeEntry{task: k, at: &created})
	}
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i].at, entries[j].at
		if a == nil || b == nil {
			return a != nil && b == nil
		}
		return a.Before(*b)
	})
	inner := indent + "  "
	for _, e := range entries {
		if e.task != nil {
			printTask(w, e.task, children, depth+1, now)
			continue
		}
		s := e.step
		if (s.Kind == "signal" || s.Kind == "event") && s.Status == "waiting" {
			row(w, inner+s.Name, s.Kind, s.Status, "-", "-", waitDetail(s, now))
			continue
		}
		switch s.Kind {
		case "delay":
			detail := "until " + ts(s.ResumeAt)
			if s.Error != "" {
				detail += ": " + firstLine(s.Error, clipDefault)
			}
			row(w, inner+s.Name, "delay", mark(s.Status), "-", "-", detail)
		case "detached":
			// The start of a detached child: its output is the child's
			// run ID.
			var runID string
			_ = json.Unmarshal(s.Output, &runID)
			row(w, inner+s.Name, "detached", mark(s.Status), "-", "-", "run "+orDash(runID))
		default:
			row(w, inner+s.Name, s.Kind, mark(s.Status), s.Attempts, between(s.StartedAt, s.FinishedAt), orDash(firstLine(s.Error, clipDefault)))
		}
	}
	// A step without a retry policy whose error failed the task has no
	// record of its own; the task's error names it.
	if t.FailedStep != "" && !recorded(t, t.FailedStep) {
		row(w, inner+t.FailedStep, "step", mark("failed"), t.Attempt, "-", orDash(firstLine(t.Error, clipDefault)))
	}
}

// filterClip is how many characters of an event wait's filter the tree
// shows; --json shows all of it.
const filterClip = 60

// waitDetail says what a pending wait on a message waits for and when it
// times out: `waiting on signal "send-now" (times out in 3m12s, at …)`,
// `waiting on event "feeds" filter payload.id == input.id (no timeout)`.
func waitDetail(s *workflow.StepInfo, now time.Time) string {
	detail := fmt.Sprintf("waiting on %s %q", s.Kind, s.WaitOn)
	if s.Filter != "" {
		detail += " filter " + clip(s.Filter, filterClip)
	}
	return detail + " (" + timeoutIn(s.ResumeAt, now) + ")"
}

// timeoutIn says when a wait times out, counted from now: in how long and
// at what time, or how long ago its timeout passed while it has not been
// woken yet, or that it has none.
func timeoutIn(at *time.Time, now time.Time) string {
	if at == nil {
		return "no timeout"
	}
	d := at.Sub(now)
	if d <= 0 {
		return fmt.Sprintf("timeout passed %s ago, at %s", shortDuration(wholeSeconds(-d)), ts(at))
	}
	return fmt.Sprintf("times out in %s, at %s", shortDuration(wholeSeconds(d)), ts(at))
}

// wholeSeconds rounds a positive duration to whole seconds, and one under
// half a second up to one second, so that a wait never shows "0s".
func wholeSeconds(d time.Duration) time.Duration {
	if r := d.Round(time.Second); r > 0 {
		return r
	}
	return time.Second
}

// shortDuration writes d without its zero trailing units: "1h" rather
// than "1h0m0s", "1h30m", "3m12s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// recorded reports whether task t has a recorded step of that name.
func recorded(t *workflow.TaskInfo, name string) bool {
	for i := range t.Steps {
		if t.Steps[i].Name == name {
			return true
		}
	}
	return false
}

// runEngine builds a workflow engine that is never started: it serves the
// operations that act on runs (cancel, retry) from this process.
func runEngine(pool *pgxpool.Pool) (*workflow.Engine, error) {
	return workflow.NewEngine(pool, &workflow.Config{
		Queue:                 &queue.Config{Logger: quiet, MaintenanceDisabled: true},
		DisableDelayProcessor: true,
		Logger:                quiet,
	})
}

func runsCancel(ctx context.Context, c *cli, args []string) error {
	return runsAct(ctx, c, "cancel", args, func(eng *workflow.Engine, ctx context.Context, id string) error {
		err := eng.Cancel(ctx, id)
		var tre *workflow.TurnsRunningError
		if errors.As(err, &tre) {
			// The run is cancelled all the same: only turns whose code
			// ignores its context, or whose process died before River
			// rescues them, still run, and record nothing when they end.
			fmt.Fprintf(c.stderr, "braid runs: warning: run %s is cancelled, but %s still running after %s: its code does not return when its context is cancelled, or its process died\n",
				id, counted(tre.Running, "turn"), tre.Waited)
			return nil
		}
		return err
	}, "cancelled")
}

func runsRetry(ctx context.Context, c *cli, args []string) error {
	return runsAct(ctx, c, "retry", args, (*workflow.Engine).Retry, "retried")
}

// runsAct runs an engine operation on one run and prints the run as it is
// afterwards.
func runsAct(ctx context.Context, c *cli, name string, args []string, op func(*workflow.Engine, context.Context, string) error, done string) error {
	fs := c.flags("runs " + name)
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := runID(rest)
	if err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	eng, err := runEngine(pool)
	if err != nil {
		return err
	}
	err = op(eng, ctx, id)
	_ = eng.Stop(context.WithoutCancel(ctx))
	if err != nil {
		return runError(ctx, pool, id, err)
	}
	run, err := workflow.Inspect(ctx, pool, id)
	if err != nil {
		return runError(ctx, pool, id, err)
	}
	return c.emit(run, func(w *tabwriter.Writer) {
		row(w, fmt.Sprintf("%s run %s (%s); it is now %s", done, run.ID, run.Workflow, run.Status))
	})
}

// failedMark marks the rows of failed tasks and steps in a run's tree.
const failedMark = "✗ "

// mark returns a status as the tree shows it: a failed one marked, so that
// the failed step stands out among the completed ones.
func mark(status string) string {
	if status == "failed" {
		return failedMark + status
	}
	return status
}

// failure is a failed task or step of a run, with its full error.
type failure struct {
	what, err string
}

// failures lists a run's failed tasks and steps in the order of its tree
// (a task before its steps, then its child tasks), with their full
// errors, and the run's own error when no task carries the same text.
func failures(r *workflow.RunInfo) []failure {
	var out []failure
	seen := map[string]bool{}
	for i := range r.Tasks {
		t := &r.Tasks[i]
		if t.Error != "" && (t.Status == "failed" || t.Status == "cancelled") {
			seen[t.Error] = true
			// A task that failed because a step did carries the step's
			// error; a long one, such as a panic's stack, is printed once,
			// under the step.
			text := t.Error
			for j := range t.Steps {
				s := &t.Steps[j]
				if strings.Contains(s.Error, "\n") && strings.Contains(text, s.Error) {
					head, _, _ := strings.Cut(s.Error, "\n")
					text = strings.Replace(text, s.Error, fmt.Sprintf("%s (in full under %s %s below)", head, s.Kind, s.Name), 1)
				}
			}
			what := fmt.Sprintf("task %s (%s, %s, attempt %d)", t.Key, t.Workflow, t.Status, t.Attempt)
			if t.FailedStep != "" && !recorded(t, t.FailedStep) {
				what += ", in step " + t.FailedStep
			}
			out = append(out, failure{what, text})
		}
		for j := range t.Steps {
			s := &t.Steps[j]
			if s.Error == "" {
				continue
			}
			attempts := fmt.Sprintf("%d attempts", s.Attempts)
			if s.Attempts == 1 {
				attempts = "1 attempt"
			}
			out = append(out, failure{fmt.Sprintf("%s %s of task %s (%s, %s)", s.Kind, s.Name, t.Key, s.Status, attempts), s.Error})
		}
	}
	if r.Error != "" && !seen[r.Error] {
		out = append([]failure{{fmt.Sprintf("run (%s)", r.Status), r.Error}}, out...)
	}
	return out
}

// printFailures writes each failed task and step of a run with its full
// error, a panic's stack included, indented under a line naming it.
func printFailures(w io.Writer, r *workflow.RunInfo) error {
	list := failures(r)
	if len(list) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\nFAILURES\n")
	for _, f := range list {
		fmt.Fprintf(&b, "\n%s%s:\n", failedMark, termtext.Line(f.what))
		for _, line := range strings.Split(strings.TrimRight(f.err, "\n"), "\n") {
			b.WriteString(strings.TrimRight("    "+termtext.Line(line), " \t"))
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
