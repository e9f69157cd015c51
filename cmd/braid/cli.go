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

	"github.com/jackc/pgx/v5/pgxpool"
)

// command is one subcommand of braid.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
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
}

// usageError is a mistake in the command line; it prints usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

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
	err := cmd.run(ctx, c, args[1:])
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "braid %s: %s\n", cmd.name, oneLine(err))
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
		fmt.Fprintf(c.stdout, "  %-10s %s\n", n, commands[n].summary)
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
		fmt.Fprintf(c.stderr, "Usage: braid %s [flags]\n\nFlags:\n", name)
		fs.SetOutput(c.stderr)
		fs.PrintDefaults()
		fs.SetOutput(sink)
	}
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL connection string (default $DATABASE_URL)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	return fs
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
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

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
	return pool, nil
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
		fmt.Fprint(w, cell)
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

// subcommand dispatches a two-level command such as `braid runs list`.
func subcommand(ctx context.Context, c *cli, group string, args []string, subs map[string]func(context.Context, *cli, []string) error) error {
	names := make([]string, 0, len(subs))
	for n := range subs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 {
		return usagef("missing subcommand: braid %s %s", group, strings.Join(names, "|"))
	}
	switch {
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		fmt.Fprintf(c.stderr, "Usage: braid %s %s [flags]\n", group, strings.Join(names, "|"))
		return flag.ErrHelp
	case strings.HasPrefix(args[0], "-"):
		return usagef("missing subcommand: braid %s %s, then flags such as %s", group, strings.Join(names, "|"), args[0])
	}
	fn, ok := subs[args[0]]
	if !ok {
		return usagef("unknown subcommand %q: braid %s %s", args[0], group, strings.Join(names, "|"))
	}
	return fn(ctx, c, args[1:])
}
