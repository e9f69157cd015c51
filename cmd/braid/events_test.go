package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// feedItem is the payload of an event on the topic "feeds".
type feedItem struct {
	ID    int    `json:"id"`
	Title string `json:"title"`
}

// feedWatch waits, with no timeout, for an event on "feeds" about the feed
// it was started for, and returns the event's title.
var feedWatch = workflow.Define("feed_watch", func(t *workflow.Task, in feedItem) (string, error) {
	item, ok, err := workflow.WaitEvent[feedItem](t, "feeds", "payload.id == input.id", 0)
	if err != nil || !ok {
		return "", err
	}
	return item.Title, nil
})

// TestEventsPublish publishes events with the CLI on a running engine: one
// that no filter matches wakes nothing, one that matches wakes the waiting
// task, which takes its payload, and a topic nobody waits on wakes none.
func TestEventsPublish(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	eng := startEngine(t, ctx, pool, feedWatch)
	run, err := feedWatch.Start(ctx, eng, feedItem{ID: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	awaitWait(t, ctx, pool, run.ID, "event")

	// runs show lists the pending wait with its filter.
	code, out, errOut := braid(t, "runs", "show", run.ID, "--database-url", url)
	if want := `waiting on event "feeds" filter payload.id == input.id (no timeout)` + "\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("runs show: code %d, stderr %q; want the wait %q in:\n%s", code, errOut, want, out)
	}
	if strings.Contains(out, "deadline:") {
		t.Errorf("runs show of a run without a timeout shows a deadline:\n%s", out)
	}

	for _, tc := range []struct {
		topic, payload, want string
	}{
		{"feeds", `{"id": 8, "title": "other feed"}`, `published an event on topic "feeds"; it woke 0 waiting tasks`},
		{"feeds", `{"id": 7, "title": "braid 1.0"}`, `published an event on topic "feeds"; it woke 1 waiting task`},
		{"nobody-listens", `{"id": 7}`, `published an event on topic "nobody-listens"; it woke 0 waiting tasks`},
	} {
		code, out, errOut := braid(t, "events", "publish", tc.topic, "--payload", tc.payload, "--database-url", url)
		if code != 0 || out != tc.want+"\n" || errOut != "" {
			t.Fatalf("events publish %s %s: code %d, stdout %q, stderr %q; want %q", tc.topic, tc.payload, code, out, errOut, tc.want)
		}
	}
	if title, err := run.Result(ctx); err != nil || title != "braid 1.0" {
		t.Fatalf("the woken run ended with %q, %v; want the title of the matching event", title, err)
	}

	code, out, errOut = braid(t, "events", "publish", "feeds", "--json", "--database-url", url)
	var published publishView
	if code != 0 || json.Unmarshal([]byte(out), &published) != nil || published != (publishView{Topic: "feeds"}) {
		t.Errorf("events publish --json: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 4 {
		t.Errorf("braid_events holds %d events; want the 4 published", events)
	}

	checkErrors(t, []string{"--database-url", url}, []errorCase{
		{[]string{"events", "publish", "feeds", "--payload", "{id: 7}"}, 2, "--payload is not valid JSON: invalid character 'i' looking for beginning of object key string"},
		{[]string{"events", "publish", "feeds", "--payload", "7 8"}, 2, "--payload is not valid JSON"},
		{[]string{"events", "publish", ""}, 2, "topic is empty"},
		{[]string{"events", "publish", strings.Repeat("t", workflow.MessageNameMax+1)}, 2, "bytes, over the limit of 200"},
		{[]string{"events", "publish"}, 2, "missing argument TOPIC"},
		{[]string{"events", "publish", "feeds", "more"}, 2, `unexpected argument "more"`},
		{[]string{"events"}, 2, "missing subcommand: braid events publish"},
		{[]string{"events", "publish", "feeds", "--payload", `"` + strings.Repeat("x", 1<<20) + `"`}, 1, "--payload is 1048578 bytes, over the limit of 1048576 bytes"},
	})
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 4 {
		t.Errorf("braid_events holds %d events after the refused publishes; want 4", events)
	}
}
