package feedfetcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// demoBounds are the small bounds the demo schedules within.
var demoBounds = FetcherConfig{MinInterval: 2 * time.Second, MaxInterval: 10 * time.Second}

// newFetcher returns a fetcher whose connections are closed when the test
// ends.
func newFetcher(t *testing.T, cfg FetcherConfig) *Fetcher {
	t.Helper()
	f, err := NewFetcher(cfg)
	if err != nil {
		t.Fatalf("NewFetcher: %v", err)
	}
	t.Cleanup(f.CloseIdleConnections)
	return f
}

// startFeedServer starts the bundled feed server on a frozen clock, so that
// entries appear only through Publish. It is closed when the test ends.
func startFeedServer(t *testing.T, cfg feedserver.Config) *feedserver.Server {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = newFakeClock().Now
	}
	s, err := feedserver.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("feedserver.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("feedserver Close: %v", err)
		}
	})
	return s
}

// startHandler serves h on loopback until the test ends.
func startHandler(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// wantEntries converts the server's entries of a feed into what a fetch
// should return: newest first, as the documents list them.
func wantEntries(t *testing.T, s *feedserver.Server, slug string) []Entry {
	t.Helper()
	es, err := s.Entries(slug)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Entry, 0, len(es))
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		out = append(out, Entry{GUID: e.ID, Link: e.Link, Title: e.Title, Published: e.Published, Summary: e.Summary})
	}
	return out
}

func keys(es []Entry) map[string]bool {
	m := make(map[string]bool, len(es))
	for _, e := range es {
		m[e.Key()] = true
	}
	return m
}

func TestFetchParsesEverySampleFeed(t *testing.T) {
	t.Parallel()
	s := startFeedServer(t, feedserver.Config{InitialEntries: 4})
	f := newFetcher(t, demoBounds)
	for _, fi := range s.Feeds() {
		if fi.Behavior != feedserver.BehaviorNormal {
			continue
		}
		t.Run(fi.Slug, func(t *testing.T) {
			t.Parallel()
			res, err := f.Fetch(context.Background(), FetchRequest{URL: fi.URL})
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if res.Status != http.StatusOK || res.NotModified || res.Title != fi.Title || res.URL != fi.URL {
				t.Errorf("got status %d, not modified %t, title %q, URL %s; want 200, false, %q, %s",
					res.Status, res.NotModified, res.Title, res.URL, fi.Title, fi.URL)
			}
			if diff := cmp.Diff(wantEntries(t, s, fi.Slug), res.Entries); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if res.ETag == "" || res.LastModified == "" {
				t.Errorf("ETag %q, Last-Modified %q; want both", res.ETag, res.LastModified)
			}
		})
	}
}

