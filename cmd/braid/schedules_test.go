package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/testutil"
)

func TestSchedulesLifecycle(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	db := []string{"--json", "--database-url", url}
	schedule := func(args ...string) *scheduler.Schedule {
		t.Helper()
		code, out, errOut := braid(t, append(args, db...)...)
		if code != 0 {
			t.Fatalf("braid %v: code %d: %s", args, code, errOut)
		}
		var s scheduler.Schedule
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("braid %v --json: %v\n%s", args, err, out)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, s.Args); err != nil {
			t.Fatal(err)
		}
		s.Args = compact.Bytes()
		return &s
	}
	ignore := cmpopts.IgnoreFields(scheduler.Schedule{}, "ID", "NextRunAt", "CreatedAt", "UpdatedAt")

	got := schedule("schedules", "create", "--name", "digest-morning", "--expression", "0 7 * * MON-FRI", "--time-zone", "Europe/Paris",
		"--workflow", "digest", "--args", `{"window": "24h"}`, "--priority", "high", "--overlap", "allow", "--catch-up", "skip",
		"--description", "Morning digest on work days", "--created-by", "ada")
	want := &scheduler.Schedule{
		Name: "digest-morning", Description: "Morning digest on work days", Expression: "0 7 * * MON-FRI", TimeZone: "Europe/Paris",
		TargetType: scheduler.TargetWorkflow, Target: "digest", Args: json.RawMessage(`{"window":"24h"}`), Queue: "default",
		Priority: 2, Enabled: true, OverlapPolicy: scheduler.OverlapAllow, CatchUpPolicy: scheduler.CatchUpSkip, CreatedBy: "ada",
	}
	if diff := cmp.Diff(want, got, ignore); diff != "" {
		t.Errorf("created schedule (-want +got):\n%s", diff)
	}
	if got.NextRunAt.IsZero() {
		t.Error("created schedule has no next run")
	}

	// The name may also come as the argument; --disabled creates it off.
	if s := schedule("schedules", "create", "purge", "--expression", "@every 1h", "--job", "purge_sessions", "--queue", "maintenance", "--disabled", "--max-attempts", "3"); s.Enabled || s.TargetType != scheduler.TargetJob || s.MaxAttempts != 3 || s.Queue != "maintenance" {
		t.Errorf("created job schedule: %+v", s)
	}

	got = schedule("schedules", "update", "digest-morning", "--expression", "@daily", "--priority", "4", "--job", "send_digest", "--args", `{}`)
	want.Expression, want.Priority, want.TargetType, want.Target, want.Args = "@daily", 4, scheduler.TargetJob, "send_digest", json.RawMessage(`{}`)
	if diff := cmp.Diff(want, got, ignore); diff != "" {
		t.Errorf("updated schedule (-want +got):\n%s", diff)
	}

	if s := schedule("schedules", "toggle", "digest-morning", "--enabled=false"); s.Enabled {
		t.Error("toggle --enabled=false left the schedule enabled")
	}
	if s := schedule("schedules", "get", "digest-morning"); s.Enabled {
		t.Error("get after disabling shows it enabled")
	}
	if s := schedule("schedules", "toggle", "digest-morning"); !s.Enabled {
		t.Error("toggle left the schedule disabled")
	}
	if s := schedule("schedules", "update", "digest-morning", "--disabled"); s.Enabled {
		t.Error("update --disabled left the schedule enabled")
	}

	code, out, _ := braid(t, "schedules", "list", "--database-url", url)
	if code != 0 || !strings.Contains(out, "digest-morning  no") || !strings.Contains(out, "purge ") {
		t.Errorf("schedules list: code %d\n%s", code, out)
	}
	code, out, _ = braid(t, "schedules", "delete", "digest-morning", "--database-url", url)
	if code != 0 || strings.TrimSpace(out) != `deleted schedule "digest-morning"` {
		t.Errorf("schedules delete: code %d, %q", code, out)
	}
	code, _, errOut := braid(t, "schedules", "get", "digest-morning", "--database-url", url)
	if code != 1 || strings.TrimSpace(errOut) != `braid schedules: schedule "digest-morning" not found` {
		t.Errorf("get after delete: code %d, %q", code, errOut)
	}
}

