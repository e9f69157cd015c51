package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/termtext"
)

// command is one command of braid: either a command of its own (run), or a
// group of subcommands (subs) such as `braid runs`.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
	subs    []sub
}

// sub is one subcommand of a group, such as `braid runs show ID`.
type sub struct {
	name string
	// args names its positional arguments as usage shows them: "ID",
	// "ID...", "KIND KEY"; empty when it takes none.
	args    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

// synopsis is the subcommand with its positional arguments.
func (s sub) synopsis() string {
	if s.args == "" {
		return s.name
	}
	return s.name + " " + s.args
}

// groupSummary is a group's summary followed by its subcommands with their
// positional arguments, as `braid help` lists it.
func (c *command) groupSummary() string {
	if len(c.subs) == 0 {
		return c.summary
	}
	list := make([]string, len(c.subs))
	for i, s := range c.subs {
		list[i] = s.synopsis()
	}
	return c.summary + ": " + c.name + " " + strings.Join(list, " | ")
}

// commands is filled by each subcommand's file in its init.
var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// cli carries what every subcommand shares: its output streams and the
// common flags.
type cli struct {
	stdout, stderr io.Writer
	databaseURL    string
	json           bool
	// usageArgs names the positional arguments of the subcommand being
	// run, for its usage line.
	usageArgs string
	// database is the name of the database connect opened, for messages.
	database string
}

// usageError is a mistake in the command line; it prints usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitStatus is the status of a command that said what went wrong itself.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		c.usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "braid: unknown command %q (run `braid help`)\n", args[0])
		return 2
	}
	var err error
	if cmd.subs != nil {
		err = dispatch(ctx, c, cmd, args[1:])
	} else {
		err = cmd.run(ctx, c, args[1:])
	}
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	if hint := c.migrateHint(err); hint != "" && cmd.name != "migrate" {
		fmt.Fprintf(stderr, "braid %s: %s\n", cmd.name, hint)
		return 1
	}
	fmt.Fprintf(stderr, "braid %s: %s\n", cmd.name, termtext.Line(oneLine(err)))
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func (c *cli) usage() {
	fmt.Fprintln(c.stdout, "braid operates durable workflows on PostgreSQL.")
	fmt.Fprintln(c.stdout, "\nUsage: braid <command> [subcommand] [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(c.stdout, "  %-10s %s\n", n, commands[n].groupSummary())
	}
	fmt.Fprintln(c.stdout, "\nEvery command reads --database-url or DATABASE_URL, and prints tables, or JSON with --json.")
	fmt.Fprintln(c.stdout, "Tables show times in UTC. Run `braid <command> <subcommand> -h` for its flags.")
}

// flags returns a flag set with the common flags bound to c. -h prints
// its flags; a mistake is left to run, which prints it as one line.
func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	sink := &flagErrors{}
	fs.SetOutput(sink)
	fs.Usage = func() {
		if sink.wrote {
			sink.wrote = false
			return
		}
		fmt.Fprintf(c.stderr, "Usage: braid %s [flags]\n\nFlags:\n", withArgs(name, c.usageArgs))
		fs.SetOutput(c.stderr)
		fs.PrintDefaults()
		fs.SetOutput(sink)
	}
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL connection string (default $DATABASE_URL)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	return fs
}

// withArgs appends a subcommand's positional arguments to its name.
func withArgs(name, args string) string {
	if args == "" {
		return name
	}
	return name + " " + args
}

// flagErrors swallows what the flag package prints about a mistake, and
// notes that it did, so that usage is printed for -h only.
type flagErrors struct{ wrote bool }

func (f *flagErrors) Write(p []byte) (int, error) {
	f.wrote = true
	return len(p), nil
}

// parse parses flags that may come before, between or after positional
// arguments, and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			positional = append(positional, args[1:]...)
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	return positional, checkText(fs, positional)
}

// checkText refuses a flag value or an argument that is not UTF-8 text
// without NUL characters: but for the flags of notText, every one of them
// names or carries something that PostgreSQL stores as text or jsonb,
// which would refuse it with a bare encoding error, after the command had
// connected.
func checkText(fs *flag.FlagSet, positional []string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if v := f.Value.String(); err == nil && !notText[f.Name] && !isText(v) {
			err = usagef("--%s %q is not UTF-8 text without NUL characters", f.Name, v)
		}
	})
	for _, a := range positional {
		if err == nil && !isText(a) {
			err = usagef("argument %q is not UTF-8 text without NUL characters", a)
		}
	}
	return err
}

