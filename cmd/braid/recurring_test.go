package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/braidflow/braid/scheduler"
)

func TestRecurringEnableDisableRevive(t *testing.T) {
	t.Parallel()
	url := seeded(t)
	recurring := func(args ...string) *scheduler.Recurring {
		t.Helper()
		code, out, errOut := braid(t, append(append([]string{"recurring"}, args...), "--json", "--database-url", url)...)
		if code != 0 {
			t.Fatalf("braid recurring %v: code %d: %s", args, code, errOut)
		}
		var r scheduler.Recurring
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("braid recurring %v --json: %v\n%s", args, err, out)
		}
		return &r
	}
	kept := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)

	if r := recurring("disable", "fetch_feed", "feed:1"); r.Enabled || !r.NextRunAt.Equal(kept) {
		t.Errorf("disable: enabled %t, next run %s; want disabled keeping %s", r.Enabled, r.NextRunAt, kept)
	}
	if r := recurring("enable", "fetch_feed", "feed:1"); !r.Enabled || !r.NextRunAt.Equal(kept) {
		t.Errorf("enable: enabled %t, next run %s; want enabled at the kept %s", r.Enabled, r.NextRunAt, kept)
	}
	r := recurring("revive", "fetch_feed", "feed:4")
	if r.DeadAt != nil || r.ConsecutiveFailures != 0 {
		t.Errorf("revive: dead at %v, %d failures; want live with none", r.DeadAt, r.ConsecutiveFailures)
	}

	code, out, _ := braid(t, "recurring", "list", "--dead", "--database-url", url)
	if code != 0 || out != "no recurring jobs\n" {
		t.Errorf("recurring list --dead after the revive: code %d\n%s", code, out)
	}
	code, out, _ = braid(t, "recurring", "disable", "fetch_feed", "feed:2", "--database-url", url)
	want := "KIND        KEY     STATE     NEXT RUN             LAST RUN             FAILURES  LAST ERROR\n" +
		"fetch_feed  feed:2  disabled  2026-03-02 09:20:00  2026-03-02 09:08:01  3         GET https://feeds.example.com/flaky.xml: 503 Service Unavailable\n"
	if code != 0 || out != want {
		t.Errorf("recurring disable: code %d\n%s\nwant\n%s", code, out, want)
	}
}
