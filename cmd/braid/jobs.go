package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
)

func init() {
	register(&command{
		name:    "jobs",
		summary: "inspect and steer queue jobs and dead letters: jobs stats|list|dead|retry|priority",
		run: func(ctx context.Context, c *cli, args []string) error {
			return subcommand(ctx, c, "jobs", args, map[string]func(context.Context, *cli, []string) error{
				"stats":    jobsStats,
				"list":     jobsList,
				"dead":     jobsDead,
				"retry":    jobsRetry,
				"priority": jobsPriority,
			})
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
			at(j.ScheduledAt), orDash(clip(j.LastError, clipDefault)))
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
	for i, d := range dead {
		views[i] = viewJob(d.JobRow)
		views[i].LastError = d.LastError.Error
	}
	return c.emit(views, func(w *tabwriter.Writer) {
		if len(views) == 0 {
			row(w, "no dead letters")
			return
		}
		row(w, "ID", "KIND", "QUEUE", "ATTEMPTS", "DISCARDED", "LAST ERROR")
		for _, j := range views {
			row(w, j.ID, j.Kind, j.Queue, fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts), ts(j.FinalizedAt), orDash(clip(j.LastError, clipDefault)))
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
	jobs, err := q.Retry(ctx, ids...)
	if err != nil {
		return jobError(ctx, q, ids, err)
	}
	views := viewJobs(jobs)
	return c.emit(views, func(w *tabwriter.Writer) { jobTable(w, views) })
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
