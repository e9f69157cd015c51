package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

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