func TestFetchConditionalRoundTrip(t *testing.T) {
	t.Parallel()
	s := startFeedServer(t, feedserver.Config{})
	clock := newFakeClock()
	cfg := demoBounds
	cfg.Now = clock.Now
	f := newFetcher(t, cfg)
	ctx := context.Background()
	url := s.FeedURL("night-sky") // RSS with <ttl>60</ttl>

	first, err := f.Fetch(ctx, FetchRequest{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != http.StatusOK || len(first.Entries) != feedserver.InitialEntriesDefault || first.TTL != time.Hour {
		t.Fatalf("first fetch: status %d, %d entries, TTL %s; want 200, %d, 1h", first.Status, len(first.Entries), first.TTL, feedserver.InitialEntriesDefault)
	}

	tests := []struct {
		name string
		req  FetchRequest
	}{
		{"both validators", FetchRequest{URL: url, ETag: first.ETag, LastModified: first.LastModified, TTL: first.TTL}},
		{"ETag only", FetchRequest{URL: url, ETag: first.ETag, TTL: first.TTL}},
		{"Last-Modified only", FetchRequest{URL: url, LastModified: first.LastModified, TTL: first.TTL}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := f.Fetch(ctx, tt.req)
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			want := &FetchResult{
				URL:          url,
				Status:       http.StatusNotModified,
				NotModified:  true,
				ETag:         first.ETag,
				LastModified: first.LastModified,
				TTL:          time.Hour,
				FetchedAt:    clock.Now(),
				Interval:     10 * time.Second, // the 1h TTL, clamped
				NextFetch:    clock.Now().Add(10 * time.Second),
			}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
	if n := s.Requests("/feeds/night-sky"); n != 4 {
		t.Errorf("server saw %d requests, want 4", n)
	}
}

func TestFetchNewEntriesAfterPublish(t *testing.T) {
	t.Parallel()
	s := startFeedServer(t, feedserver.Config{})
	f := newFetcher(t, demoBounds)
	ctx := context.Background()
	for _, slug := range []string{"harbor-engineering", "birdwatch", "kitchen-chemistry"} {
		t.Run(slug, func(t *testing.T) {
			t.Parallel()
			url := s.FeedURL(slug)
			first, err := f.Fetch(ctx, FetchRequest{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			published, err := s.Publish(slug)
			if err != nil {
				t.Fatal(err)
			}
			second, err := f.Fetch(ctx, FetchRequest{URL: url, ETag: first.ETag, LastModified: first.LastModified})
			if err != nil {
				t.Fatal(err)
			}
			if second.NotModified || second.ETag == first.ETag {
				t.Fatalf("second fetch: not modified %t, ETag %s unchanged; want a new document", second.NotModified, second.ETag)
			}
			seen := keys(first.Entries)
			var fresh []Entry
			for _, e := range second.Entries {
				if !seen[e.Key()] {
					fresh = append(fresh, e)
				}
			}
			want := []Entry{{GUID: published.ID, Link: published.Link, Title: published.Title, Published: published.Published, Summary: published.Summary}}
			if diff := cmp.Diff(want, fresh); diff != "" {
				t.Errorf("new entries (-want +got):\n%s", diff)
			}
			if published.ID == "" && fresh[0].Key() != published.Link {
				t.Errorf("key of an entry without GUID = %q, want its link %q", fresh[0].Key(), published.Link)
			}
		})
	}
}

func TestFetchIntervalFromFeed(t *testing.T) {
	t.Parallel()
	s := startFeedServer(t, feedserver.Config{})
	tests := []struct {
		slug     string
		min, max time.Duration
		want     time.Duration
	}{
		{"cycling-dispatch", 2 * time.Second, 10 * time.Second, 5 * time.Second},      // max-age=5
		{"harbor-engineering", 2 * time.Second, 10 * time.Second, 10 * time.Second},   // max-age=60, clamped
		{"harbor-engineering", time.Second, time.Hour, time.Minute},                   // max-age=60
		{"open-source-digest", time.Second, time.Hour, 30 * time.Second},              // Expires = Date + 30 s
		{"night-sky", time.Second, 24 * time.Hour, time.Hour},                         // <ttl>60</ttl>
		{"transit-updates", time.Second, time.Hour, 5 * time.Minute},                  // max-age=3, <ttl>5</ttl>
		{"small-garden", time.Second, time.Hour, 30 * time.Minute},                    // sy: hourly, twice
		{"distributed-reading", time.Second, 24 * time.Hour, FallbackIntervalDefault}, // no hint
		{"distributed-reading", 2 * time.Second, 10 * time.Second, 10 * time.Second},  // no hint, clamped
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s in [%s,%s]", tt.slug, tt.min, tt.max), func(t *testing.T) {
			t.Parallel()
			f := newFetcher(t, FetcherConfig{MinInterval: tt.min, MaxInterval: tt.max})
			res, err := f.Fetch(context.Background(), FetchRequest{URL: s.FeedURL(tt.slug)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Interval != tt.want || !res.NextFetch.Equal(res.FetchedAt.Add(tt.want)) {
				t.Errorf("Interval = %s, NextFetch = FetchedAt + %s; want %s", res.Interval, res.NextFetch.Sub(res.FetchedAt), tt.want)
			}
		})
	}
}

func TestFetchErrors(t *testing.T) {
	t.Parallel()
	s := startFeedServer(t, feedserver.Config{SlowDelay: time.Hour})
	big := strings.Repeat("x", 200)
	fixed := startHandler(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big": // with Content-Length
			fmt.Fprint(w, big)
		case "/big-chunked": // without
			w.(http.Flusher).Flush()
			fmt.Fprint(w, big)
		case "/html":
			fmt.Fprint(w, "<!DOCTYPE html><html><body>not a feed</body></html>")
		case "/gone":
			http.Error(w, "gone", http.StatusGone)
		}
	})
	closedURL := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return "http://" + ln.Addr().String() + "/feed"
	}()

	tests := []struct {
		name       string
		cfg        FetcherConfig
		url        string
		wantIs     error // nil: a network error, none of the sentinels
		wantStatus int
		wantText   string
	}{
		{"500", FetcherConfig{}, s.FeedURL(feedserver.SlugFailing), ErrHTTPStatus, 500, "500 Internal Server Error"},
		{"410", FetcherConfig{}, fixed.URL + "/gone", ErrHTTPStatus, 410, "410 Gone"},
		{"malformed", FetcherConfig{}, s.FeedURL(feedserver.SlugMalformed), ErrMalformedFeed, 200, "malformed feed"},
		{"not a feed", FetcherConfig{}, fixed.URL + "/html", ErrMalformedFeed, 200, "malformed feed"},
		{"slow", FetcherConfig{Timeout: 100 * time.Millisecond}, s.FeedURL(feedserver.SlugSlow), ErrTimeout, 0, "no complete response within 100ms (Timeout)"},
		{"too large", FetcherConfig{MaxBodyBytes: 100}, fixed.URL + "/big", ErrResponseTooLarge, 200, "limit of 100 bytes (MaxBodyBytes)"},
		{"too large, chunked", FetcherConfig{MaxBodyBytes: 100}, fixed.URL + "/big-chunked", ErrResponseTooLarge, 200, "limit of 100 bytes (MaxBodyBytes)"},
		{"connection refused", FetcherConfig{}, closedURL, nil, 0, "refused"},
		{"not http", FetcherConfig{}, "ftp://example.org/feed", ErrInvalidURL, 0, "http or https"},
		{"relative", FetcherConfig{}, "/feeds/x", ErrInvalidURL, 0, "http or https"},
		{"unparseable", FetcherConfig{}, "http://[::1", ErrInvalidURL, 0, "invalid URL"},
	}
	sentinels := []error{ErrHTTPStatus, ErrMalformedFeed, ErrTimeout, ErrResponseTooLarge, ErrInvalidURL}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFetcher(t, tt.cfg)
			res, err := f.Fetch(context.Background(), FetchRequest{URL: tt.url})
			if err == nil {
				t.Fatalf("Fetch succeeded with %+v, want an error", res)
			}
			fe, ok := errors.AsType[*FetchError](err)
			if !ok {
				t.Fatalf("error %v (%T) is not a *FetchError", err, err)
			}
			if fe.URL != tt.url || fe.Status != tt.wantStatus {
				t.Errorf("FetchError URL %q status %d, want %q %d", fe.URL, fe.Status, tt.url, tt.wantStatus)
			}
			for _, sentinel := range sentinels {
				if got, want := errors.Is(err, sentinel), sentinel == tt.wantIs; got != want {
					t.Errorf("errors.Is(%v, %v) = %t, want %t", err, sentinel, got, want)
				}
			}
			if msg := err.Error(); !strings.Contains(msg, tt.wantText) || !strings.Contains(msg, tt.url) {
				t.Errorf("error %q does not name the URL and %q", msg, tt.wantText)
			}
		})
	}
}

