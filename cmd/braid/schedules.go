package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
)

func init() {
	register(&command{
		name:    "schedules",
		summary: "manage cron schedules",
		subs: []sub{
			{"list", "", "list schedules by name", schedulesList},
			{"get", "NAME", "show a schedule with its last error", schedulesGet},
			{"create", "[NAME]", "create a schedule (the name as argument or --name)", schedulesCreate},
			{"update", "NAME", "change the given fields of a schedule", schedulesUpdate},
			{"toggle", "NAME", "enable a schedule, or disable it with --enabled=false", schedulesToggle},
			{"delete", "NAME", "delete a schedule", schedulesDelete},
		},
	})
}

// schedulesListMax bounds --limit of schedules list and recurring list.
const schedulesListMax = 10_000

// openScheduler connects and builds a scheduler that is never started: it
// manages rows, and fires nothing.
func (c *cli) openScheduler(ctx context.Context) (*pgxpool.Pool, *scheduler.Scheduler, error) {
	pool, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	s, err := scheduler.New(pool, &scheduler.Config{Logger: quiet})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, s, nil
}

// scheduleError turns the scheduler's errors about a schedule into one plain
// sentence.
func scheduleError(name string, err error) error {
	switch {
	case errors.Is(err, scheduler.ErrScheduleNotFound):
		return fmt.Errorf("schedule %q not found", name)
	case errors.Is(err, scheduler.ErrScheduleExists):
		return fmt.Errorf("schedule %q already exists; change it with `braid schedules update`", name)
	case errors.Is(err, scheduler.ErrInvalidExpression), errors.Is(err, scheduler.ErrInvalidSchedule):
		// Args over the cap and an unknown target among them.
		return &usageError{strings.TrimPrefix(err.Error(), "scheduler: ")}
	}
	return err
}

// scheduleErrorClip is how many characters of a schedule's last error
// schedules list shows; schedules get and --json show all of it.
const scheduleErrorClip = 60

// scheduleTarget formats a schedule's target for tables.
func scheduleTarget(s *scheduler.Schedule) string { return string(s.TargetType) + " " + s.Target }

func scheduleTable(w io.Writer, list []*scheduler.Schedule) {
	if len(list) == 0 {
		row(w, "no schedules")
		return
	}
	row(w, "NAME", "ENABLED", "EXPRESSION", "TIME ZONE", "TARGET", "NEXT RUN", "LAST RUN", "LAST ERROR")
	for _, s := range list {
		row(w, s.Name, yesNo(s.Enabled), s.Expression, s.TimeZone, scheduleTarget(s), at(s.NextRunAt), ts(s.LastRunAt),
			orDash(clip(s.LastError, scheduleErrorClip)))
	}
}

func printSchedule(w io.Writer, s *scheduler.Schedule) {
	row(w, "name:", s.Name)
	row(w, "description:", orDash(s.Description))
	row(w, "enabled:", yesNo(s.Enabled))
	row(w, "expression:", s.Expression)
	row(w, "time zone:", s.TimeZone)
	row(w, "target:", scheduleTarget(s))
	row(w, "args:", clip(string(s.Args), clipDefault))
	row(w, "queue:", s.Queue)
	row(w, "priority:", priorityName(s.Priority))
	if s.MaxAttempts > 0 {
		row(w, "max attempts:", s.MaxAttempts)
	}
	row(w, "overlap:", s.OverlapPolicy)
	row(w, "catch-up:", s.CatchUpPolicy)
	row(w, "next run:", at(s.NextRunAt))
	row(w, "last run:", ts(s.LastRunAt))
	switch {
	case s.LastJobID != nil:
		row(w, "last job:", *s.LastJobID)
	case s.LastRunID != "":
		row(w, "last run id:", s.LastRunID)
	}
	if s.LastError != "" {
		row(w, "last error:", clip(s.LastError, math.MaxInt)) // in full, on one line
		row(w, "last error at:", ts(s.LastErrorAt))
		row(w, "fire failures:", s.FireFailures)
		if s.RetryAt != nil {
			row(w, "retry at:", ts(s.RetryAt))
		}
	}
	row(w, "created by:", orDash(s.CreatedBy))
	row(w, "created:", at(s.CreatedAt))
	row(w, "updated:", at(s.UpdatedAt))
}

func schedulesList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("schedules list")
	var enabled optBool
	fs.Var(&enabled, "enabled", "only enabled schedules (--enabled) or disabled ones (--enabled=false)")
	limit := fs.Int("limit", 100, fmt.Sprintf("the most schedules to list, by name (1 to %d)", schedulesListMax))
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	if err := limitFlag(*limit, schedulesListMax); err != nil {
		return err
	}
	pool, s, err := c.openScheduler(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := s.List(ctx, &scheduler.ScheduleListParams{Enabled: enabled.v, Limit: *limit})
	if err != nil {
		return err
	}
	if list == nil {
		list = []*scheduler.Schedule{}
	}
	return c.emit(list, func(w *tabwriter.Writer) { scheduleTable(w, list) })
}

