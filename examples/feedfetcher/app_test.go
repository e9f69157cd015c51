package feedfetcher

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
	"github.com/braidflow/braid/workflow"
)

// digestsOf returns the digests sent to a user for a feed.
func digestsOf(t *testing.T, app *App, userID, feedID int64) []*Digest {
	t.Helper()
	all, err := app.Digests(context.Background(), userID)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(d *Digest) bool { return d.FeedID != feedID })
}

// countEntries returns how many entries a feed has stored.
func countEntries(t *testing.T, app *App, feedID int64) int {
	t.Helper()
	es, err := app.Entries(context.Background(), feedID)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// feed reads a feed.
func feed(t *testing.T, app *App, feedID int64) *Feed {
	t.Helper()
	f, err := app.Feed(context.Background(), feedID)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestEndToEnd runs the feed reader against the bundled feed server with
// the real engine and scheduler: subscribe, fetch, new entries, digests
// sent once, failing feeds backing off, unsubscribe disabling the job and
// subscribing again enabling it, and the WebSub renewal schedule.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	srv := startServer(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := testConfig(tp)
	cfg.WebSubSchedule = "@every 1s"
	cfg.WebSubLease = time.Hour
	app := startApp(t, pool, cfg)
	ctx := ctxTimeout(t, 50*time.Second)
	alice, bob := user(t, app, "alice"), user(t, app, "bob")

	subscribe := func(u *User, slug string) *Subscription {
		t.Helper()
		sub, err := app.Subscribe(ctx, u.ID, srv.FeedURL(slug))
		if err != nil {
			t.Fatalf("%s subscribing to %s: %v", u.Name, slug, err)
		}
		return sub
	}
	// alice and bob subscribe in one transaction: the feed's first fetch,
	// due at once, finds them both, and each gets a digest of the entries
	// it stores. (A subscriber who comes after a fetch gets the entries of
	// later fetches only.)
	var cycling, again *Subscription
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if cycling, err = app.SubscribeTx(ctx, tx, alice.ID, srv.FeedURL("cycling-dispatch")); err != nil {
			return err
		}
		again, err = app.SubscribeTx(ctx, tx, bob.ID, srv.FeedURL("cycling-dispatch"))
		return err
	}); err != nil {
		t.Fatalf("alice and bob subscribing to cycling-dispatch: %v", err)
	}
	if !cycling.NewFeed {
		t.Fatalf("first subscription to cycling-dispatch: %+v, want a new feed", cycling)
	}
	if again.NewFeed || again.FeedID != cycling.FeedID {
		t.Fatalf("second subscription: %+v, want the existing feed %d", again, cycling.FeedID)
	}
	failing := subscribe(alice, feedserver.SlugFailing)
	malformed := subscribe(bob, feedserver.SlugMalformed)
	slow := subscribe(bob, feedserver.SlugSlow)
	if _, err := app.RegisterWebSub(ctx, cycling.FeedID, srv.URL()+"/hub", 2*time.Hour); err != nil {
		t.Fatal(err)
	}

	// The first fetch stores the three entries the feed starts with, and
	// each subscriber gets a digest of them, sent once.
	eventually(t, 20*time.Second, "the first digests of cycling-dispatch", func() bool {
		return len(digestsOf(t, app, alice.ID, cycling.FeedID)) == 1 && len(digestsOf(t, app, bob.ID, cycling.FeedID)) == 1
	})
	if n := countEntries(t, app, cycling.FeedID); n != 3 {
		t.Errorf("cycling-dispatch stored %d entries, want 3", n)
	}
	first := digestsOf(t, app, alice.ID, cycling.FeedID)[0]
	if len(first.EntryIDs) != 3 || !strings.Contains(first.Subject, "3 new entries in Cycling Dispatch") ||
		!strings.Contains(first.Body, "Hello alice") || !strings.Contains(first.Body, "/articles/cycling-dispatch/") {
		t.Errorf("alice's first digest: %+v", first)
	}
	// The digest is written by the run's last step; the run completes in
	// the turn's outcome, a moment later.
	var run *workflow.RunInfo
	eventually(t, 10*time.Second, "the digest run to complete", func() bool {
		var err error
		if run, err = app.engine.Run(ctx, first.RunID); err != nil {
			t.Fatal(err)
		}
		return run.Status == "completed"
	})
	if run.Status != "completed" || run.Workflow != DigestWorkflow {
		t.Errorf("the digest run is %s %s, want a completed %s", run.Workflow, run.Status, DigestWorkflow)
	}
	var children, fetched int
	for _, task := range run.Tasks {
		if task.Workflow == FetchArticleWorkflow {
			children++
			if task.Status == "completed" {
				fetched++
			}
		}
	}
	if children != 3 || fetched != 3 {
		t.Errorf("the digest run has %d fetch_article children, %d completed; want 3 and 3", children, fetched)
	}
	if f := feed(t, app, cycling.FeedID); f.Title != "Cycling Dispatch" || f.ETag == "" || f.LastModified == "" || f.NextFetchAt == nil {
		t.Errorf("cycling-dispatch after its fetch: %+v; want title, validators and a next fetch", f)
	}

	// Conditional GETs follow while nothing changes.
	eventually(t, 10*time.Second, "a 304 for cycling-dispatch", func() bool {
		return feed(t, app, cycling.FeedID).NotModifiedCount > 0
	})

	// A new entry makes a new digest with just that entry.
	if _, err := srv.Publish("cycling-dispatch"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the digests of the published entry", func() bool {
		return len(digestsOf(t, app, alice.ID, cycling.FeedID)) == 2 && len(digestsOf(t, app, bob.ID, cycling.FeedID)) == 2
	})
	if d := digestsOf(t, app, bob.ID, cycling.FeedID)[1]; len(d.EntryIDs) != 1 {
		t.Errorf("bob's second digest has entries %v, want the one new entry", d.EntryIDs)
	}

	// Failing feeds back off and count their failures, on the feed and on
	// the recurring job.
	eventually(t, 15*time.Second, "two failures of each failing feed", func() bool {
		return feed(t, app, failing.FeedID).ConsecutiveFailures >= 2 && feed(t, app, malformed.FeedID).ConsecutiveFailures >= 2
	})
	for _, tt := range []struct {
		sub  *Subscription
		want string
	}{{failing, "500 Internal Server Error"}, {malformed, "malformed feed"}} {
		f := feed(t, app, tt.sub.FeedID)
		job := fetchJob(t, app, tt.sub.FeedID)
		if !strings.Contains(f.LastError, tt.want) || f.NextFetchAt == nil || countEntries(t, app, f.ID) != 0 {
			t.Errorf("%s: %+v; want last error %q, a next fetch, no entries", f.URL, f, tt.want)
		}
		if job.ConsecutiveFailures < 1 || !strings.Contains(job.LastError, tt.want) {
			t.Errorf("the job of %s: %+v; want failures recorded", f.URL, job)
		}
	}
	// The slow feed is fetched all the same.
	eventually(t, 10*time.Second, "the slow feed's entries", func() bool { return countEntries(t, app, slow.FeedID) == 3 })

	// Unsubscribing: alice leaves and bob stays, so the job stays enabled;
	// then bob leaves and it is disabled.
	if sub, err := app.Unsubscribe(ctx, alice.ID, cycling.FeedID); err != nil || !sub.FetchEnabled {
		t.Fatalf("alice unsubscribing = %+v, %v; want the job still enabled", sub, err)
	}
	if sub, err := app.Unsubscribe(ctx, bob.ID, cycling.FeedID); err != nil || sub.FetchEnabled {
		t.Fatalf("bob unsubscribing = %+v, %v; want the job disabled", sub, err)
	}
	if job := fetchJob(t, app, cycling.FeedID); job.Enabled {
		t.Fatalf("the job is enabled after the last subscriber left: %+v", job)
	}
	eventually(t, 10*time.Second, "the last fetch of cycling-dispatch to end", func() bool {
		return fetchJob(t, app, cycling.FeedID).RunningSince == nil
	})
	requests := srv.Requests("/feeds/cycling-dispatch")
	if _, err := srv.Publish("cycling-dispatch"); err != nil {
		t.Fatal(err)
	}
	if f := feed(t, app, cycling.FeedID); f.NextFetchAt != nil {
		t.Errorf("next_fetch_at of an unsubscribed feed = %v, want NULL", f.NextFetchAt)
	}

	// Bob subscribes again: the same job is enabled, the feed is fetched
	// again, and the new entry reaches bob alone.
	back := subscribe(bob, "cycling-dispatch")
	if back.NewFeed || back.FeedID != cycling.FeedID || !fetchJob(t, app, cycling.FeedID).Enabled {
		t.Fatalf("bob subscribing again: %+v; want the existing feed with its job enabled", back)
	}
	eventually(t, 15*time.Second, "bob's digest after subscribing again", func() bool {
		return len(digestsOf(t, app, bob.ID, cycling.FeedID)) == 3
	})
	if srv.Requests("/feeds/cycling-dispatch") <= requests {
		t.Error("the feed was not fetched again after subscribing again")
	}
	if n := len(digestsOf(t, app, alice.ID, cycling.FeedID)); n != 2 {
		t.Errorf("alice, unsubscribed, has %d digests of cycling-dispatch, want still 2", n)
	}

	// The renew_websub schedule renews the subscription at the hub.
	eventually(t, 10*time.Second, "a WebSub renewal", func() bool {
		st, err := app.Stats(ctx, StatsFilter{})
		return err == nil && st.WebSubRenewals > 0
	})

	// A digest run records its send step before its last turn finishes
	// it: the stats are read once no run is unfinished.
	filter := StatsFilter{FeedIDs: []int64{cycling.FeedID, failing.FeedID, malformed.FeedID, slow.FeedID}}
	eventually(t, 10*time.Second, "every digest run to finish", func() bool {
		st, err := app.Stats(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		return st.Runs["pending"]+st.Runs["running"]+st.Runs["waiting"] == 0
	})
	st, err := app.Stats(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	if st.Feeds != 4 || st.FeedsFetched != 4 || st.FeedsFailing != 2 || st.FetchDisabled != 0 ||
		st.Entries != 3+2+3 || st.DigestsSent != 2+2+1+1 || st.DigestsSentTwice != 0 || st.DuplicatesSuppressed != 0 ||
		st.Runs["completed"] < 6 || st.Runs["failed"] != 0 || st.NotModified == 0 || st.FetchFailures < 4 {
		t.Errorf("stats: %+v", st)
	}

	assertDigestTrace(t, rec, first.RunID)
}

// assertDigestTrace checks that one digest run is one trace: a
// feedfetcher.digest root linked to the fetch that found the entries, the
// run's start, its turns (before the fan-out, after it, after the window),
// the fetch_article children with their steps, and the send step.
func assertDigestTrace(t *testing.T, rec *tracetest.SpanRecorder, runID string) {
	t.Helper()
	spans := rec.Ended()
	var traceID trace.TraceID
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == "run.id" && kv.Value.AsString() == runID && s.Name() == "feedfetcher.digest" {
				traceID = s.SpanContext().TraceID()
				if s.Parent().IsValid() {
					t.Errorf("feedfetcher.digest has a parent; want it the root of its trace")
				}
				if len(s.Links()) != 1 || s.Links()[0].SpanContext.TraceID() == traceID {
					t.Errorf("feedfetcher.digest links %v; want one link to the fetch's trace", s.Links())
				}
			}
		}
	}
	if !traceID.IsValid() {
		t.Fatalf("no feedfetcher.digest span for run %s", runID)
	}
	count := map[string]int{}
	for _, s := range spans {
		if s.SpanContext().TraceID() == traceID {
			count[s.Name()]++
		}
	}
	for name, atLeast := range map[string]int{
		"feedfetcher.digest":       1,
		"braid.run.start":          1,
		"braid.task digest":        3, // fan out; continue and wait; send
		"braid.task fetch_article": 3,
		"braid.step get":           3,
		"braid.step send":          1,
		// The window: a wait on the send-now signal that timed out.
		"braid.wait signal signal:" + SendNowSignal: 1,
	} {
		if count[name] < atLeast {
			t.Errorf("trace of run %s has %d %q spans, want at least %d; all: %v", runID, count[name], name, atLeast, count)
		}
	}
	if n := count["river.job "+FetchFeedKind]; n != 0 {
		t.Errorf("trace of run %s holds %d fetch spans; want the fetch in a trace of its own", runID, n)
	}
}

