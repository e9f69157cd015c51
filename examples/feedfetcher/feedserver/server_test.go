package feedserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mmcdole/gofeed"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// startServer starts a server that is closed when the test ends. Unless the
// config sets a clock, it gets a fake one, so that no entry appears on its
// own.
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = newFakeClock().Now
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// newClient returns an HTTP client whose connections are closed when the
// test ends.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	c := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

type response struct {
	status int
	header http.Header
	body   string
}

// get sends a GET with the given extra headers and reads the answer.
func get(t *testing.T, c *http.Client, url string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("NewRequest(%s): %v", url, err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func feedInfo(t *testing.T, s *Server, slug string) FeedInfo {
	t.Helper()
	for _, fi := range s.Feeds() {
		if fi.Slug == slug {
			return fi
		}
	}
	t.Fatalf("no feed %q", slug)
	return FeedInfo{}
}

func TestFeedsServeValidDocuments(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{InitialEntries: 4})
	c := newClient(t)

	var rss, atom, normal int
	for _, fi := range s.Feeds() {
		if fi.Behavior != BehaviorNormal {
			continue
		}
		normal++
		t.Run(fi.Slug, func(t *testing.T) {
			r := get(t, c, fi.URL)
			if r.status != http.StatusOK {
				t.Fatalf("status = %d, want 200", r.status)
			}
			wantType := map[Format]string{FormatRSS: "application/rss+xml", FormatAtom: "application/atom+xml"}[fi.Format]
			if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, wantType) {
				t.Errorf("Content-Type = %q, want %s", ct, wantType)
			}
			if r.header.Get("ETag") == "" || r.header.Get("Last-Modified") == "" {
				t.Errorf("ETag = %q, Last-Modified = %q; want both set", r.header.Get("ETag"), r.header.Get("Last-Modified"))
			}
			if fi.MaxAge > 0 && !strings.Contains(r.header.Get("Cache-Control"), "max-age=") {
				t.Errorf("Cache-Control = %q, want a max-age", r.header.Get("Cache-Control"))
			}
			if fi.Expires > 0 && r.header.Get("Expires") == "" {
				t.Error("Expires missing")
			}
			if fi.TTL > 0 && !strings.Contains(r.body, "<ttl>") {
				t.Error("document has no <ttl>")
			}

			feed, err := gofeed.NewParser().ParseString(r.body)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if feed.FeedType != string(fi.Format) || feed.Title != fi.Title {
				t.Errorf("feed type %q title %q, want %q %q", feed.FeedType, feed.Title, fi.Format, fi.Title)
			}
			want, err := s.Entries(fi.Slug)
			if err != nil {
				t.Fatal(err)
			}
			if len(feed.Items) != len(want) || len(want) != 4 {
				t.Fatalf("document lists %d entries, server has %d, want 4", len(feed.Items), len(want))
			}
			for i, it := range feed.Items { // newest first
				e := want[len(want)-1-i]
				if it.Title != e.Title || it.Link != e.Link || it.GUID != e.ID || !it.PublishedParsed.Equal(e.Published) {
					t.Errorf("item %d = {%q %q %q %v}, want {%q %q %q %v}", i,
						it.Title, it.Link, it.GUID, it.PublishedParsed, e.Title, e.Link, e.ID, e.Published)
				}
			}
		})
		if fi.Format == FormatRSS {
			rss++
		} else {
			atom++
		}
	}
	if normal < 8 || rss == 0 || atom == 0 {
		t.Errorf("%d well-behaved feeds (%d RSS, %d Atom), want about ten of both formats", normal, rss, atom)
	}
}

