package check

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/termtext"
	"github.com/braidflow/braid/workflow"
)

// Main runs the check with the command line and exits with its status.
func Main(defs ...workflow.Definition) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr, defs...)
	stop()
	os.Exit(code)
}

// runIDs is a repeatable --run flag.
type runIDs []string

func (r *runIDs) String() string     { return strings.Join(*r, ",") }
func (r *runIDs) Set(s string) error { *r = append(*r, s); return nil }

// Run is the check: it parses args, replays the selected unfinished runs
// with defs, prints the report to stdout (a table, or JSON with --json),
// and returns the exit status: 0 when nothing diverges, 1 when a run
// would diverge or could not be replayed, 2 on a usage or connection
// error (said on stderr).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, defs ...workflow.Definition) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		url      = fs.String("database-url", "", "PostgreSQL connection string (default $DATABASE_URL)")
		asJSON   = fs.Bool("json", false, "print the report as JSON instead of a table")
		wf       = fs.String("workflow", "", "replay only the runs of this workflow")
		limit    = fs.Int("limit", workflow.ReplayFilterLimitDefault, "replay at most this many runs")
		selected runIDs
	)
	fs.Var(&selected, "run", "replay only this run (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "braid check: "+format+"\n", args...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if len(defs) == 0 {
		return fail("this binary registers no workflows, so it has no code to replay; " +
			"build the check into your service's binary with check.Main(yourWorkflows...)")
	}
	if *limit < 1 {
		return fail("--limit %d is below 1", *limit)
	}
	if *url == "" {
		*url = os.Getenv("DATABASE_URL")
	}
	if *url == "" {
		return fail("no database: set --database-url or DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return fail("connecting: %v", err)
	}
	defer pool.Close()
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: defs})
	if err != nil {
		return fail("%v", err)
	}
	rep, err := eng.CheckReplay(ctx, workflow.ReplayFilter{Workflow: *wf, RunIDs: selected, Limit: *limit})
	if err != nil {
		return fail("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail("%v", err)
		}
	} else {
		writeTable(stdout, rep)
	}
	if len(rep.Divergences) > 0 || len(rep.Problems) > 0 || rep.Unchecked > 0 {
		return 1
	}
	return 0
}

// writeTable prints the report: a line of totals, then one row per
// divergence and per problem.
func writeTable(w io.Writer, rep *workflow.ReplayReport) {
	fmt.Fprintf(w, "replayed %d unfinished runs (%d tasks): %d would diverge, %d could not be replayed\n",
		rep.Runs, rep.Tasks, len(rep.Divergences), len(rep.Problems))
	if rep.Unchecked > 0 {
		fmt.Fprintf(w, "%d more unfinished runs were not replayed (over --limit): raise it to check them\n", rep.Unchecked)
	}
	if len(rep.Divergences) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tTASK\tWORKFLOW\tCALL\tRECORDED\tCALLED")
		for _, d := range rep.Divergences {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", d.RunID, d.TaskID, termtext.Cell(d.Workflow), d.Position, termtext.Cell(d.Recorded), termtext.Cell(d.Called))
		}
		_ = tw.Flush()
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tTASK\tWORKFLOW\tPROBLEM")
		for _, p := range rep.Problems {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.RunID, p.TaskID, termtext.Cell(p.Workflow), termtext.Cell(p.Reason))
		}
		_ = tw.Flush()
	}
}
