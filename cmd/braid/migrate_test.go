package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/braidflow/braid/migrations"
	"github.com/braidflow/braid/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// braid runs the CLI in-process and returns its exit code and output.
func braid(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestMigrateDownUpStatus(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	code, out, errOut := braid(t, "migrate", "status", "--database-url", url)
	if code != 0 || !strings.Contains(out, "applied") || strings.Contains(out, " pending ") {
		t.Fatalf("status on a migrated database: code %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = braid(t, "migrate", "down", "--database-url", url)
	if code != 0 || !strings.Contains(out, "down") {
		t.Fatalf("down: code %d\n%s%s", code, out, errOut)
	}
	_, out, _ = braid(t, "migrate", "status", "--database-url", url)
	if !strings.Contains(out, " pending ") {
		t.Fatalf("status after down shows no pending version:\n%s", out)
	}
	code, out, errOut = braid(t, "migrate", "up", "--database-url", url, "--json")
	if code != 0 || !strings.Contains(out, `"direction": "up"`) {
		t.Fatalf("up --json: code %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = braid(t, "migrate", "redo", "--database-url", url)
	if code != 0 || !strings.Contains(out, "down") || !strings.Contains(out, "up") {
		t.Fatalf("redo: code %d\n%s%s", code, out, errOut)
	}
}

func TestMigrateErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"migrate"}, 2, "missing subcommand"},
		{[]string{"migrate", "sideways"}, 2, `unknown subcommand "sideways"`},
		{[]string{"migrate", "up"}, 2, "no database"},
		{[]string{"migrate", "up", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"migrate", "up", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, 1, "cannot reach the database"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		code, _, errOut := braid(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 && tc.code == 1 {
			t.Errorf("braid %v: code %d, stderr %q; want code %d containing %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// TestMigrateOnANewerSchema runs migrate on a database that a newer braid
// migrated (a version this one does not know is applied): up does not call
// it up to date, down and redo refuse to revert what they do not know, and
// status lists the unknown version; each names it.
func TestMigrateOnANewerSchema(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	if _, err := pool.Exec(context.Background(), `INSERT INTO braid_schema_version (version_id, is_applied) VALUES (999, true)`); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"up", "down", "redo"} {
		code, out, errOut := braid(t, "migrate", sub, "--database-url", url)
		if code != 1 || out != "" || !strings.Contains(errOut, "the database's schema is at version 999, newer than the last one these migrations know") {
			t.Errorf("migrate %s on a schema at version 999: code %d, stdout %q, stderr %q; want code 1 and an error naming version 999", sub, code, out, errOut)
		}
	}
	code, out, errOut := braid(t, "migrate", "status", "--database-url", url)
	if code != 0 || !strings.Contains(out, "999") || !strings.Contains(out, migrations.UnknownVersionName) {
		t.Errorf("migrate status on a schema at version 999: code %d, stdout %q, stderr %q; want version 999 listed as unknown", code, out, errOut)
	}
	var applied int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM braid_schema_version WHERE version_id IN (112, 999) AND is_applied`).Scan(&applied); err != nil || applied != 2 {
		t.Errorf("the refused commands changed the applied versions: %d of 112 and 999 applied (%v)", applied, err)
	}
}