func TestConditionalGet(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	c := newClient(t)
	url := s.FeedURL("harbor-engineering")

	first := get(t, c, url)
	tag, modified := first.header.Get("ETag"), first.header.Get("Last-Modified")

	tests := []struct {
		name   string
		header []string
		want   int
	}{
		{"matching If-None-Match", []string{"If-None-Match", tag}, http.StatusNotModified},
		{"weak If-None-Match in a list", []string{"If-None-Match", `"nope", W/` + tag}, http.StatusNotModified},
		{"star", []string{"If-None-Match", "*"}, http.StatusNotModified},
		{"other ETag", []string{"If-None-Match", `"0000"`}, http.StatusOK},
		{"If-Modified-Since at Last-Modified", []string{"If-Modified-Since", modified}, http.StatusNotModified},
		{"If-Modified-Since before", []string{"If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT"}, http.StatusOK},
		{"If-None-Match decides over If-Modified-Since", []string{"If-None-Match", `"0000"`, "If-Modified-Since", modified}, http.StatusOK},
		{"unparseable If-Modified-Since", []string{"If-Modified-Since", "yesterday"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get(t, c, url, tt.header...)
			if r.status != tt.want {
				t.Fatalf("status = %d, want %d", r.status, tt.want)
			}
			if r.status == http.StatusNotModified && (r.body != "" || r.header.Get("ETag") != tag) {
				t.Errorf("304 with body %q and ETag %q, want no body and ETag %s", r.body, r.header.Get("ETag"), tag)
			}
		})
	}

	// A new entry changes both validators, so the old ones no longer match.
	if _, err := s.Publish("harbor-engineering"); err != nil {
		t.Fatal(err)
	}
	for _, h := range [][]string{{"If-None-Match", tag}, {"If-Modified-Since", modified}} {
		r := get(t, c, url, h...)
		if r.status != http.StatusOK {
			t.Errorf("after Publish, %s: status = %d, want 200", h[0], r.status)
		}
		if r.header.Get("ETag") == tag || r.header.Get("Last-Modified") == modified {
			t.Errorf("after Publish, validators unchanged: ETag %s, Last-Modified %s", tag, modified)
		}
	}
}

func TestPublishOnCadence(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	const interval = 10 * time.Second
	s := startServer(t, Config{Now: clock.Now, PublishInterval: interval, InitialEntries: 2})

	// Each feed publishes every k×interval (k = 1..3), first within its
	// first cadence: after 6 intervals a feed has 6/k new entries.
	clock.Advance(6 * interval)
	var publishing int
	for _, fi := range s.Feeds() {
		es, err := s.Entries(fi.Slug)
		if err != nil {
			t.Fatal(err)
		}
		if fi.PublishEvery == 0 {
			if len(es) != 0 {
				t.Errorf("%s: %d entries, want none", fi.Slug, len(es))
			}
			continue
		}
		publishing++
		want := 2 + int(6*interval/fi.PublishEvery)
		if len(es) != want {
			t.Errorf("%s (every %s): %d entries, want %d", fi.Slug, fi.PublishEvery, len(es), want)
		}
		for i := 1; i < len(es); i++ {
			if es[i].Seq != i+1 || !es[i].Published.After(es[i-1].Published) {
				t.Errorf("%s: entry %d (seq %d, %v) does not follow entry %d (%v)", fi.Slug, i, es[i].Seq, es[i].Published, i-1, es[i-1].Published)
			}
		}
	}
	if publishing < 9 {
		t.Errorf("%d feeds publish on their own, want at least 9", publishing)
	}
}

func TestPublishingOff(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := startServer(t, Config{Now: clock.Now, PublishInterval: -1})
	clock.Advance(24 * time.Hour)
	es, err := s.Entries("night-sky")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != InitialEntriesDefault {
		t.Fatalf("%d entries a day later with publishing off, want %d", len(es), InitialEntriesDefault)
	}
	e, err := s.Publish("night-sky")
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != InitialEntriesDefault+1 || !e.Published.Equal(clock.Now()) {
		t.Errorf("published seq %d at %v, want seq %d at %v", e.Seq, e.Published, InitialEntriesDefault+1, clock.Now())
	}
}