// notText are the flags whose values go to no column of PostgreSQL's (a
// file path, which need not be UTF-8; an address; the connection string
// and the tokens, which an error must not echo either): checkText leaves
// them to what reads them.
var notText = map[string]bool{
	"database-url": true, "cpuprofile": true, "addr": true, "jaeger-url": true, "token": true, "readonly-token": true,
}

// isText reports whether s is UTF-8 text without NUL characters.
func isText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// connect opens a pool on --database-url or DATABASE_URL and checks that the
// database answers.
func (c *cli) connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := c.databaseURL
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	if url == "" {
		return nil, usagef("no database: pass --database-url or set DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("invalid database URL: %v", err)
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", cfg.ConnConfig.Host, err)
	}
	c.database = cfg.ConnConfig.Database
	return pool, nil
}

// undefinedTable is PostgreSQL's SQLSTATE for a table that does not exist.
const undefinedTable = "42P01"

// undefinedFunction is PostgreSQL's undefined_function.
const undefinedFunction = "42883"

// migrateHint turns an error about a missing table (SQLSTATE 42P01,
// undefined_table) into one sentence that names the table and says to run
// `braid migrate up`: braid's and River's tables are made by braid's
// migrations, so a database without one is not migrated, or not fully. It
// returns "" for any other error.
func (c *cli) migrateHint(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	var table string
	switch {
	case pgErr.Code == undefinedTable:
		table = "a table braid needs"
		if i := strings.IndexByte(pgErr.Message, '"'); i >= 0 {
			if j := strings.IndexByte(pgErr.Message[i+1:], '"'); j > 0 {
				table = "table " + pgErr.Message[i+1:i+1+j]
			}
		}
	case pgErr.Code == undefinedFunction && strings.Contains(pgErr.Message, "braid_now()"):
		table = "function braid_now()" // braid's clock, created by its migrations
	case pgErr.Code == undefinedFunction && strings.Contains(pgErr.Message, "braid_clock()"):
		table = "function braid_clock()"
	default:
		return ""
	}
	where := "the database"
	if c.database != "" {
		where = "database " + c.database
	}
	return fmt.Sprintf("%s has no %s: its schema is not migrated; run `braid migrate up` first", where, table)
}

// emit prints v as JSON when --json is set, and otherwise calls table.
func (c *cli) emit(v any, table func(w *tabwriter.Writer)) error {
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	table(w)
	return w.Flush()
}

// row writes tab-separated cells.
func row(w io.Writer, cells ...any) {
	for i, cell := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, termtext.Cell(fmt.Sprint(cell)))
	}
	fmt.Fprintln(w)
}

// ts formats an optional time for tables.
func ts(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// dispatch runs a subcommand of a group such as `braid runs list`.
func dispatch(ctx context.Context, c *cli, cmd *command, args []string) error {
	names := make([]string, 0, len(cmd.subs))
	for _, s := range cmd.subs {
		names = append(names, s.name)
	}
	sort.Strings(names)
	choices := strings.Join(names, "|")
	if len(args) == 0 {
		return usagef("missing subcommand: braid %s %s", cmd.name, choices)
	}
	switch {
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		c.groupUsage(cmd)
		return flag.ErrHelp
	case strings.HasPrefix(args[0], "-"):
		return usagef("missing subcommand: braid %s %s, then flags such as %s", cmd.name, choices, args[0])
	}
	for _, s := range cmd.subs {
		if s.name == args[0] {
			c.usageArgs = s.args
			return s.run(ctx, c, args[1:])
		}
	}
	return usagef("unknown subcommand %q: braid %s %s", args[0], cmd.name, choices)
}

// groupUsage prints a group's subcommands, each with its positional
// arguments and summary.
func (c *cli) groupUsage(cmd *command) {
	fmt.Fprintf(c.stderr, "Usage: braid %s <subcommand> [flags]\n\n%s.\n\nSubcommands:\n", cmd.name, upperFirst(cmd.summary))
	w := tabwriter.NewWriter(c.stderr, 0, 0, 2, ' ', 0)
	for _, s := range cmd.subs {
		fmt.Fprintf(w, "  braid %s %s\t%s\n", cmd.name, s.synopsis(), s.summary)
	}
	_ = w.Flush()
	fmt.Fprintf(c.stderr, "\nRun `braid %s <subcommand> -h` for its flags.\n", cmd.name)
}

// upperFirst capitalises the first letter of s.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