func schedulesGet(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("schedules get")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "NAME"); err != nil {
		return err
	}
	pool, s, err := c.openScheduler(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	sch, err := s.Get(ctx, rest[0])
	if err != nil {
		return scheduleError(rest[0], err)
	}
	return c.emit(sch, func(w *tabwriter.Writer) { printSchedule(w, sch) })
}

// scheduleFlags are the flags of schedules create and update.
type scheduleFlags struct {
	fs                                      *flag.FlagSet
	name, expression, timeZone, job, wf     string
	args, priority, queue, overlap, catchUp string
	description, createdBy                  string
	maxAttempts                             int
	disabled                                bool
}

func newScheduleFlags(c *cli, cmd string) *scheduleFlags {
	f := &scheduleFlags{fs: c.flags(cmd)}
	fs := f.fs
	fs.StringVar(&f.name, "name", "", "the schedule's unique name")
	fs.StringVar(&f.expression, "expression", "", `when it fires: @hourly, @daily, "@every 90s", "*/15 * * * *", …`)
	fs.StringVar(&f.timeZone, "time-zone", "", "the IANA time zone of the expression (default UTC)")
	fs.StringVar(&f.job, "job", "", "insert a job of this kind at each slot")
	fs.StringVar(&f.wf, "workflow", "", "start a run of this workflow at each slot")
	fs.StringVar(&f.args, "args", "", "the job's args (a JSON object) or the workflow's input, as JSON (default {})")
	fs.StringVar(&f.priority, "priority", "", "the job's priority: critical, high, normal, low or 1 to 4 (default normal)")
	fs.StringVar(&f.queue, "queue", "", fmt.Sprintf("the job's River queue (default %q)", scheduler.QueueDefault))
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "the job's max attempts (default River's)")
	fs.StringVar(&f.overlap, "overlap", "", "while an earlier fire is unfinished: skip or allow (default skip)")
	fs.StringVar(&f.catchUp, "catch-up", "", "missed slots: once, skip or all (default once)")
	fs.StringVar(&f.description, "description", "", "free text for operators")
	fs.StringVar(&f.createdBy, "created-by", "", "who created the schedule")
	fs.BoolVar(&f.disabled, "disabled", false, "create the schedule disabled (update: --disabled or --disabled=false)")
	return f
}

// set reports which flags were given.
func (f *scheduleFlags) set() map[string]bool {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}

// check validates the values of the flags that were given.
func (f *scheduleFlags) check(set map[string]bool) (prio int, args json.RawMessage, err error) {
	if set["job"] && set["workflow"] {
		return 0, nil, usagef("--job and --workflow are exclusive: a schedule has one target")
	}
	if set["job"] && f.job == "" || set["workflow"] && f.wf == "" {
		return 0, nil, usagef("the target of --job or --workflow is empty")
	}
	if set["args"] {
		if !json.Valid([]byte(f.args)) {
			return 0, nil, usagef("--args is not valid JSON: %s", clip(f.args, clipDefault))
		}
		args = json.RawMessage(f.args)
	}
	if set["priority"] {
		p, err := queue.ParsePriority(f.priority)
		if err != nil {
			return 0, nil, usagef("unknown priority %q; use critical, high, normal, low or 1 to 4", f.priority)
		}
		prio = int(p)
	}
	if set["max-attempts"] && f.maxAttempts < 1 {
		return 0, nil, usagef("--max-attempts %d must be at least 1", f.maxAttempts)
	}
	if set["overlap"] && f.overlap != string(scheduler.OverlapSkip) && f.overlap != string(scheduler.OverlapAllow) {
		return 0, nil, usagef("unknown overlap policy %q; use skip or allow", f.overlap)
	}
	if set["catch-up"] && f.catchUp != string(scheduler.CatchUpOnce) && f.catchUp != string(scheduler.CatchUpSkip) && f.catchUp != string(scheduler.CatchUpAll) {
		return 0, nil, usagef("unknown catch-up policy %q; use once, skip or all", f.catchUp)
	}
	return prio, args, nil
}

// parseExpression checks an expression and time zone before anything is
// written, so that a mistake is a usage error with the parser's reason.
func parseExpression(expr, zone string) error {
	if _, err := scheduler.Parse(expr, zone); err != nil {
		return &usageError{strings.TrimPrefix(err.Error(), "scheduler: ")}
	}
	return nil
}