func TestFetchCallerContextEnds(t *testing.T) {
	t.Parallel()
	s := startFeedServer(t, feedserver.Config{SlowDelay: time.Hour})
	f := newFetcher(t, FetcherConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for s.Requests("/feeds/"+feedserver.SlugSlow) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := f.Fetch(ctx, FetchRequest{URL: s.FeedURL(feedserver.SlugSlow)})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("Fetch = %v, want context.Canceled and not ErrTimeout", err)
	}
	if _, ok := errors.AsType[*FetchError](err); !ok {
		t.Errorf("error %v (%T) is not a *FetchError", err, err)
	}
}

func TestFetchDocumentDetails(t *testing.T) {
	t.Parallel()
	const doc = `<?xml version="1.0"?>
<rss version="2.0"><channel>
  <title>Details &amp; Edge Cases</title>
  <item><title>First</title><link>/posts/1</link><guid>a</guid>
    <description>&lt;p&gt;Hello &lt;b&gt;world&lt;/b&gt; &amp;amp; all.&lt;/p&gt;&lt;script&gt;evil()&lt;/script&gt;</description>
    <pubDate>Fri, 14 Mar 2025 09:00:00 +0100</pubDate></item>
  <item><title>First again</title><link>/posts/1-again</link><guid>a</guid></item>
  <item><title>No GUID</title><link>https://elsewhere.example/x</link></item>
  <item><title>No GUID, same link</title><link>https://elsewhere.example/x</link></item>
  <item><title>Bare</title></item>
</channel></rss>`
	srv := startHandler(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/rss+xml")
		fmt.Fprint(w, doc)
	})
	f := newFetcher(t, FetcherConfig{})
	// The server ignores the validators and answers 200 without new ones:
	// the old ones must not survive.
	req := FetchRequest{URL: srv.URL + "/feed.xml", ETag: `"old"`, LastModified: "Thu, 13 Mar 2025 09:00:00 GMT", TTL: time.Minute}
	res, err := f.Fetch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{GUID: "a", Link: srv.URL + "/posts/1", Title: "First", Summary: "Hello world & all.",
			Published: time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC)},
		{Link: "https://elsewhere.example/x", Title: "No GUID"},
		{Title: "Bare"},
	}
	if diff := cmp.Diff(want, res.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if res.Title != "Details & Edge Cases" {
		t.Errorf("title = %q", res.Title)
	}
	if res.ETag != "" || res.LastModified != "" || res.TTL != 0 || res.Interval != FallbackIntervalDefault {
		t.Errorf("no validators and no hints: got ETag %q, Last-Modified %q, TTL %s, interval %s; want none, none, 0, %s",
			res.ETag, res.LastModified, res.TTL, res.Interval, FallbackIntervalDefault)
	}
}

