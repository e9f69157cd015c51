package feedfetcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestEnsureUser(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)

	a, err := ensureUser(ctx, pool, "alice", "alice@example.org")
	if err != nil {
		t.Fatal(err)
	}
	again, err := ensureUser(ctx, pool, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, again); diff != "" {
		t.Errorf("ensuring an existing user without an email changed it (-first +again):\n%s", diff)
	}
	moved, err := ensureUser(ctx, pool, "alice", "alice@example.net")
	if err != nil {
		t.Fatal(err)
	}
	if moved.ID != a.ID || moved.Email != "alice@example.net" {
		t.Errorf("ensuring with a new email gave %+v, want user %d with the new email", moved, a.ID)
	}

	for _, bad := range []string{"", "   ", strings.Repeat("x", UserNameMaxLength+1)} {
		_, err := ensureUser(ctx, pool, bad, "")
		if err == nil || !strings.Contains(err.Error(), "100 characters") {
			t.Errorf("ensureUser(%.20q) = %v, want an error naming the limit", bad, err)
		}
	}
	if _, err := userName(ctx, pool, 999_999); !errors.Is(err, ErrUserNotFound) {
		t.Errorf("userName of a missing user = %v, want ErrUserNotFound", err)
	}
}

func TestCreateFeed(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const url = "https://example.org/feed.xml"

	f, created, err := createFeed(ctx, pool, url)
	if err != nil || !created {
		t.Fatalf("createFeed = %v, %t, %v; want a new feed", f, created, err)
	}
	again, created, err := createFeed(ctx, pool, url)
	if err != nil || created || again.ID != f.ID {
		t.Fatalf("createFeed again = %+v, %t, %v; want feed %d, not created", again, created, err, f.ID)
	}
	byURL, err := feedByURL(ctx, pool, url)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, byURL); diff != "" {
		t.Errorf("feedByURL differs from the created feed (-created +read):\n%s", diff)
	}
	if _, err := feedByID(ctx, pool, f.ID+1000); !errors.Is(err, ErrFeedNotFound) {
		t.Errorf("feedByID of a missing feed = %v, want ErrFeedNotFound", err)
	}
	list, err := listFeeds(ctx, pool, []int64{f.ID})
	if err != nil || len(list) != 1 || list[0].ID != f.ID {
		t.Errorf("listFeeds = %v, %v; want feed %d", list, err, f.ID)
	}
}

func TestValidateFeedURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, want string }{
		{"https://example.org/feed", ""},
		{"http://127.0.0.1:8080/feeds/x", ""},
		{"ftp://example.org/feed", "absolute http or https"},
		{"/feeds/x", "absolute http or https"},
		{"https://example.org/" + strings.Repeat("a", FeedURLMaxLength), "limit of 2048"},
		{"http://[::1", "missing ']'"},
	} {
		err := validateFeedURL(tt.url)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("validateFeedURL(%.40q) = %v, want nil", tt.url, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("validateFeedURL(%.40q) = %v, want an error containing %q", tt.url, err, tt.want)
		}
	}
}

func TestInsertEntriesDeduplicates(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	f, _, err := createFeed(ctx, pool, "https://example.org/feed")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := createFeed(ctx, pool, "https://example.org/other")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	// Newest first, as documents list them.
	first := []Entry{
		{GUID: "g3", Link: "https://example.org/3", Title: "Three", Published: at.Add(2 * time.Hour)},
		{Link: "https://example.org/2", Title: "Two, no GUID", Published: at.Add(time.Hour)},
		{GUID: "g1", Link: "https://example.org/1", Title: "One"},
	}
	got, err := insertEntries(ctx, pool, f.ID, first)
	if err != nil {
		t.Fatal(err)
	}
	titles := func(es []StoredEntry) (out []string) {
		for _, e := range es {
			out = append(out, e.Title)
		}
		return out
	}
	if diff := cmp.Diff([]string{"One", "Two, no GUID", "Three"}, titles(got)); diff != "" {
		t.Errorf("first insert, oldest first (-want +got):\n%s", diff)
	}
	if got[0].Key != "g1" || got[1].Key != "https://example.org/2" || !got[0].Published.IsZero() || !got[2].Published.Equal(at.Add(2*time.Hour)) {
		t.Errorf("keys or times not stored as given: %+v", got)
	}

	// g3 again (with a new link), the link of "Two" again, and one new
	// entry: only the new one is stored.
	second := []Entry{
		{GUID: "g4", Link: "https://example.org/4", Title: "Four"},
		{GUID: "g3", Link: "https://example.org/3-moved", Title: "Three, edited"},
		{Link: "https://example.org/2", Title: "Two, retitled"},
	}
	got, err = insertEntries(ctx, pool, f.ID, second)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Four"}, titles(got)); diff != "" {
		t.Errorf("second insert stores only the new entry (-want +got):\n%s", diff)
	}
	// The same entry in another feed is another entry.
	got, err = insertEntries(ctx, pool, other.ID, first[:1])
	if err != nil || len(got) != 1 {
		t.Errorf("the same GUID in another feed: %v, %v; want it stored", got, err)
	}
	all, err := listEntries(ctx, pool, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"One", "Two, no GUID", "Three", "Four"}, titles(all)); diff != "" {
		t.Errorf("stored entries (-want +got):\n%s", diff)
	}
	if got, err := insertEntries(ctx, pool, f.ID, nil); err != nil || got != nil {
		t.Errorf("inserting nothing = %v, %v", got, err)
	}
}