func TestPublish(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	before, err := s.Entries("kitchen-chemistry")
	if err != nil {
		t.Fatal(err)
	}
	e1, err := s.Publish("kitchen-chemistry")
	if err != nil {
		t.Fatal(err)
	}
	e2, err := s.Publish("kitchen-chemistry")
	if err != nil {
		t.Fatal(err)
	}
	if e1.ID != "" {
		t.Errorf("kitchen-chemistry entry has ID %q, want none (its RSS items carry no <guid>)", e1.ID)
	}
	if e1.Link == e2.Link || e1.Seq+1 != e2.Seq || !e2.Published.After(e1.Published) {
		t.Errorf("entries not distinct and ordered: %+v then %+v", e1, e2)
	}
	after, err := s.Entries("kitchen-chemistry")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(before, e1, e2), after); diff != "" {
		t.Errorf("Entries after Publish (-want +got):\n%s", diff)
	}

	if _, err := s.Publish("no-such-feed"); !errors.Is(err, ErrUnknownFeed) {
		t.Errorf("Publish(no-such-feed) = %v, want ErrUnknownFeed", err)
	}
	if _, err := s.Entries("no-such-feed"); !errors.Is(err, ErrUnknownFeed) {
		t.Errorf("Entries(no-such-feed) = %v, want ErrUnknownFeed", err)
	}
	for _, slug := range []string{SlugFailing, SlugMalformed} {
		if _, err := s.Publish(slug); err == nil || !strings.Contains(err.Error(), slug) {
			t.Errorf("Publish(%s) = %v, want an error naming the feed", slug, err)
		}
	}
}

func TestDeterministicContent(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	content := func(seed uint64) []Entry {
		s := startServer(t, Config{Now: clock.Now, Seed: seed})
		es, err := s.Entries("birdwatch")
		if err != nil {
			t.Fatal(err)
		}
		for i := range es {
			es[i].Link = "" // holds the port
		}
		return es
	}
	a, b := content(7), content(7)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same seed, different entries (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(a, content(8)); diff == "" {
		t.Error("seeds 7 and 8 give the same entries")
	}
}

func TestProblemFeeds(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{SlowDelay: time.Millisecond})
	c := newClient(t)

	t.Run("failing", func(t *testing.T) {
		r := get(t, c, s.FeedURL(SlugFailing))
		if r.status != http.StatusInternalServerError {
			t.Errorf("status = %d, want 500", r.status)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		r := get(t, c, s.FeedURL(SlugMalformed))
		if r.status != http.StatusOK {
			t.Fatalf("status = %d, want 200", r.status)
		}
		if _, err := gofeed.NewParser().ParseString(r.body); err == nil {
			t.Errorf("the malformed feed parsed:\n%s", r.body)
		}
	})
	t.Run("slow", func(t *testing.T) {
		r := get(t, c, s.FeedURL(SlugSlow))
		if r.status != http.StatusOK {
			t.Fatalf("status = %d, want 200", r.status)
		}
		if _, err := gofeed.NewParser().ParseString(r.body); err != nil {
			t.Errorf("the slow feed does not parse: %v", err)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		if r := get(t, c, s.FeedURL("no-such-feed")); r.status != http.StatusNotFound {
			t.Errorf("status = %d, want 404", r.status)
		}
	})
}

func TestArticlePages(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	c := newClient(t)
	for _, slug := range []string{"night-sky", "security-advisories"} {
		es, err := s.Entries(slug)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			r := get(t, c, e.Link)
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
				t.Fatalf("GET %s: %d %s, want 200 text/html", e.Link, r.status, r.header.Get("Content-Type"))
			}
			wantTitle := "<title>" + strings.ReplaceAll(e.Title, "'", "&#39;")
			if !strings.Contains(r.body, wantTitle) || strings.Count(r.body, "<p>") < 3 {
				t.Errorf("GET %s: page lacks %q or three paragraphs:\n%s", e.Link, wantTitle, r.body)
			}
		}
	}
	for _, path := range []string{"/articles/night-sky/0", "/articles/night-sky/99", "/articles/night-sky/x", "/articles/no-such-feed/1"} {
		if r := get(t, c, s.URL()+path); r.status != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, r.status)
		}
	}
}