func TestSchedulesErrors(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	if code, _, errOut := braid(t, "schedules", "create", "--name", "taken", "--expression", "@hourly", "--job", "tick", "--database-url", url); code != 0 {
		t.Fatalf("create: code %d: %s", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"create", "--name", "x", "--expression", "61 * * * *", "--job", "tick"}, 2, `invalid expression "61 * * * *": minute field 61 is out of range 0-59`},
		{[]string{"create", "--name", "x", "--expression", "@every 1s", "--time-zone", "Mars/Olympus", "--job", "tick"}, 2, "Mars/Olympus"},
		{[]string{"create", "--name", "x", "--expression", "@fortnightly", "--job", "tick"}, 2, `invalid expression "@fortnightly"`},
		{[]string{"create", "--name", "taken", "--expression", "@hourly", "--job", "tick"}, 1, `schedule "taken" already exists`},
		{[]string{"create", "--name", "x", "--expression", "@hourly"}, 2, "missing target: give --job KIND or --workflow NAME"},
		{[]string{"create", "--name", "x", "--job", "tick"}, 2, "missing --expression"},
		{[]string{"create", "--expression", "@hourly", "--job", "tick"}, 2, "missing --name"},
		{[]string{"create", "a", "--name", "b", "--expression", "@hourly", "--job", "tick"}, 2, `two names given: "a" and --name "b"`},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--workflow", "w"}, 2, "--job and --workflow are exclusive"},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--args", "{oops"}, 2, "--args is not valid JSON: {oops"},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--priority", "urgent"}, 2, `unknown priority "urgent"`},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--overlap", "queue"}, 2, `unknown overlap policy "queue"; use skip or allow`},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--catch-up", "all-of-them"}, 2, `unknown catch-up policy "all-of-them"`},
		// A value the scheduler refuses is a wrong command line too.
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--args", "[1]"}, 2, `schedule "x": args of a job target must be a JSON object`},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--max-attempts", "99999"}, 2, `schedule "x": max attempts 99999 is outside 0-32767`},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--queue", "Bad Queue"}, 2, `queue "Bad Queue" is invalid`},
		{[]string{"update", "taken", "--max-attempts", "99999"}, 2, `schedule "taken": max attempts 99999 is outside 0-32767`},
		{[]string{"update", "taken", "--args", `{"pad": "` + strings.Repeat("x", scheduler.MaxArgsBytesDefault) + `"}`}, 2, `schedule "taken": args are 65546 bytes of JSON; the limit is 65536 bytes`},
		{[]string{"create", "--name", "x", "--expression", "@hourly", "--job", "tick", "--frequency", "2"}, 2, "flag provided but not defined: -frequency"},
		{[]string{"update", "taken", "--expression", "0 0 30 2 *"}, 2, `invalid expression "0 0 30 2 *"`},
		{[]string{"update", "taken", "--time-zone", "Nowhere/City"}, 2, "Nowhere/City"},
		{[]string{"update", "taken"}, 2, "nothing to update"},
		{[]string{"update", "taken", "--name", "other"}, 2, "--name cannot change"},
		{[]string{"update"}, 2, "missing argument NAME"},
		{[]string{"update", "ghost", "--description", "x"}, 1, `schedule "ghost" not found`},
		{[]string{"update", "ghost", "--expression", "@daily"}, 1, `schedule "ghost" not found`},
		{[]string{"get"}, 2, "missing argument NAME"},
		{[]string{"get", "a", "b"}, 2, `unexpected argument "b"`},
		{[]string{"get", "ghost"}, 1, `schedule "ghost" not found`},
		{[]string{"toggle", "ghost"}, 1, `schedule "ghost" not found`},
		{[]string{"toggle", "taken", "--enabled=maybe"}, 2, "invalid boolean value"},
		{[]string{"delete", "ghost"}, 1, `schedule "ghost" not found`},
		{[]string{"delete"}, 2, "missing argument NAME"},
		{[]string{"list", "--limit", "0"}, 2, "--limit 0 is out of range; it must be 1 to 10000"},
		{[]string{"list", "--enabled=sometimes"}, 2, `"sometimes" is not a boolean`},
		{[]string{"pause"}, 2, `unknown subcommand "pause"`},
	} {
		args := append([]string{"schedules"}, tc.args...)
		code, out, errOut := braid(t, append(args, "--database-url", url)...)
		if code != tc.code || !strings.HasPrefix(errOut, "braid schedules: ") || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("braid %v: code %d, stdout %q, stderr %q; want code %d, a line containing %q", args, code, out, errOut, tc.code, tc.want)
		}
	}
}

// TestSchedulesLastError shows a schedule whose fire failed: cut short in
// the list (TestGolden), in full by get, and in the JSON of both.
func TestSchedulesLastError(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	const full = `inserting job of kind "renew_websub": ERROR: deadlock detected (SQLSTATE 40P01): ` +
		`Process 4121 waits for ShareLock on transaction 7712; blocked by process 977.`

	code, out, errOut := braid(t, "schedules", "get", "renew_websub", "--database-url", url)
	if code != 0 {
		t.Fatalf("schedules get: code %d: %s", code, errOut)
	}
	golden(t, "schedules-get-last-error", out)
	if !strings.Contains(out, full) {
		t.Errorf("schedules get does not show the whole error:\n%s", out)
	}

	code, out, errOut = braid(t, "schedules", "get", "renew_websub", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("schedules get --json: code %d: %s", code, errOut)
	}
	var one map[string]any
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatal(err)
	}
	if one["last_error"] != full || one["last_error_at"] != "2026-03-02T08:59:30Z" || one["fire_failures"] != float64(6) ||
		one["retry_at"] != "2026-03-02T09:00:30Z" {
		t.Errorf("schedules get --json: last_error %v at %v, failures %v, retry at %v", one["last_error"], one["last_error_at"],
			one["fire_failures"], one["retry_at"])
	}

	code, out, errOut = braid(t, "schedules", "list", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("schedules list --json: code %d: %s", code, errOut)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	errs := map[string]any{}
	for _, s := range list {
		errs[s["name"].(string)] = s["last_error"]
	}
	if want := (map[string]any{"cleanup": "", "nightly-report": "", "renew_websub": full}); !cmp.Equal(want, errs) {
		t.Errorf("schedules list --json: last errors %v, want %v", errs, want)
	}
}