func TestFetchArticle(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := startFeedServer(t, feedserver.Config{})
	f := newFetcher(t, FetcherConfig{Now: clock.Now})
	es, err := s.Entries("security-advisories")
	if err != nil {
		t.Fatal(err)
	}
	e := es[0]
	a, err := f.FetchArticle(context.Background(), e.Link)
	if err != nil {
		t.Fatal(err)
	}
	want := Article{
		URL:         e.Link,
		Status:      http.StatusOK,
		ContentType: "text/html",
		Title:       e.Title + " – Lighthouse Security Advisories",
		Excerpt:     a.Excerpt,
		Bytes:       a.Bytes,
		FetchedAt:   clock.Now(),
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("article (-want +got):\n%s", diff)
	}
	if a.Bytes < 500 || !strings.HasPrefix(a.Excerpt, "By Lighthouse security team") {
		t.Errorf("Bytes = %d, Excerpt = %q; want a page of some size whose first paragraph is the byline", a.Bytes, a.Excerpt)
	}

	_, err = f.FetchArticle(context.Background(), s.URL()+"/articles/security-advisories/999")
	if fe, ok := errors.AsType[*FetchError](err); !ok || fe.Status != http.StatusNotFound || !errors.Is(err, ErrHTTPStatus) {
		t.Errorf("missing article: %v, want a *FetchError with status 404 and ErrHTTPStatus", err)
	}
}

func TestReadPage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, page         string
		wantTitle, wantExc string
	}{
		{"title and meta description",
			`<html><head><title> A &amp; B </title><meta name="Description" content="About A and B."></head><body><h1>H</h1><p>First.</p></body></html>`,
			"A & B", "About A and B."},
		{"h1 and first paragraph",
			`<html><body><h1>Heading <em>here</em></h1><p>First <b>para</b>.</p><p>Second.</p></body></html>`,
			"Heading here", "First para ."},
		{"nothing", `plain text`, "", ""},
		{"long paragraph", `<p>` + strings.Repeat("word ", 100) + `</p>`, "", strings.TrimSpace(strings.Repeat("word ", 56)) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			title, excerpt := readPage([]byte(tt.page))
			if title != tt.wantTitle || excerpt != tt.wantExc {
				t.Errorf("readPage = %q, %q; want %q, %q", title, excerpt, tt.wantTitle, tt.wantExc)
			}
		})
	}
}

func TestPlainText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"  plain\n\ttext  ", 100, "plain text"},
		{"<p>Hello <b>world</b></p>", 100, "Hello world"},
		{"Fish &amp; chips &lt;3", 100, "Fish & chips <3"},
		{"a<style>p{}</style>b<script>x()</script>c", 100, "a b c"},
		{"abcdef", 4, "abc…"},
		{"ünïcödé", 4, "ünï…"},
		{"ab cdef", 4, "ab…"},
	}
	for _, tt := range tests {
		if got := plainText(tt.in, tt.limit); got != tt.want {
			t.Errorf("plainText(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}

func TestNewFetcherErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  FetcherConfig
		want string
	}{
		{FetcherConfig{Timeout: -1}, "Timeout must not be negative"},
		{FetcherConfig{MinInterval: -1}, "MinInterval must not be negative"},
		{FetcherConfig{MaxInterval: -1}, "MaxInterval must not be negative"},
		{FetcherConfig{FallbackInterval: -1}, "FallbackInterval must not be negative"},
		{FetcherConfig{MaxBodyBytes: -1}, "MaxBodyBytes must not be negative"},
		{FetcherConfig{MinInterval: time.Hour, MaxInterval: time.Minute}, "MinInterval (1h0m0s) must not exceed MaxInterval (1m0s)"},
		{FetcherConfig{MinInterval: 48 * time.Hour}, "MinInterval (48h0m0s) must not exceed MaxInterval (24h0m0s)"},
	}
	for _, tt := range tests {
		_, err := NewFetcher(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewFetcher(%+v) = %v, want an error saying %q", tt.cfg, err, tt.want)
		}
	}

	f, err := NewFetcher(FetcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := Bounds{Min: MinIntervalDefault, Max: MaxIntervalDefault, Fallback: FallbackIntervalDefault}
	if diff := cmp.Diff(want, f.Bounds()); diff != "" {
		t.Errorf("default bounds (-want +got):\n%s", diff)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	f := newFetcher(t, demoBounds)
	for n, want := range map[int]time.Duration{
		-1: 2 * time.Second, 0: 2 * time.Second, 1: 2 * time.Second, 2: 4 * time.Second,
		3: 8 * time.Second, 4: 10 * time.Second, 100: 10 * time.Second,
	} {
		if got := f.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}
