package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/braidflow/braid/migrations"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/testutil"
)

// unreachable is a database URL on which nothing listens.
const unreachable = "postgres://nobody@127.0.0.1:1/braid?connect_timeout=2"

// errorCase is a command line that must fail with one line on stderr and
// nothing on stdout.
type errorCase struct {
	args []string
	code int
	want string
}

func checkErrors(t *testing.T, extra []string, cases []errorCase) {
	t.Helper()
	for _, tc := range cases {
		code, out, errOut := braid(t, append(tc.args, extra...)...)
		group := "braid " + tc.args[0] + ": "
		if code != tc.code || out != "" || !strings.HasPrefix(errOut, group) || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("braid %v: code %d, stdout %q, stderr %q; want code %d and one line %q… containing %q", tc.args, code, out, errOut, tc.code, group, tc.want)
		}
		if p := doubledPrefix(errOut); p != "" {
			t.Errorf("braid %v: stderr %q names %q more than once", tc.args, errOut, p)
		}
	}
}

// doubledPrefix returns the first package prefix ("scheduler: ") that s
// carries more than once as a word, or "".
func doubledPrefix(s string) string {
	s = " " + s
	for _, p := range []string{"scheduler: ", "queue: ", "workflow: ", "leases: ", "migrations: ", "bench: "} {
		if strings.Count(s, " "+p) > 1 {
			return p
		}
	}
	return ""
}

// TestErrorsUnknownIDs asks every group about things that do not exist.
func TestErrorsUnknownIDs(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	const ghost = "0195a1b2-ffff-7000-8000-000000000000"
	checkErrors(t, []string{"--database-url", url}, []errorCase{
		{[]string{"runs", "show", ghost}, 1, "run " + ghost + " not found"},
		{[]string{"runs", "cancel", ghost}, 1, "run " + ghost + " not found"},
		{[]string{"runs", "retry", ghost}, 1, "run " + ghost + " not found"},
		{[]string{"runs", "cancel", failedRun}, 1, "run " + failedRun + " is already failed; only an unfinished run can be cancelled"},
		{[]string{"runs", "retry", pendingRun}, 1, "run " + pendingRun + " is pending; only a failed or cancelled run can be retried"},
		{[]string{"jobs", "retry", "6", "999"}, 1, "job 999 not found"},
		{[]string{"jobs", "retry", "9", "999"}, 1, "job 999 not found"},
		{[]string{"jobs", "show", "999"}, 1, "job 999 not found"},
		{[]string{"jobs", "priority", "999", "high"}, 1, "job 999 not found"},
		{[]string{"jobs", "priority", "1", "high"}, 1, "job 1 is completed; only an unfinished job takes a new priority"},
		{[]string{"schedules", "get", "ghost"}, 1, `schedule "ghost" not found`},
		{[]string{"recurring", "enable", "fetch_feed", "feed:99"}, 1, `recurring job fetch_feed "feed:99" not found`},
		{[]string{"recurring", "disable", "ghost_kind", "x"}, 1, `recurring job ghost_kind "x" not found`},
		{[]string{"recurring", "revive", "fetch_feed", "feed:99"}, 1, `recurring job fetch_feed "feed:99" not found`},
	})
	// Nothing was changed by the failed commands.
	_, out, _ := braid(t, "jobs", "dead", "--database-url", url)
	if !strings.Contains(out, "\n6 ") || !strings.Contains(out, "\n9 ") {
		t.Errorf("a jobs retry that failed on an unknown ID retried job 6 or 9 anyway:\n%s", out)
	}
	_, out, _ = braid(t, "runs", "show", panicRun, "--database-url", url)
	if !strings.Contains(out, "status:    failed") {
		t.Errorf("a jobs retry that failed on an unknown ID retried the run of turn job 9 anyway:\n%s", out)
	}
}

