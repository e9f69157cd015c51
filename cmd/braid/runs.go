package main

import (
	"context"
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

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

func init() {
	register(&command{
		name:    "runs",
		summary: "list, inspect, cancel and retry workflow runs: runs list|show|cancel|retry",
		run: func(ctx context.Context, c *cli, args []string) error {
			return subcommand(ctx, c, "runs", args, map[string]func(context.Context, *cli, []string) error{
				"list":   runsList,
				"show":   runsShow,
				"cancel": runsCancel,
				"retry":  runsRetry,
			})
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
			row(w, r.ID, r.Workflow, r.Status, at(r.CreatedAt), between(r.StartedAt, r.FinishedAt), orDash(clip(r.Error, clipDefault)))
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
	return c.emit(run, func(w *tabwriter.Writer) { printRun(w, run) })
}

// printRun writes a run's summary and then its tree: each task with its
// steps and delays, and below them the child tasks it started, indented.
func printRun(w io.Writer, r *workflow.RunInfo) {
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
	if len(r.Input) > 0 {
		row(w, "input:", clip(string(r.Input), clipDefault))
	}
	if len(r.Output) > 0 {
		row(w, "output:", clip(string(r.Output), clipDefault))
	}
	if r.Error != "" {
		row(w, "error:", clip(r.Error, clipDefault))
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
		printTask(w, t, children, 0)
	}
}

// treeEntry is a step or a child task under a task, placed in time.
type treeEntry struct {
	at   *time.Time
	step *workflow.StepInfo
	task *workflow.TaskInfo
}

func printTask(w io.Writer, t *workflow.TaskInfo, children map[string][]*workflow.TaskInfo, depth int) {
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
		detail += ": " + clip(t.Error, clipDefault)
	}
	row(w, indent+t.Key, "task", t.Status, t.Attempt, between(t.StartedAt, t.FinishedAt), detail)

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
			printTask(w, e.task, children, depth+1)
			continue
		}
		s := e.step
		switch s.Kind {
		case "delay":
			detail := "until " + ts(s.ResumeAt)
			if s.Error != "" {
				detail += ": " + clip(s.Error, clipDefault)
			}
			row(w, inner+s.Name, "delay", s.Status, "-", "-", detail)
		default:
			row(w, inner+s.Name, s.Kind, s.Status, s.Attempts, between(s.StartedAt, s.FinishedAt), orDash(clip(s.Error, clipDefault)))
		}
	}
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
	return runsAct(ctx, c, "cancel", args, (*workflow.Engine).Cancel, "cancelled")
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