// TestDigestSendsOnce sends a digest again with its run's idempotency key,
// as a send step that runs again after a crash would: nothing is written
// and the step reports the digest as sent already.
func TestDigestSendsOnce(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	srv := startServer(t)
	app := startApp(t, pool, testConfig(nil))
	ctx := ctxTimeout(t, 30*time.Second)
	alice := user(t, app, "alice")
	sub, err := app.Subscribe(ctx, alice.ID, srv.FeedURL("night-sky"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the first digest", func() bool { return len(digestsOf(t, app, alice.ID, sub.FeedID)) == 1 })
	d := digestsOf(t, app, alice.ID, sub.FeedID)[0]
	if !strings.Contains(d.IdempotencyKey, "send") {
		t.Errorf("digest key %q, want the send step's idempotency key", d.IdempotencyKey)
	}

	out, err := app.send(ctx, d.RunID, d.IdempotencyKey, DigestInput{UserID: alice.ID, FeedID: sub.FeedID}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !out.AlreadySent || out.DigestID != d.ID {
		t.Errorf("sending again = %+v, want digest %d reported as already sent", out, d.ID)
	}
	if n := len(digestsOf(t, app, alice.ID, sub.FeedID)); n != 1 {
		t.Errorf("%d digests after sending twice, want 1", n)
	}
}

// TestArticlePipeline follows the article pipeline of every new entry of
// three feeds, in English, French and German, for a reader who wants
// summaries in English and German: each entry is fetched, extracted,
// its language detected and indexed; the summary node runs for the English
// and German entries and is skipped, with its condition as the reason, for
// the French ones.
func TestArticlePipeline(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	srv := startServer(t)
	cfg := testConfig(nil)
	cfg.Languages = []string{"EN", "de", "en"}
	app := startApp(t, pool, cfg)
	ctx := ctxTimeout(t, 50*time.Second)
	if got := app.Languages(); !slices.Equal(got, []string{"en", "de"}) {
		t.Fatalf("Languages() = %v, want [en de]", got)
	}
	alice := user(t, app, "alice")
	feeds := map[string]int64{}
	for _, slug := range []string{"cycling-dispatch", "marche-du-quartier", "bergwetter"} {
		sub, err := app.Subscribe(ctx, alice.ID, srv.FeedURL(slug))
		if err != nil {
			t.Fatal(err)
		}
		feeds[slug] = sub.FeedID
	}
	articles := func(slug string) []*IndexedArticle {
		t.Helper()
		arts, err := app.Articles(ctx, feeds[slug])
		if err != nil {
			t.Fatal(err)
		}
		return arts
	}
	eventually(t, 30*time.Second, "three indexed articles per feed", func() bool {
		for slug := range feeds {
			if len(articles(slug)) != 3 {
				return false
			}
		}
		return true
	})
	// The index node writes the article; the run completes a turn later.
	eventually(t, 10*time.Second, "nine completed pipeline runs", func() bool {
		n, err := workflow.CountRuns(ctx, pool, workflow.RunFilter{Workflow: PipelineWorkflow, Status: "completed"})
		return err == nil && n == 9
	})

	skipReason := "condition false: " + SummaryCondition
	for slug, want := range map[string]struct {
		lang      string
		summarize bool
	}{"cycling-dispatch": {"en", true}, "marche-du-quartier": {"fr", false}, "bergwetter": {"de", true}} {
		entries, err := app.Entries(ctx, feeds[slug])
		if err != nil {
			t.Fatal(err)
		}
		byEntry := map[int64]*IndexedArticle{}
		for _, art := range articles(slug) {
			byEntry[art.EntryID] = art
		}
		for _, e := range entries {
			art := byEntry[e.ID]
			if art == nil {
				t.Errorf("%s: entry %d %q is not indexed", slug, e.ID, e.Title)
				continue
			}
			if art.Language != want.lang || art.Title != e.Title || art.Chars < len(e.Summary) ||
				(art.Summary != nil) != want.summarize || (art.Summary != nil && *art.Summary == "") {
				t.Errorf("%s: article %+v of entry %d %q; want language %s, summarized %t", slug, art, e.ID, e.Title, want.lang, want.summarize)
			}
			run, err := app.PipelineRun(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if run.ID != art.RunID || run.Status != "completed" {
				t.Errorf("%s: pipeline run %s is %s; want the completed run %s that indexed the entry", slug, run.ID, run.Status, art.RunID)
			}
			nodes := map[string]workflow.TaskInfo{}
			for _, task := range run.Tasks {
				if task.Node {
					nodes[task.Key] = task
				}
			}
			for _, name := range []string{NodeFetch, NodeExtract, NodeLanguage, NodeIndex} {
				if n := nodes[name]; n.Status != "completed" {
					t.Errorf("%s: node %s of entry %d is %q (%s), want completed", slug, name, e.ID, n.Status, n.Error)
				}
			}
			if n := nodes[NodeIndex]; !slices.Equal(n.DependsOn, []string{NodeExtract, NodeLanguage, NodeSummary}) {
				t.Errorf("index depends on %v", n.DependsOn)
			}
			switch sum := nodes[NodeSummary]; {
			case want.summarize && sum.Status != "completed":
				t.Errorf("%s: summary of entry %d is %q (%s), want completed", slug, e.ID, sum.Status, sum.SkipReason)
			case !want.summarize && (sum.Status != "skipped" || sum.SkipReason != skipReason):
				t.Errorf("%s: summary of entry %d is %q with reason %q; want skipped with %q", slug, e.ID, sum.Status, sum.SkipReason, skipReason)
			}
			var res workflow.DAGResult
			if err := json.Unmarshal(run.Output, &res); err != nil {
				t.Fatal(err)
			}
			out, err := app.pipe.index.From(res)
			if err != nil || out.ArticleID != art.ID || out.Language != want.lang || out.Summarized != want.summarize || out.AlreadyIndexed {
				t.Errorf("%s: the run's index output %+v, %v; want article %d", slug, out, err, art.ID)
			}
		}
	}

	// Starting the pipelines again for the same entries, as a fetch retried
	// after its transaction committed would, starts nothing: each entry's
	// run is keyed by the entry.
	count := func() int64 {
		n, err := workflow.CountRuns(ctx, pool, workflow.RunFilter{Workflow: PipelineWorkflow})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 9 {
		t.Errorf("%d pipeline runs, want 9", n)
	}
	f := feed(t, app, feeds["marche-du-quartier"])
	entries, err := app.Entries(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := app.startPipelinesTx(ctx, tx, f, entries)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 9 {
		t.Errorf("%d pipeline runs after starting them again, want still 9", n)
	}
	// A store step that runs again writes nothing.
	art := articles("marche-du-quartier")[0]
	if got, inserted, err := insertArticle(ctx, pool, &IndexedArticle{EntryID: art.EntryID, FeedID: art.FeedID, RunID: "again", Language: "en"}); err != nil || inserted || got.ID != art.ID || got.RunID != art.RunID {
		t.Errorf("indexing entry %d again = %+v, %t, %v; want the article as it was", art.EntryID, got, inserted, err)
	}

	// An entry whose page is gone is read from its own summary.
	var gone []StoredEntry
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		gone, err = insertEntries(ctx, tx, f.ID, []Entry{{GUID: "gone", Link: srv.URL() + "/articles/marche-du-quartier/999",
			Title: "Fermé", Summary: "Le marché est fermé pour les vacances, et il rouvre avec les producteurs de la vallée en septembre."}})
		if err != nil {
			return err
		}
		_, err = app.startPipelinesTx(ctx, tx, f, gone)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the pipeline of the entry whose page is gone", func() bool {
		run, err := app.PipelineRun(ctx, gone[0].ID)
		return err == nil && run.Status == "completed"
	})
	run, err := app.PipelineRun(ctx, gone[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var fetched FetchOutput
	var goneSummary workflow.TaskInfo
	for _, task := range run.Tasks {
		switch task.Key {
		case NodeFetch:
			if err := json.Unmarshal(task.Output, &fetched); err != nil {
				t.Fatal(err)
			}
		case NodeSummary:
			goneSummary = task
		}
	}
	if !fetched.FromEntry || !strings.Contains(fetched.Error, "404") || fetched.Body != gone[0].Summary {
		t.Errorf("fetch of a page that is gone: %+v; want the entry's summary instead, and the 404", fetched)
	}
	if goneSummary.Status != "skipped" || goneSummary.SkipReason != skipReason {
		t.Errorf("summary of the entry whose page is gone: %s %q", goneSummary.Status, goneSummary.SkipReason)
	}
	if _, err := app.PipelineRun(ctx, 1<<40); !errors.Is(err, ErrNoPipeline) {
		t.Errorf("PipelineRun of an unknown entry: %v, want ErrNoPipeline", err)
	}

	st, err := app.Stats(ctx, StatsFilter{FeedIDs: slices.Collect(maps.Values(feeds))})
	if err != nil {
		t.Fatal(err)
	}
	// The entry whose page is gone is one more French article, with its
	// summary skipped.
	wantSkipped := []SkippedNodes{{Node: NodeSummary, Reason: skipReason, Count: 4}}
	if st.Pipelines["completed"] != 10 || len(st.Pipelines) != 1 || st.PipelineNodes[NodeIndex]["completed"] != 10 ||
		st.PipelineNodes[NodeSummary]["completed"] != 6 || st.PipelineNodes[NodeSummary]["skipped"] != 4 ||
		!slices.Equal(st.Skipped, wantSkipped) || st.Articles != 10 || st.Summarized != 6 ||
		*st.Languages["fr"] != (LanguageStats{Articles: 4}) || *st.Languages["de"] != (LanguageStats{Articles: 3, Summarized: 3}) {
		t.Errorf("pipeline stats: pipelines %v, nodes %v, skipped %v, articles %d (%d summarized)",
			st.Pipelines, st.PipelineNodes, st.Skipped, st.Articles, st.Summarized)
	}
	for _, fs := range st.PerFeed {
		if fs.Articles < 3 || fs.Language == "" {
			t.Errorf("feed %s: %d articles in %q, want 3 or more and a language", fs.URL, fs.Articles, fs.Language)
		}
	}
}