// TestErrorsUsage gives every group bad flags and arguments; they are
// rejected before any database is needed.
func TestErrorsUsage(t *testing.T) {
	t.Parallel()
	checkErrors(t, []string{"--database-url", unreachable}, []errorCase{
		{[]string{"runs"}, 2, "missing subcommand: braid runs cancel|export|list|retry|show|signal"},
		{[]string{"runs", "rerun"}, 2, `unknown subcommand "rerun"`},
		{[]string{"runs", "list", "--status", "done"}, 2, `unknown run status "done"; use pending, running, waiting, completed, failed, cancelled`},
		{[]string{"runs", "list", "--limit", "0"}, 2, "--limit 0 is out of range; it must be 1 to 10000"},
		{[]string{"runs", "list", "--limit", "many"}, 2, `invalid value "many" for flag -limit`},
		{[]string{"runs", "list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"runs", "show"}, 2, "missing argument ID"},
		{[]string{"runs", "show", "42"}, 2, `invalid run ID "42": a run ID is a UUID`},
		{[]string{"runs", "cancel"}, 2, "missing argument ID"},
		{[]string{"runs", "retry", "a", "b"}, 2, `unexpected argument "b"`},
		{[]string{"runs", "show", "--verbose"}, 2, "flag provided but not defined: -verbose"},
		{[]string{"jobs"}, 2, "missing subcommand: braid jobs dead|list|priority|retry|show|stats"},
		{[]string{"jobs", "show"}, 2, "missing argument ID"},
		{[]string{"jobs", "show", "1", "2"}, 2, `unexpected argument "2"`},
		{[]string{"jobs", "show", "one"}, 2, `invalid job ID "one": a job ID is a positive integer`},
		{[]string{"jobs", "list", "--state", "stuck"}, 2, `unknown job state "stuck"; use pending, scheduled, available, running, retryable, completed, cancelled, discarded`},
		{[]string{"jobs", "list", "--limit", "10001"}, 2, "--limit 10001 is out of range; it must be 1 to 10000"},
		{[]string{"jobs", "dead", "--state", "discarded"}, 2, "flag provided but not defined: -state"},
		{[]string{"jobs", "stats", "now"}, 2, `unexpected argument "now"`},
		{[]string{"jobs", "retry"}, 2, "missing argument ID: give one or more job IDs"},
		{[]string{"jobs", "retry", "7", "x7"}, 2, `invalid job ID "x7": a job ID is a positive integer`},
		{[]string{"jobs", "priority", "7"}, 2, "missing argument LEVEL"},
		{[]string{"jobs", "priority", "7", "urgent"}, 2, `unknown priority "urgent"; use critical, high, normal, low or 1 to 4`},
		{[]string{"jobs", "priority", "7", "5"}, 2, `unknown priority "5"`},
		{[]string{"jobs", "priority", "-1", "low"}, 2, "flag provided but not defined: -1"},
		{[]string{"schedules"}, 2, "missing subcommand: braid schedules create|delete|get|list|toggle|update"},
		{[]string{"schedules", "create", "--name", "x", "--expression", "*/0 * * * *", "--job", "tick"}, 2, `invalid expression "*/0 * * * *"`},
		{[]string{"recurring"}, 2, "missing subcommand: braid recurring disable|enable|list|revive"},
		{[]string{"recurring", "enable", "fetch_feed"}, 2, "missing argument KEY"},
		{[]string{"recurring", "disable"}, 2, "missing argument KIND"},
		{[]string{"recurring", "list", "--dead=perhaps"}, 2, `"perhaps" is not a boolean`},
		{[]string{"recurring", "list", "--limit", "-3"}, 2, "--limit -3 is out of range"},
		{[]string{"leases"}, 2, "missing subcommand: braid leases list"},
		{[]string{"leases", "list", "braid:delays"}, 2, `unexpected argument "braid:delays"`},
		{[]string{"leases", "list", "--holder", "x"}, 2, "flag provided but not defined: -holder"},
		// Text that PostgreSQL cannot store is refused before connecting.
		{[]string{"jobs", "list", "--kind", "a\x00b"}, 2, `--kind "a\x00b" is not UTF-8 text without NUL characters`},
		{[]string{"jobs", "list", "--queue", "a\xffb"}, 2, `--queue "a\xffb" is not UTF-8 text without NUL characters`},
		{[]string{"jobs", "dead", "--kind", "a\xffb"}, 2, `--kind "a\xffb" is not UTF-8 text`},
		{[]string{"schedules", "get", "a\x00b"}, 2, `argument "a\x00b" is not UTF-8 text without NUL characters`},
		{[]string{"schedules", "delete", "a\xffb"}, 2, `argument "a\xffb" is not UTF-8 text`},
		{[]string{"schedules", "update", "a\x00b", "--description", "x"}, 2, `argument "a\x00b" is not UTF-8 text`},
		{[]string{"recurring", "enable", "fetch_feed", "k\x00"}, 2, `argument "k\x00" is not UTF-8 text`},
		{[]string{"recurring", "revive", "fetch_feed", "k\xff"}, 2, `argument "k\xff" is not UTF-8 text`},
		{[]string{"recurring", "list", "--kind", "a\x00"}, 2, `--kind "a\x00" is not UTF-8 text`},
	})
}

// TestErrorsUnreachableDatabase runs every group against a database that
// does not answer.
func TestErrorsUnreachableDatabase(t *testing.T) {
	t.Parallel()
	checkErrors(t, []string{"--database-url", unreachable}, []errorCase{
		{[]string{"runs", "list"}, 1, "cannot reach the database"},
		{[]string{"runs", "show", failedRun}, 1, "cannot reach the database"},
		{[]string{"runs", "cancel", failedRun}, 1, "cannot reach the database"},
		{[]string{"jobs", "stats"}, 1, "cannot reach the database"},
		{[]string{"jobs", "retry", "1"}, 1, "cannot reach the database"},
		{[]string{"jobs", "show", "1"}, 1, "cannot reach the database"},
		{[]string{"schedules", "list"}, 1, "cannot reach the database"},
		{[]string{"recurring", "list"}, 1, "cannot reach the database"},
		{[]string{"leases", "list"}, 1, "cannot reach the database"},
	})
}

// TestErrorsNoDatabase leaves both --database-url and DATABASE_URL unset.
func TestErrorsNoDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	checkErrors(t, nil, []errorCase{
		{[]string{"runs", "list"}, 2, "no database: pass --database-url or set DATABASE_URL"},
		{[]string{"jobs", "dead"}, 2, "no database"},
		{[]string{"schedules", "get", "x"}, 2, "no database"},
		{[]string{"recurring", "list"}, 2, "no database"},
		{[]string{"leases", "list"}, 2, "no database"},
	})
	checkErrors(t, []string{"--database-url", "::not a url::"}, []errorCase{
		{[]string{"leases", "list"}, 2, "invalid database URL"},
	})
}

// TestDatabaseURLFromEnvironment reads the database from DATABASE_URL.
func TestDatabaseURLFromEnvironment(t *testing.T) {
	url := seeded(t)
	t.Setenv("DATABASE_URL", url)
	code, out, errOut := braid(t, "leases", "list")
	if code != 0 || !strings.Contains(out, "braid:scheduler") {
		t.Errorf("leases list with DATABASE_URL: code %d\n%s%s", code, out, errOut)
	}
}

// TestErrorsUnmigratedDatabase runs every group against a database without
// braid's schema, and one with River's tables but not braid's: each says
// which table is missing and to run braid migrate up, in one line.
func TestErrorsUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		version int64 // the version left applied
		runs    string
		jobs    string
	}{
		{"empty", 0, "braid_runs", "river_job"},
		{"river only", 99, "braid_runs", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := testutil.URL(t)
			pool := testutil.Pool(t, url)
			m, err := migrations.New(pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.DownTo(ctx, tc.version); err != nil {
				t.Fatal(err)
			}
			_ = m.Close()
			var db string
			if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
				t.Fatal(err)
			}
			hint := func(table string) string {
				return "database " + db + " has no table " + table + ": its schema is not migrated; run `braid migrate up` first"
			}
			// Creating a schedule reads braid's clock first.
			clockHint := "database " + db + " has no function braid_now(): its schema is not migrated; run `braid migrate up` first"
			cases := []errorCase{
				{[]string{"runs", "list"}, 1, hint(tc.runs)},
				{[]string{"runs", "show", failedRun}, 1, hint(tc.runs)},
				{[]string{"runs", "retry", failedRun}, 1, "run `braid migrate up` first"},
				{[]string{"schedules", "list"}, 1, hint("braid_schedules")},
				{[]string{"schedules", "create", "x", "--expression", "@daily", "--job", "tick"}, 1, clockHint},
				{[]string{"recurring", "list"}, 1, hint("braid_recurring")},
				{[]string{"recurring", "enable", "fetch_feed", "feed:1"}, 1, hint("braid_recurring")},
				{[]string{"leases", "list"}, 1, hint("braid_leases")},
			}
			if tc.jobs != "" {
				cases = append(cases,
					errorCase{[]string{"jobs", "stats"}, 1, hint(tc.jobs)},
					errorCase{[]string{"jobs", "list"}, 1, hint(tc.jobs)},
					errorCase{[]string{"jobs", "dead"}, 1, hint(tc.jobs)},
					errorCase{[]string{"jobs", "show", "1"}, 1, hint(tc.jobs)},
					errorCase{[]string{"jobs", "retry", "1"}, 1, hint(tc.jobs)},
					errorCase{[]string{"jobs", "priority", "1", "high"}, 1, hint(tc.jobs)},
				)
			}
			checkErrors(t, []string{"--database-url", url}, cases)

			// Once migrated, the same commands work.
			if code, _, errOut := braid(t, "migrate", "up", "--database-url", url); code != 0 {
				t.Fatalf("migrate up: code %d: %s", code, errOut)
			}
			if code, out, errOut := braid(t, "runs", "list", "--database-url", url); code != 0 || strings.TrimSpace(out) != "no runs" {
				t.Errorf("runs list after migrate up: code %d, stdout %q, stderr %q", code, out, errOut)
			}
		})
	}
}