func TestRequestCounts(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	c := newClient(t)
	night := feedInfo(t, s, "night-sky")
	for range 3 {
		get(t, c, night.URL)
	}
	get(t, c, s.FeedURL(SlugFailing))
	get(t, c, s.URL()+"/")

	if n := s.Requests(night.Path); n != 3 {
		t.Errorf("Requests(%s) = %d, want 3", night.Path, n)
	}
	want := map[string]int{night.Path: 3, "/feeds/" + SlugFailing: 1, "/": 1}
	if diff := cmp.Diff(want, s.RequestCounts()); diff != "" {
		t.Errorf("RequestCounts (-want +got):\n%s", diff)
	}
}

func TestCloseEndsSlowRequests(t *testing.T) {
	t.Parallel()
	s, err := Start(context.Background(), Config{SlowDelay: time.Hour, Now: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	done := make(chan error, 1)
	go func() {
		resp, err := c.Get(s.FeedURL(SlugSlow))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				err = errors.New(resp.Status)
			}
		}
		done <- err
	}()
	for s.Requests("/feeds/"+SlugSlow) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("slow request ended with %v, want 503", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestStartContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, Config{Now: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-s.served // Close ran and Serve returned
	c := newClient(t)
	if resp, err := c.Get(s.URL()); err == nil {
		resp.Body.Close()
		t.Errorf("server still answers after its context ended: %s", resp.Status)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after the context ended: %v", err)
	}
}

func TestStartInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{InitialEntries: -1}, "InitialEntries must not be negative"},
		{Config{FeedWindow: -1}, "FeedWindow must not be negative"},
		{Config{SlowDelay: -time.Second}, "SlowDelay must not be negative"},
		{Config{Addr: "256.0.0.1:0"}, "listen on 256.0.0.1:0"},
	}
	for _, tt := range tests {
		s, err := Start(context.Background(), tt.cfg)
		if err == nil {
			s.Close()
			t.Errorf("Start(%+v) succeeded, want an error", tt.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Start(%+v) = %v, want it to say %q", tt.cfg, err, tt.want)
		}
	}
}

func TestFeedWindow(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{FeedWindow: 2, InitialEntries: 5})
	feed, err := gofeed.NewParser().ParseString(get(t, newClient(t), s.FeedURL("cycling-dispatch")).body)
	if err != nil {
		t.Fatal(err)
	}
	es, _ := s.Entries("cycling-dispatch")
	var got []string
	for _, it := range feed.Items {
		got = append(got, it.Link)
	}
	want := []string{es[4].Link, es[3].Link}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("document lists (-want +got):\n%s", diff)
	}
}

func TestLanguages(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	c := newClient(t)
	langs := map[string]string{}
	for _, fi := range s.Feeds() {
		langs[fi.Slug] = fi.Language
	}
	if langs["night-sky"] != "en" || langs["marche-du-quartier"] != "fr" || langs["bergwetter"] != "de" || langs[SlugFailing] != "en" {
		t.Fatalf("languages of the feeds: %v", langs)
	}
	if r := get(t, c, s.FeedURL("marche-du-quartier")); !strings.Contains(r.body, "<language>fr</language>") {
		t.Errorf("the French RSS feed does not declare its language:\n%s", r.body)
	}
	for slug, want := range map[string]string{"marche-du-quartier": `<html lang="fr">`, "bergwetter": `<html lang="de">`, "night-sky": `<html lang="en">`} {
		es, err := s.Entries(slug)
		if err != nil {
			t.Fatal(err)
		}
		if r := get(t, c, es[0].Link); r.status != http.StatusOK || !strings.Contains(r.body, want) {
			t.Errorf("GET %s: %d, want a page with %s:\n%s", es[0].Link, r.status, want, r.body)
		}
	}
}