func schedulesCreate(ctx context.Context, c *cli, args []string) error {
	f := newScheduleFlags(c, "schedules create")
	rest, err := parse(f.fs, args)
	if err != nil {
		return err
	}
	set := f.set()
	switch {
	case len(rest) > 1:
		return usagef("unexpected argument %q", rest[1])
	case len(rest) == 1 && set["name"] && rest[0] != f.name:
		return usagef("two names given: %q and --name %q", rest[0], f.name)
	case len(rest) == 1:
		f.name = rest[0]
	}
	if f.name == "" {
		return usagef("missing --name: a schedule needs a unique name")
	}
	if f.expression == "" {
		return usagef("missing --expression: say when the schedule fires, such as @daily or \"0 9 * * 1-5\"")
	}
	if f.job == "" && f.wf == "" {
		return usagef("missing target: give --job KIND or --workflow NAME")
	}
	prio, jsonArgs, err := f.check(set)
	if err != nil {
		return err
	}
	if err := parseExpression(f.expression, f.timeZone); err != nil {
		return err
	}
	p := &scheduler.ScheduleParams{
		Name: f.name, Description: f.description, Expression: f.expression, TimeZone: f.timeZone,
		TargetType: scheduler.TargetJob, Target: f.job, Queue: f.queue, Priority: prio,
		MaxAttempts: f.maxAttempts, Disabled: f.disabled, CreatedBy: f.createdBy,
		OverlapPolicy: scheduler.OverlapPolicy(f.overlap), CatchUpPolicy: scheduler.CatchUpPolicy(f.catchUp),
	}
	if jsonArgs != nil {
		p.Args = jsonArgs
	}
	if f.wf != "" {
		p.TargetType, p.Target = scheduler.TargetWorkflow, f.wf
	}
	pool, s, err := c.openScheduler(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	sch, err := s.Create(ctx, p)
	if err != nil {
		return scheduleError(f.name, err)
	}
	return c.emit(sch, func(w *tabwriter.Writer) { printSchedule(w, sch) })
}

func schedulesUpdate(ctx context.Context, c *cli, args []string) error {
	f := newScheduleFlags(c, "schedules update")
	rest, err := parse(f.fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "NAME"); err != nil {
		return err
	}
	name := rest[0]
	set := f.set()
	switch {
	case set["name"]:
		return usagef("--name cannot change: a schedule keeps its name (delete it and create another)")
	case set["created-by"]:
		return usagef("--created-by is set when a schedule is created and cannot change")
	}
	prio, jsonArgs, err := f.check(set)
	if err != nil {
		return err
	}
	var u scheduler.ScheduleUpdate
	n := 0
	str := func(flagName string, v string) *string {
		if !set[flagName] {
			return nil
		}
		n++
		return &v
	}
	u.Description = str("description", f.description)
	u.Expression = str("expression", f.expression)
	u.TimeZone = str("time-zone", f.timeZone)
	u.Queue = str("queue", f.queue)
	if t := str("job", f.job); t != nil {
		job := scheduler.TargetJob
		u.TargetType, u.Target = &job, t
	}
	if t := str("workflow", f.wf); t != nil {
		wf := scheduler.TargetWorkflow
		u.TargetType, u.Target = &wf, t
	}
	if jsonArgs != nil {
		u.Args = jsonArgs
		n++
	}
	if set["priority"] {
		u.Priority = &prio
		n++
	}
	if set["max-attempts"] {
		u.MaxAttempts = &f.maxAttempts
		n++
	}
	if set["disabled"] {
		enabled := !f.disabled
		u.Enabled = &enabled
		n++
	}
	if o := str("overlap", f.overlap); o != nil {
		p := scheduler.OverlapPolicy(*o)
		u.OverlapPolicy = &p
	}
	if cu := str("catch-up", f.catchUp); cu != nil {
		p := scheduler.CatchUpPolicy(*cu)
		u.CatchUpPolicy = &p
	}
	if n == 0 {
		return usagef("nothing to update: give at least one of --expression, --time-zone, --job, --workflow, --args, --priority, --queue, --max-attempts, --overlap, --catch-up, --description or --disabled")
	}
	pool, s, err := c.openScheduler(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if u.Expression != nil || u.TimeZone != nil {
		cur, err := s.Get(ctx, name)
		if err != nil {
			return scheduleError(name, err)
		}
		expr, zone := cur.Expression, cur.TimeZone
		if u.Expression != nil {
			expr = *u.Expression
		}
		if u.TimeZone != nil {
			zone = *u.TimeZone
		}
		if err := parseExpression(expr, zone); err != nil {
			return err
		}
	}
	sch, err := s.Update(ctx, name, &u)
	if err != nil {
		return scheduleError(name, err)
	}
	return c.emit(sch, func(w *tabwriter.Writer) { printSchedule(w, sch) })
}

func schedulesToggle(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("schedules toggle")
	enabled := fs.Bool("enabled", true, "enable the schedule (--enabled=false disables it)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "NAME"); err != nil {
		return err
	}
	pool, s, err := c.openScheduler(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	sch, err := s.Toggle(ctx, rest[0], *enabled)
	if err != nil {
		return scheduleError(rest[0], err)
	}
	return c.emit(sch, func(w *tabwriter.Writer) { scheduleTable(w, []*scheduler.Schedule{sch}) })
}

func schedulesDelete(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("schedules delete")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "NAME"); err != nil {
		return err
	}
	pool, s, err := c.openScheduler(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := s.Delete(ctx, rest[0]); err != nil {
		return scheduleError(rest[0], err)
	}
	return c.emit(map[string]string{"deleted": rest[0]}, func(w *tabwriter.Writer) {
		row(w, fmt.Sprintf("deleted schedule %q", rest[0]))
	})
}
