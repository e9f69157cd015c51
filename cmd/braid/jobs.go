package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/termtext"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

func init() {
	register(&command{
		name:    "jobs",
		summary: "inspect and steer queue jobs and dead letters",
		subs: []sub{
			{"stats", "", "count jobs by queue and state", jobsStats},
			{"list", "", "list jobs, newest first", jobsList},
			{"show", "ID", "show a job with its progress, its errors and, for a turn job, its run", jobsShow},
			{"dead", "", "list dead letters (discarded jobs), with the run of each turn job", jobsDead},
			{"retry", "ID...", "retry jobs; a turn job retries its run", jobsRetry},
			{"priority", "ID LEVEL", "set an unfinished job's priority: critical, high, normal, low or 1 to 4", jobsPriority},
		},
	})
}

// jobStates are River's job states in the order a job goes through them,
// finished ones last.
var jobStates = []rivertype.JobState{
	rivertype.JobStatePending,
	rivertype.JobStateScheduled,
	rivertype.JobStateAvailable,
	rivertype.JobStateRunning,
	rivertype.JobStateRetryable,
	rivertype.JobStateCompleted,
	rivertype.JobStateCancelled,
	rivertype.JobStateDiscarded,
}

// jobView is a job as the CLI prints it in JSON.
type jobView struct {
	ID          int64                    `json:"id"`
	Kind        string                   `json:"kind"`
	Queue       string                   `json:"queue"`
	State       rivertype.JobState       `json:"state"`
	Priority    int                      `json:"priority"`
	Attempt     int                      `json:"attempt"`
	MaxAttempts int                      `json:"max_attempts"`
	Args        json.RawMessage          `json:"args,omitempty"`
	Metadata    json.RawMessage          `json:"metadata,omitempty"`
	Tags        []string                 `json:"tags,omitempty"`
	CreatedAt   time.Time                `json:"created_at"`
	ScheduledAt time.Time                `json:"scheduled_at"`
	AttemptedAt *time.Time               `json:"attempted_at,omitempty"`
	FinalizedAt *time.Time               `json:"finalized_at,omitempty"`
	Errors      []rivertype.AttemptError `json:"errors,omitempty"`
	// LastError is the latest attempt's error.
	LastError string `json:"last_error,omitempty"`
	// Run is the run of a turn job (kind workflow.TaskKind) whose task
	// still exists.
	Run *workflow.TurnRun `json:"run,omitempty"`
	// Progress is the job's latest progress report (jobs show only).
	Progress *queue.JobProgress `json:"progress,omitempty"`
	// Retried says what jobs retry retried: "job" for the job itself, or
	// "run" for a turn job, whose run was retried.
	Retried string `json:"retried,omitempty"`
}

// addRuns fills in the run of each turn job among views, from jobs.
func addRuns(ctx context.Context, pool *pgxpool.Pool, jobs []*rivertype.JobRow, views []jobView) error {
	runs, err := workflow.TurnRuns(ctx, pool, jobs)
	if err != nil {
		return err
	}
	for i := range views {
		if r, ok := runs[views[i].ID]; ok {
			views[i].Run = &r
		}
	}
	return nil
}

// runCell formats a turn job's run for tables: its ID and workflow, or "-".
func runCell(r *workflow.TurnRun) string {
	if r == nil {
		return "-"
	}
	return r.RunID + " (" + r.Workflow + ")"
}

func viewJob(j *rivertype.JobRow) jobView {
	v := jobView{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: j.State, Priority: j.Priority,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Tags: j.Tags,
		CreatedAt: j.CreatedAt, ScheduledAt: j.ScheduledAt, AttemptedAt: j.AttemptedAt, FinalizedAt: j.FinalizedAt,
		Errors: j.Errors,
	}
	if json.Valid(j.EncodedArgs) {
		v.Args = j.EncodedArgs
	}
	if json.Valid(j.Metadata) {
		v.Metadata = j.Metadata
	}
	if n := len(j.Errors); n > 0 {
		v.LastError = j.Errors[n-1].Error
	}
	return v
}

func viewJobs(jobs []*rivertype.JobRow) []jobView {
	out := make([]jobView, len(jobs))
	for i, j := range jobs {
		out[i] = viewJob(j)
	}
	return out
}

// priorityName names River's priority level, or gives its number.
func priorityName(p int) string {
	if queue.Priority(p).Validate() == nil {
		return queue.Priority(p).String()
	}
	return strconv.Itoa(p)
}

