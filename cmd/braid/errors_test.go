package main

import (
	"strings"
	"testing"
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
	}
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
		{[]string{"jobs", "priority", "999", "high"}, 1, "job 999 not found"},
		{[]string{"jobs", "priority", "1", "high"}, 1, "job 1 is completed; only an unfinished job takes a new priority"},
		{[]string{"schedules", "get", "ghost"}, 1, `schedule "ghost" not found`},
		{[]string{"recurring", "enable", "fetch_feed", "feed:99"}, 1, `recurring job fetch_feed "feed:99" not found`},
		{[]string{"recurring", "disable", "ghost_kind", "x"}, 1, `recurring job ghost_kind "x" not found`},
		{[]string{"recurring", "revive", "fetch_feed", "feed:99"}, 1, `recurring job fetch_feed "feed:99" not found`},
	})
	// Nothing was changed by the failed commands.
	_, out, _ := braid(t, "jobs", "dead", "--database-url", url)
	if !strings.Contains(out, "\n6 ") {
		t.Errorf("a jobs retry that failed on an unknown ID retried job 6 anyway:\n%s", out)
	}
}

// TestErrorsUsage gives every group bad flags and arguments; they are
// rejected before any database is needed.
func TestErrorsUsage(t *testing.T) {
	t.Parallel()
	checkErrors(t, []string{"--database-url", unreachable}, []errorCase{
		{[]string{"runs"}, 2, "missing subcommand: braid runs cancel|list|retry|show"},
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
		{[]string{"jobs"}, 2, "missing subcommand: braid jobs dead|list|priority|retry|stats"},
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
	if code != 0 || out != "" || !strings.Contains(errOut, "Usage: braid schedules create [flags]") || !strings.Contains(errOut, "-catch-up") {
		t.Errorf("schedules create -h: code %d, stderr:\n%s", code, errOut)
	}
}