func TestRecordFetchOutcomes(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	f, _, err := createFeed(ctx, pool, "https://example.org/feed")
	if err != nil {
		t.Fatal(err)
	}
	u, err := ensureUser(ctx, pool, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO subscriptions (user_id, feed_id) VALUES ($1, $2)`, u.ID, f.ID); err != nil {
		t.Fatal(err)
	}
	backoff := func(n int) time.Duration { return time.Duration(n) * time.Hour }
	fetchErr := &FetchError{URL: f.URL, Status: 500, Err: ErrHTTPStatus}

	var before time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		n, next, err := recordFetchFailure(ctx, pool, f.ID, fetchErr, backoff)
		if err != nil {
			t.Fatal(err)
		}
		if n != want || next == nil || next.Before(before.Add(backoff(want))) || next.After(before.Add(backoff(want)+time.Minute)) {
			t.Errorf("failure %d: got %d, next %v; want next about %s from now", want, n, next, backoff(want))
		}
	}
	got, err := feedByID(ctx, pool, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ConsecutiveFailures != 2 || got.FailureCount != 2 || got.FetchCount != 2 || got.LastError != fetchErr.Error() || got.LastFetchedAt == nil {
		t.Errorf("after two failures: %+v", got)
	}

	next := time.Now().Add(5 * time.Minute).Truncate(time.Microsecond)
	res := &FetchResult{Status: 200, Title: "Example", ETag: `"abc"`, LastModified: "Fri, 14 Mar 2025 09:00:00 GMT", TTL: time.Hour, NextFetch: next}
	if err := recordFetchSuccess(ctx, pool, f.ID, res); err != nil {
		t.Fatal(err)
	}
	if err := recordFetchSuccess(ctx, pool, f.ID, &FetchResult{Status: 304, NotModified: true, ETag: `"abc"`, TTL: time.Hour, NextFetch: next}); err != nil {
		t.Fatal(err)
	}
	got, err = feedByID(ctx, pool, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := &Feed{
		ID: f.ID, URL: f.URL, Title: "Example", ETag: `"abc"`, TTL: time.Hour, NextFetchAt: &next,
		FetchCount: 4, NotModifiedCount: 1, FailureCount: 2,
	}
	ignore := cmpopts.IgnoreFields(Feed{}, "LastFetchedAt", "CreatedAt", "UpdatedAt")
	if diff := cmp.Diff(want, got, ignore); diff != "" {
		t.Errorf("after a success and a 304 (-want +got):\n%s", diff)
	}

	// Without subscribers the mirror stays empty.
	if _, err := pool.Exec(ctx, `UPDATE subscriptions SET unsubscribed_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, next, err := recordFetchFailure(ctx, pool, f.ID, fetchErr, backoff); err != nil || next != nil {
		t.Errorf("failure without subscribers: next %v, %v; want nil", next, err)
	}
	if err := recordFetchSuccess(ctx, pool, f.ID, res); err != nil {
		t.Fatal(err)
	}
	if got, _ := feedByID(ctx, pool, f.ID); got.NextFetchAt != nil {
		t.Errorf("success without subscribers mirrored next_fetch_at %v; want NULL", got.NextFetchAt)
	}
	if err := recordFetchSuccess(ctx, pool, f.ID+1000, res); !errors.Is(err, ErrFeedNotFound) {
		t.Errorf("recording a missing feed = %v, want ErrFeedNotFound", err)
	}
}

func TestInsertDigestOncePerKey(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	f, _, err := createFeed(ctx, pool, "https://example.org/feed")
	if err != nil {
		t.Fatal(err)
	}
	u, err := ensureUser(ctx, pool, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	d := &Digest{IdempotencyKey: "run-1/root/send", RunID: "run-1", UserID: u.ID, FeedID: f.ID,
		EntryIDs: []int64{1, 2}, Subject: "2 new entries", Body: "…"}
	first, inserted, err := insertDigest(ctx, pool, d)
	if err != nil || !inserted {
		t.Fatalf("first insert = %v, %t, %v", first, inserted, err)
	}
	retry := *d
	retry.Subject = "a retried send that must not go out"
	second, inserted, err := insertDigest(ctx, pool, &retry)
	if err != nil || inserted {
		t.Fatalf("second insert = %v, %t, %v; want the first digest, not inserted", second, inserted, err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("the second insert returned another digest (-first +second):\n%s", diff)
	}
	all, err := listDigests(ctx, pool, u.ID)
	if err != nil || len(all) != 1 {
		t.Errorf("digests of the user = %v, %v; want exactly one", all, err)
	}
	if _, _, err := insertDigest(ctx, pool, &Digest{UserID: u.ID, FeedID: f.ID}); err == nil {
		t.Error("a digest without an idempotency key was accepted")
	}
}

func TestRenewWebSub(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	app := newApp(t, pool, &Config{Logger: quietLogger(), WebSubLease: 48 * time.Hour})

	soon, _, err := createFeed(ctx, pool, "https://example.org/soon")
	if err != nil {
		t.Fatal(err)
	}
	later, _, err := createFeed(ctx, pool, "https://example.org/later")
	if err != nil {
		t.Fatal(err)
	}
	s1, err := app.RegisterWebSub(ctx, soon.ID, "https://hub.example.org/", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.RegisterWebSub(ctx, later.ID, "https://hub.example.org/", 10*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if s1.Lease != 2*time.Hour || s1.RenewedAt != nil {
		t.Errorf("registered %+v", s1)
	}

	renewals, err := app.RenewWebSub(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(renewals) != 1 || renewals[0].SubscriptionID != s1.ID || renewals[0].FeedID != soon.ID ||
		!renewals[0].PreviousExpiresAt.Equal(s1.ExpiresAt) || renewals[0].ExpiresAt.Sub(renewals[0].RenewedAt) != 48*time.Hour {
		t.Fatalf("renewals = %+v; want one of subscription %d for 48h", renewals, s1.ID)
	}
	// Renewed for 48 h, it no longer expires within 24 h.
	if renewals, err := app.RenewWebSub(ctx); err != nil || len(renewals) != 0 {
		t.Errorf("renewing again = %+v, %v; want nothing due", renewals, err)
	}
	var recorded int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM websub_renewals`).Scan(&recorded); err != nil || recorded != 1 {
		t.Errorf("websub_renewals holds %d rows (%v), want 1", recorded, err)
	}

	if _, err := app.RegisterWebSub(ctx, soon.ID+1000, "https://hub.example.org/", time.Hour); !errors.Is(err, ErrFeedNotFound) {
		t.Errorf("registering for a missing feed = %v, want ErrFeedNotFound", err)
	}
	if _, err := app.RegisterWebSub(ctx, soon.ID, "https://hub.example.org/", 0); err == nil || !strings.Contains(err.Error(), "between 1s") {
		t.Errorf("registering a zero lease = %v, want an error naming the limits", err)
	}
	if _, err := app.RegisterWebSub(ctx, soon.ID, "hub", time.Hour); err == nil {
		t.Error("registering a relative hub URL was accepted")
	}
}

func TestNewConfigErrors(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative window", Config{DigestWindow: -time.Second}, "DigestWindow must not be negative"},
		{"negative attempts", Config{ArticleAttempts: -1}, "ArticleAttempts must not be negative"},
		{"bad schedule", Config{WebSubSchedule: "@sometimes"}, "WebSubSchedule"},
		{"short lease", Config{WebSubLease: time.Millisecond}, "WebSubLease must be between 1s"},
		{"bad bounds", Config{Fetcher: FetcherConfig{MinInterval: time.Hour, MaxInterval: time.Minute}}, "MinInterval"},
	} {
		tt.cfg.Logger = quietLogger()
		_, err := New(pool, &tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	if _, err := New(nil, nil); err == nil {
		t.Error("New with a nil pool succeeded")
	}
}