// jobTable writes jobs as a table.
func jobTable(w *tabwriter.Writer, jobs []jobView) {
	if len(jobs) == 0 {
		row(w, "no jobs")
		return
	}
	row(w, "ID", "KIND", "QUEUE", "STATE", "PRIORITY", "ATTEMPT", "SCHEDULED", "LAST ERROR")
	for _, j := range jobs {
		row(w, j.ID, j.Kind, j.Queue, j.State, priorityName(j.Priority), fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts),
			at(j.ScheduledAt), orDash(firstLine(j.LastError, clipDefault)))
	}
}

// openQueue connects and builds an insert-only queue, which is never
// started.
func (c *cli) openQueue(ctx context.Context) (*pgxpool.Pool, *queue.Queue, error) {
	pool, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	q, err := queue.New(pool, &queue.Config{Logger: quiet, MaintenanceDisabled: true})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, q, nil
}

// statsView is queue statistics as the CLI prints them in JSON.
type statsView struct {
	Total   int64                                   `json:"total"`
	ByState map[rivertype.JobState]int64            `json:"by_state"`
	ByQueue map[string]map[rivertype.JobState]int64 `json:"by_queue"`
}

func jobsStats(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("jobs stats")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	pool, q, err := c.openQueue(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	v := statsView{Total: st.Total, ByState: st.ByState, ByQueue: st.ByQueue}
	return c.emit(v, func(w *tabwriter.Writer) {
		header := []any{"QUEUE"}
		for _, s := range jobStates {
			header = append(header, strings.ToUpper(string(s)))
		}
		row(w, append(header, "TOTAL")...)
		queues := make([]string, 0, len(st.ByQueue))
		for name := range st.ByQueue {
			queues = append(queues, name)
		}
		sort.Strings(queues)
		line := func(name string, counts map[rivertype.JobState]int64) {
			cells := []any{name}
			var total int64
			for _, s := range jobStates {
				cells = append(cells, counts[s])
				total += counts[s]
			}
			row(w, append(cells, total)...)
		}
		for _, name := range queues {
			line(name, st.ByQueue[name])
		}
		line("(all)", st.ByState)
	})
}

func jobsList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("jobs list")
	states := make([]string, len(jobStates))
	for i, s := range jobStates {
		states[i] = string(s)
	}
	state := fs.String("state", "", "only jobs in this state: "+strings.Join(states, ", "))
	kind := fs.String("kind", "", "only jobs of this kind")
	queueName := fs.String("queue", "", "only jobs of this queue")
	limit := fs.Int("limit", queue.ListLimitDefault, fmt.Sprintf("the most jobs to list, newest first (1 to %d)", queue.ListLimitMax))
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	if *state != "" && !slices.Contains(states, *state) {
		return usagef("unknown job state %q; use %s", *state, strings.Join(states, ", "))
	}
	if err := limitFlag(*limit, queue.ListLimitMax); err != nil {
		return err
	}
	pool, q, err := c.openQueue(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	jobs, err := q.Jobs(ctx, queue.JobFilter{State: rivertype.JobState(*state), Kind: *kind, Queue: *queueName, Limit: *limit})
	if err != nil {
		return err
	}
	views := viewJobs(jobs)
	return c.emit(views, func(w *tabwriter.Writer) { jobTable(w, views) })
}

func jobsDead(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("jobs dead")
	kind := fs.String("kind", "", "only dead letters of this kind")
	queueName := fs.String("queue", "", "only dead letters of this queue")
	limit := fs.Int("limit", queue.ListLimitDefault, fmt.Sprintf("the most dead letters to list, most recent first (1 to %d)", queue.ListLimitMax))
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	if err := limitFlag(*limit, queue.ListLimitMax); err != nil {
		return err
	}
	pool, q, err := c.openQueue(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	dead, err := q.DeadLetters(ctx, queue.DeadLetterFilter{Kind: *kind, Queue: *queueName, Limit: *limit})
	if err != nil {
		return err
	}
	views := make([]jobView, len(dead))
	rows := make([]*rivertype.JobRow, len(dead))
	for i, d := range dead {
		views[i] = viewJob(d.JobRow)
		views[i].LastError = d.LastError.Error
		rows[i] = d.JobRow
	}
	if err := addRuns(ctx, pool, rows, views); err != nil {
		return err
	}
	return c.emit(views, func(w *tabwriter.Writer) {
		if len(views) == 0 {
			row(w, "no dead letters")
			return
		}
		row(w, "ID", "KIND", "QUEUE", "ATTEMPTS", "DISCARDED", "RUN", "LAST ERROR")
		for _, j := range views {
			row(w, j.ID, j.Kind, j.Queue, fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts), ts(j.FinalizedAt), runCell(j.Run), orDash(firstLine(j.LastError, clipDefault)))
		}
	})
}

// jobIDs reads job ID arguments.
func jobIDs(rest []string) ([]int64, error) {
	ids := make([]int64, 0, len(rest))
	for _, s := range rest {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return nil, usagef("invalid job ID %q: a job ID is a positive integer", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// jobError names the job an error is about when the error says it was not
// found.
func jobError(ctx context.Context, q *queue.Queue, ids []int64, err error) error {
	if !errors.Is(err, rivertype.ErrNotFound) {
		return err
	}
	for _, id := range ids {
		if _, gerr := q.River().JobGet(ctx, id); errors.Is(gerr, rivertype.ErrNotFound) {
			return fmt.Errorf("job %d not found", id)
		}
	}
	return err
}

func jobsRetry(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("jobs retry")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usagef("missing argument ID: give one or more job IDs")
	}
	if len(rest) > queue.IDsMax {
		return usagef("%d job IDs given; the limit is %d", len(rest), queue.IDsMax)
	}
	ids, err := jobIDs(rest)
	if err != nil {
		return err
	}
	pool, q, err := c.openQueue(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	// A turn job is retried through its run: retried alone it would find
	// its task failed and do nothing. Look every job up first, so that an
	// unknown ID or a run that cannot be retried changes nothing.
	rows := make([]*rivertype.JobRow, 0, len(ids))
	for i, id := range ids {
		if slices.Contains(ids[:i], id) {
			continue
		}
		j, err := q.River().JobGet(ctx, id)
		if errors.Is(err, rivertype.ErrNotFound) {
			return fmt.Errorf("job %d not found", id)
		}
		if err != nil {
			return err
		}
		rows = append(rows, j)
	}
	runs, err := workflow.TurnRuns(ctx, pool, rows)
	if err != nil {
		return err
	}
	var bare []int64
	var runIDs []string
	for _, j := range rows {
		r, ok := runs[j.ID]
		switch {
		case ok:
			if !slices.Contains(runIDs, r.RunID) {
				runIDs = append(runIDs, r.RunID)
			}
		case j.Kind == workflow.TaskKind:
			return fmt.Errorf("job %d is a turn job whose task no longer exists (its run was deleted); there is nothing to retry", j.ID)
		default:
			bare = append(bare, j.ID)
		}
	}
	for _, id := range runIDs {
		if info, err := workflow.Inspect(ctx, pool, id); err != nil {
			return runError(ctx, pool, id, err)
		} else if info.Status != "failed" && info.Status != "cancelled" {
			return fmt.Errorf("run %s is %s; only a failed or cancelled run can be retried, so its turn jobs cannot be", id, info.Status)
		}
	}

	// The runs go first, one transaction each: a run's retry may wait for
	// its turns to end, and fail or be interrupted meanwhile, which then
	// leaves every plain job as it was. The plain jobs go last, together.
	status := map[string]string{}
	if len(runIDs) > 0 {
		eng, err := runEngine(pool)
		if err != nil {
			return err
		}
		for i, id := range runIDs {
			if err = eng.Retry(ctx, id); err != nil {
				err = runError(ctx, pool, id, err)
				if i > 0 {
					err = fmt.Errorf("%w (run %s was retried before it; no other job was)", err, strings.Join(runIDs[:i], ", run "))
				}
				break
			}
			status[id] = runStatus(ctx, pool, id)
		}
		_ = eng.Stop(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
	}
	byID := map[int64]jobView{}
	if len(bare) > 0 {
		jobs, err := q.Retry(ctx, bare...)
		if err != nil {
			err = jobError(ctx, q, bare, err)
			if len(runIDs) > 0 {
				err = fmt.Errorf("%w (run %s was retried; the other jobs were not)", err, strings.Join(runIDs, ", run "))
			}
			return err
		}
		for _, j := range jobs {
			v := viewJob(j)
			v.Retried = "job"
			byID[j.ID] = v
		}
	}
	views := make([]jobView, 0, len(rows))
	for _, j := range rows {
		if v, ok := byID[j.ID]; ok {
			views = append(views, v)
			continue
		}
		r := runs[j.ID]
		v := viewJob(j)
		v.Run, v.Retried = &r, "run"
		views = append(views, v)
	}
	return c.emit(views, func(w *tabwriter.Writer) {
		var plain []jobView
		for _, v := range views {
			if v.Retried == "job" {
				plain = append(plain, v)
			}
		}
		if len(plain) > 0 {
			jobTable(w, plain)
		}
		for _, v := range views {
			if v.Retried == "run" {
				row(w, fmt.Sprintf("job %d is a turn job of run %s (%s): retried the run, which is now %s", v.ID, v.Run.RunID, v.Run.Workflow, status[v.Run.RunID]))
			}
		}
	})
}

// progressBarWidth is the width of the bar jobs show draws.
const progressBarWidth = 20

// progressBar draws a percentage as a bar of progressBarWidth cells.
func progressBar(percent int) string {
	n := max(0, min(progressBarWidth, percent*progressBarWidth/100))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", progressBarWidth-n) + "]"
}

func jobsShow(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("jobs show")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "ID"); err != nil {
		return err
	}
	ids, err := jobIDs(rest)
	if err != nil {
		return err
	}
	pool, q, err := c.openQueue(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	job, err := q.River().JobGet(ctx, ids[0])
	if errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("job %d not found", ids[0])
	}
	if err != nil {
		return err
	}
	views := viewJobs([]*rivertype.JobRow{job})
	if err := addRuns(ctx, pool, []*rivertype.JobRow{job}, views); err != nil {
		return err
	}
	v := &views[0]
	p, err := q.JobProgress(ctx, job.ID)
	switch {
	case err == nil:
		v.Progress = p
	case !errors.Is(err, rivertype.ErrNotFound):
		return err
	}
	if c.json {
		return c.emit(v, nil)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	printJob(w, v)
	if err := w.Flush(); err != nil {
		return err
	}
	// Below the table, so that multi-line errors and their tabs stay out
	// of its columns.
	return printAttemptErrors(c.stdout, v.Errors)
}

// jobArgsClip is how many characters of a job's args jobs show prints;
// --json prints them all.
const jobArgsClip = 200

// printJob writes a job's fields, its run and its progress.
func printJob(w io.Writer, v *jobView) {
	row(w, "job:", v.ID)
	row(w, "kind:", v.Kind)
	row(w, "queue:", v.Queue)
	row(w, "state:", v.State)
	row(w, "priority:", priorityName(v.Priority))
	row(w, "attempt:", fmt.Sprintf("%d/%d", v.Attempt, v.MaxAttempts))
	if len(v.Tags) > 0 {
		row(w, "tags:", strings.Join(v.Tags, ", "))
	}
	row(w, "created:", at(v.CreatedAt))
	row(w, "scheduled:", at(v.ScheduledAt))
	row(w, "attempted:", ts(v.AttemptedAt))
	row(w, "finalized:", ts(v.FinalizedAt))
	if len(v.Args) > 0 {
		row(w, "args:", clip(string(v.Args), jobArgsClip))
	}
	if v.Run != nil {
		row(w, "run:", runCell(v.Run))
		row(w, "task:", v.Run.TaskID)
	}
	switch p := v.Progress; {
	case p == nil:
		row(w, "progress:", "-")
	default:
		line := fmt.Sprintf("%s %d%%", progressBar(p.Percent), p.Percent)
		if p.Message != "" {
			line += " " + clip(p.Message, clipDefault)
		}
		row(w, "progress:", line)
		row(w, "reported:", fmt.Sprintf("%s by attempt %d", at(p.UpdatedAt), p.Attempt))
		if p.HeartbeatAt != nil {
			row(w, "heartbeat:", ts(p.HeartbeatAt))
		}
	}
	if len(v.Errors) == 0 {
		row(w, "errors:", "-")
	} else {
		row(w, "errors:", fmt.Sprintf("%d, below", len(v.Errors)))
	}
}

// printAttemptErrors writes each attempt's error in full, with its trace,
// indented under a line naming the attempt.
func printAttemptErrors(w io.Writer, errs []rivertype.AttemptError) error {
	if len(errs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\nERRORS\n")
	for _, e := range errs {
		fmt.Fprintf(&b, "\nattempt %d at %s:\n", e.Attempt, at(e.At))
		text := strings.TrimRight(e.Error, "\n")
		if t := strings.TrimSpace(e.Trace); t != "" {
			text += "\n" + t
		}
		for _, line := range strings.Split(text, "\n") {
			b.WriteString(strings.TrimRight("    "+termtext.Line(line), " \t"))
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func jobsPriority(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("jobs priority")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "ID", "LEVEL"); err != nil {
		return err
	}
	ids, err := jobIDs(rest[:1])
	if err != nil {
		return err
	}
	level, err := queue.ParsePriority(rest[1])
	if err != nil {
		return usagef("unknown priority %q; use critical, high, normal, low or 1 to 4", rest[1])
	}
	pool, q, err := c.openQueue(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	job, err := q.SetPriority(ctx, ids[0], level)
	if errors.Is(err, queue.ErrJobFinalized) {
		if j, gerr := q.River().JobGet(ctx, ids[0]); gerr == nil {
			return fmt.Errorf("job %d is %s; only an unfinished job takes a new priority", ids[0], j.State)
		}
	}
	if err != nil {
		return jobError(ctx, q, ids, err)
	}
	views := viewJobs([]*rivertype.JobRow{job})
	return c.emit(views[0], func(w *tabwriter.Writer) { jobTable(w, views) })
}
