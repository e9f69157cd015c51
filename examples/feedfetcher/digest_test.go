package feedfetcher

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
	"github.com/braidflow/braid/workflow"
)

// sendNowWait returns the send-now wait of a digest run's root task, or nil
// while the run has not reached it.
func sendNowWait(t *testing.T, app *App, runID string) *workflow.StepInfo {
	t.Helper()
	run, err := app.engine.Run(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range run.Tasks {
		if task.ParentID != "" {
			continue
		}
		for _, s := range task.Steps {
			if s.Name == "signal:"+SendNowSignal {
				return &s
			}
		}
	}
	return nil
}

// completedDigest waits for a digest run to complete and returns its
// output.
func completedDigest(t *testing.T, app *App, runID string) DigestOutput {
	t.Helper()
	var run *workflow.RunInfo
	eventually(t, 10*time.Second, "the digest run to complete", func() bool {
		var err error
		if run, err = app.engine.Run(context.Background(), runID); err != nil {
			t.Fatal(err)
		}
		return run.Status == "completed"
	})
	var out DigestOutput
	if err := json.Unmarshal(run.Output, &out); err != nil {
		t.Fatalf("the output of run %s: %v", runID, err)
	}
	return out
}

// TestDigestSentEarlyOnRequest has a reader ask for a digest that waits
// out an hour's window: the send-now signal ends the wait, the digest is
// sent at once and marked early, and asking again sends nothing more.
func TestDigestSentEarlyOnRequest(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	srv := startServer(t)
	cfg := testConfig(nil)
	cfg.DigestWindow = time.Hour
	app := startApp(t, pool, cfg)
	ctx := ctxTimeout(t, 40*time.Second)
	alice := user(t, app, "alice")
	sub, err := app.Subscribe(ctx, alice.ID, srv.FeedURL("night-sky"))
	if err != nil {
		t.Fatal(err)
	}

	var pending []PendingDigest
	eventually(t, 20*time.Second, "alice's digest to wait out its window", func() bool {
		if pending, err = app.PendingDigests(ctx, alice.ID); err != nil {
			t.Fatal(err)
		}
		if len(pending) != 1 {
			return false
		}
		w := sendNowWait(t, app, pending[0].RunID)
		return w != nil && w.Status == "waiting"
	})
	if p := pending[0]; p.FeedID != sub.FeedID || p.Entries != 3 || !strings.HasPrefix(p.IdempotencyKey, "digest:") || p.Status != "waiting" {
		t.Errorf("pending digest %+v; want the waiting digest of night-sky's 3 entries", p)
	}
	if w := sendNowWait(t, app, pending[0].RunID); w.Kind != "signal" || w.WaitOn != SendNowSignal || w.ResumeAt == nil {
		t.Errorf("the window's wait %+v; want a wait on the signal %q with a timeout", w, SendNowSignal)
	}

	n, err := app.SendDigestNow(ctx, alice.ID, "ana")
	if err != nil || n != 1 {
		t.Fatalf("SendDigestNow = %d, %v; want 1 digest asked", n, err)
	}
	eventually(t, 10*time.Second, "the digest asked for", func() bool { return len(digestsOf(t, app, alice.ID, sub.FeedID)) == 1 })
	d := digestsOf(t, app, alice.ID, sub.FeedID)[0]
	if d.RunID != pending[0].RunID || !strings.Contains(d.Body, "Sent early, at the request of ana.") {
		t.Errorf("digest %+v; want run %s's, saying it was sent early at ana's request", d, pending[0].RunID)
	}
	out := completedDigest(t, app, d.RunID)
	if !out.Early || out.RequestedBy != "ana" || out.AlreadySent || out.DigestID != d.ID {
		t.Errorf("digest output %+v; want digest %d sent early, requested by ana", out, d.ID)
	}
	if w := sendNowWait(t, app, d.RunID); w.Status != "completed" {
		t.Errorf("the window's wait is %s; want completed by the signal", w.Status)
	}

	st, err := app.Stats(ctx, StatsFilter{FeedIDs: []int64{sub.FeedID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.SentEarly) != 1 {
		t.Fatalf("stats list %d digests sent early, want 1: %+v", len(st.SentEarly), st.SentEarly)
	}
	// The hour's window had barely begun when the signal ended it.
	if e := st.SentEarly[0]; e.RunID != d.RunID || e.UserID != alice.ID || e.User != "alice" || e.FeedID != sub.FeedID ||
		e.RequestedBy != "ana" || e.Ahead <= 50*time.Minute || e.Ahead > time.Hour {
		t.Errorf("early digest %+v; want alice's night-sky digest, asked for by ana, most of an hour ahead", e)
	}

	// Asking again finds nothing pending and sends nothing.
	if n, err := app.SendDigestNow(ctx, alice.ID, "ana"); !errors.Is(err, ErrNoPendingDigest) || n != 0 ||
		!strings.Contains(err.Error(), `"alice"`) {
		t.Errorf("SendDigestNow again = %d, %v; want ErrNoPendingDigest naming alice", n, err)
	}
	if n := len(digestsOf(t, app, alice.ID, sub.FeedID)); n != 1 {
		t.Errorf("%d digests after asking twice, want 1", n)
	}
}

// TestDigestSentAfterWindow leaves a digest alone: it is sent when its
// window passes, not early, and the wait on the signal is recorded as
// timed out.
func TestDigestSentAfterWindow(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	srv := startServer(t)
	cfg := testConfig(nil)
	app := startApp(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	alice := user(t, app, "alice")
	sub, err := app.Subscribe(ctx, alice.ID, srv.FeedURL("night-sky"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the digest", func() bool { return len(digestsOf(t, app, alice.ID, sub.FeedID)) == 1 })
	d := digestsOf(t, app, alice.ID, sub.FeedID)[0]
	if strings.Contains(d.Body, "Sent early") {
		t.Errorf("digest body says it was sent early:\n%s", d.Body)
	}
	out := completedDigest(t, app, d.RunID)
	if out.Early || out.RequestedBy != "" || out.DigestID != d.ID {
		t.Errorf("digest output %+v; want digest %d, not early", out, d.ID)
	}
	w := sendNowWait(t, app, d.RunID)
	if w == nil || w.Kind != "signal" || w.Status != "fired" || w.ResumeAt == nil {
		t.Fatalf("the window's wait %+v; want a wait on the signal that timed out", w)
	}
	// The digest went out once the wait's timeout passed, a full window
	// after the wait began (both by the database's clock).
	if gap := d.SentAt.Sub(w.CreatedAt); gap < cfg.DigestWindow {
		t.Errorf("digest sent %s after its window began, want at least %s", gap, cfg.DigestWindow)
	}
	st, err := app.Stats(ctx, StatsFilter{FeedIDs: []int64{sub.FeedID}})
	if err != nil {
		t.Fatal(err)
	}
	if st.DigestsSent != 1 || len(st.SentEarly) != 0 {
		t.Errorf("stats: %d digests sent, %d early; want 1 and none", st.DigestsSent, len(st.SentEarly))
	}
	if _, err := app.SendDigestNow(ctx, alice.ID, ""); !errors.Is(err, ErrNoPendingDigest) {
		t.Errorf("SendDigestNow after the digest was sent = %v, want ErrNoPendingDigest", err)
	}
}

// TestSendDigestNowTwice asks for a digest twice before its run has had a
// turn: the run takes the first request from its mailbox when its wait
// begins, the second is a no-op, and one digest is sent, early.
func TestSendDigestNowTwice(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	srv := startServer(t)
	cfg := testConfig(nil)
	cfg.DigestWindow = time.Hour
	app := newApp(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	alice := user(t, app, "alice")

	if _, err := app.SendDigestNow(ctx, alice.ID, "ana"); !errors.Is(err, ErrNoPendingDigest) || !strings.Contains(err.Error(), `"alice"`) {
		t.Errorf("SendDigestNow without a digest = %v, want ErrNoPendingDigest naming alice", err)
	}
	if _, err := app.SendDigestNow(ctx, 999_999, "ana"); !errors.Is(err, ErrUserNotFound) {
		t.Errorf("SendDigestNow for an unknown user = %v, want ErrUserNotFound", err)
	}

	// A feed that never yields entries, so that the only digest is the
	// one started here.
	sub, err := app.Subscribe(ctx, alice.ID, srv.FeedURL(feedserver.SlugFailing))
	if err != nil {
		t.Fatal(err)
	}
	in := DigestInput{UserID: alice.ID, FeedID: sub.FeedID, Window: time.Hour,
		Entries: []ArticleInput{{EntryID: 1, Title: "A note without a link"}}}
	run, err := app.digest.Start(ctx, app.engine, in, &workflow.StartOpts{IdempotencyKey: "digest:twice"})
	if err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{"ana", "bob"} {
		if n, err := app.SendDigestNow(ctx, alice.ID, by); err != nil || n != 1 {
			t.Fatalf("SendDigestNow by %s = %d, %v; want 1 digest asked", by, n, err)
		}
	}

	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	out := completedDigest(t, app, run.ID)
	if !out.Early || out.RequestedBy != "ana" {
		t.Errorf("digest output %+v; want sent early at the first request, ana's", out)
	}
	if ds := digestsOf(t, app, alice.ID, sub.FeedID); len(ds) != 1 || ds[0].RunID != run.ID {
		t.Errorf("digests %+v; want the one of run %s", ds, run.ID)
	}
	if _, err := app.SendDigestNow(ctx, alice.ID, "ana"); !errors.Is(err, ErrNoPendingDigest) {
		t.Errorf("SendDigestNow after the digest was sent = %v, want ErrNoPendingDigest", err)
	}
}