// TestErrorsNamePackageOnce checks the library errors the CLI passes on:
// each names its package once, and still matches its sentinel.
func TestErrorsNamePackageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := seeded(t)
	pool := testutil.Pool(t, url)
	s, err := scheduler.New(pool, &scheduler.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(pool, &queue.Config{Logger: quiet, MaintenanceDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	_, getErr := s.Get(ctx, "ghost")
	_, updateErr := s.Update(ctx, "ghost", &scheduler.ScheduleUpdate{})
	deleteErr := s.Delete(ctx, "ghost")
	_, existsErr := s.Create(ctx, &scheduler.ScheduleParams{Name: "cleanup", Expression: "@daily", TargetType: scheduler.TargetJob, Target: "cleanup"})
	_, exprErr := s.Create(ctx, &scheduler.ScheduleParams{Name: "bad", Expression: "*/0 * * * *", TargetType: scheduler.TargetJob, Target: "tick"})
	_, zoneErr := s.Update(ctx, "cleanup", &scheduler.ScheduleUpdate{TimeZone: ptr("Mars/Olympus_Mons")})
	_, recErr := s.Enable(ctx, "fetch_feed", "feed:99")
	_, revErr := s.Revive(ctx, "fetch_feed", "feed:99")
	_, prioErr := q.SetPriority(ctx, 1, queue.PriorityHigh)
	for _, tc := range []struct {
		err    error
		target error
		want   string
	}{
		{getErr, scheduler.ErrScheduleNotFound, `scheduler: schedule "ghost" not found`},
		{updateErr, scheduler.ErrScheduleNotFound, `scheduler: schedule "ghost" not found`},
		{deleteErr, scheduler.ErrScheduleNotFound, `scheduler: schedule "ghost" not found`},
		{existsErr, scheduler.ErrScheduleExists, `scheduler: schedule "cleanup" already exists`},
		{exprErr, scheduler.ErrInvalidExpression, `scheduler: schedule "bad": invalid expression "*/0 * * * *": minute field step 0 is out of range 1-59`},
		{zoneErr, scheduler.ErrInvalidExpression, `scheduler: schedule "cleanup": invalid expression "@every 15m": unknown time zone "Mars/Olympus_Mons"`},
		{recErr, scheduler.ErrRecurringNotFound, `scheduler: recurring job fetch_feed/feed:99 not found`},
		{revErr, scheduler.ErrRecurringNotFound, `scheduler: recurring job fetch_feed/feed:99 not found`},
		{prioErr, queue.ErrJobFinalized, `queue: job 1 is completed; only an unfinished job takes a new priority`},
	} {
		if tc.err == nil || !errors.Is(tc.err, tc.target) || tc.err.Error() != tc.want {
			t.Errorf("error %v; want %q, matching %v", tc.err, tc.want, tc.target)
		}
	}
	var exprError *scheduler.ExpressionError
	if !errors.As(exprErr, &exprError) || exprError.Reason != "minute field step 0 is out of range 1-59" {
		t.Errorf("the error of a bad expression is not an *ExpressionError: %#v", exprErr)
	}
}

func ptr[T any](v T) *T { return &v }

// TestUsageNamesPositionalArguments asks every subcommand for its usage:
// the line names its positional arguments, and so do the group's usage
// and braid help.
func TestUsageNamesPositionalArguments(t *testing.T) {
	t.Parallel()
	_, helpOut, _ := braid(t, "help")
	for _, cmd := range commands {
		if cmd.subs == nil {
			continue
		}
		code, out, groupUsage := braid(t, cmd.name, "-h")
		if code != 0 || out != "" || !strings.HasPrefix(groupUsage, "Usage: braid "+cmd.name+" <subcommand> [flags]\n") {
			t.Errorf("braid %s -h: code %d, stdout %q, stderr:\n%s", cmd.name, code, out, groupUsage)
		}
		for _, s := range cmd.subs {
			synopsis := "braid " + cmd.name + " " + s.name
			if s.args != "" {
				synopsis += " " + s.args
			}
			code, out, errOut := braid(t, cmd.name, s.name, "-h")
			if want := "Usage: " + synopsis + " [flags]\n"; code != 0 || out != "" || !strings.HasPrefix(errOut, want) {
				t.Errorf("braid %s %s -h: code %d, stdout %q, stderr:\n%s\nwant it to start %q", cmd.name, s.name, code, out, errOut, want)
			}
			if !strings.Contains(groupUsage, "  "+synopsis+"  ") {
				t.Errorf("braid %s -h does not list %q:\n%s", cmd.name, synopsis, groupUsage)
			}
			if !strings.Contains(helpOut, " "+s.synopsis()) {
				t.Errorf("braid help does not list %q:\n%s", s.synopsis(), helpOut)
			}
		}
	}
	for _, want := range []string{"Usage: braid runs show ID [flags]", "Usage: braid jobs retry ID... [flags]", "Usage: braid jobs priority ID LEVEL [flags]", "Usage: braid recurring revive KIND KEY [flags]"} {
		args := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(want, "Usage: braid "), " [flags]"))[:2]
		if _, _, errOut := braid(t, append(args, "-h")...); !strings.Contains(errOut, want) {
			t.Errorf("braid %s -h: %q does not contain %q", strings.Join(args, " "), errOut, want)
		}
	}
	if !strings.Contains(helpOut, "runs list | show ID | cancel ID | retry ID") {
		t.Errorf("braid help does not sum up runs with its arguments:\n%s", helpOut)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	code, out, _ := braid(t, "help")
	for _, group := range []string{"runs", "jobs", "schedules", "recurring", "leases"} {
		if !strings.Contains(out, "\n  "+group+" ") {
			t.Errorf("braid help does not list %s:\n%s", group, out)
		}
	}
	if code != 0 {
		t.Errorf("braid help: code %d", code)
	}
	code, out, errOut := braid(t, "schedules", "create", "-h")
	if code != 0 || out != "" || !strings.Contains(errOut, "Usage: braid schedules create [NAME] [flags]") || !strings.Contains(errOut, "-catch-up") {
		t.Errorf("schedules create -h: code %d, stderr:\n%s", code, errOut)
	}
}

// TestFlagsOfNoColumnAreNotCheckedAsText: a flag whose value goes to no
// column of PostgreSQL's, such as a file path, which need not be UTF-8, is
// not refused as text.
func TestFlagsOfNoColumnAreNotCheckedAsText(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	path := t.TempDir() + "/caf\xe9.prof" // a Latin-1 file name
	// Without --run, bench prints its plan and asks for --run.
	if code, _, errOut := braid(t, "bench", "--quick", "--cpuprofile", path); strings.Contains(errOut, "is not UTF-8 text") {
		t.Errorf("braid bench --cpuprofile %q: code %d, stderr %q; a file path was refused as text", path, code, errOut)
	}
}
