package feedfetcher

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mmcdole/gofeed"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Defaults for [FetcherConfig] fields left at their zero value.
const (
	// MinIntervalDefault is the shortest interval between two fetches of a
	// feed.
	MinIntervalDefault = 15 * time.Minute
	// MaxIntervalDefault is the longest interval between two fetches of a
	// feed.
	MaxIntervalDefault = 24 * time.Hour
	// FallbackIntervalDefault is the interval used when a feed gives no hint.
	FallbackIntervalDefault = time.Hour
	// TimeoutDefault bounds one request, from sending it to reading the
	// whole body.
	TimeoutDefault = 30 * time.Second
	// MaxBodyBytesDefault caps the size of a response body: 10 MiB.
	MaxBodyBytesDefault = 10 << 20
	// UserAgentDefault is the User-Agent header sent with every request.
	UserAgentDefault = "braid-feedfetcher/1.0"
)

// Plain-text limits of what a fetch returns.
const (
	summaryLimit = 500 // characters of Entry.Summary
	excerptLimit = 280 // characters of Article.Excerpt
	titleLimit   = 300 // characters of a title
)

// FetcherConfig configures a [Fetcher]. The zero value is usable: every field
// documents its default.
type FetcherConfig struct {
	// Client sends the requests. It defaults to a client of the fetcher's
	// own, with a copy of http.DefaultTransport. Its Timeout, if any, applies
	// on top of Timeout below.
	Client *http.Client

	// Timeout bounds one request, from sending it to reading the whole body.
	// It defaults to TimeoutDefault and must not be negative.
	Timeout time.Duration

	// MaxBodyBytes caps the size of a response body; a larger body fails the
	// fetch with ErrResponseTooLarge. It defaults to MaxBodyBytesDefault and
	// must not be negative.
	MaxBodyBytes int64

	// MinInterval is the shortest interval between two fetches of a feed,
	// and the first step of the backoff after a failure. It defaults to
	// MinIntervalDefault and must not be negative.
	MinInterval time.Duration

	// MaxInterval is the longest interval between two fetches of a feed, and
	// the cap of the backoff after failures. It defaults to
	// MaxIntervalDefault and must not be less than MinInterval.
	MaxInterval time.Duration

	// FallbackInterval is the interval used when neither the cache headers
	// nor the feed give a hint. It defaults to FallbackIntervalDefault, and
	// is clamped to [MinInterval, MaxInterval] when used.
	FallbackInterval time.Duration

	// UserAgent is the User-Agent header sent. It defaults to
	// UserAgentDefault.
	UserAgent string

	// Now is the clock used for fetch times. It defaults to time.Now.
	Now func() time.Time
}

// Fetcher fetches feeds over HTTP and parses them. It knows nothing of
// storage: the caller keeps each feed's validators (ETag, Last-Modified) and
// passes them back on the next fetch. A Fetcher is safe for concurrent use.
type Fetcher struct {
	client   *http.Client
	ownsConn bool
	timeout  time.Duration
	maxBody  int64
	bounds   Bounds
	agent    string
	now      func() time.Time
}

// NewFetcher returns a Fetcher configured by cfg, or an error naming the
// first invalid field.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	for _, c := range []struct {
		name string
		v    time.Duration
	}{
		{"Timeout", cfg.Timeout},
		{"MinInterval", cfg.MinInterval},
		{"MaxInterval", cfg.MaxInterval},
		{"FallbackInterval", cfg.FallbackInterval},
	} {
		if c.v < 0 {
			return nil, fmt.Errorf("feedfetcher: %s must not be negative, got %s", c.name, c.v)
		}
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("feedfetcher: MaxBodyBytes must not be negative, got %d", cfg.MaxBodyBytes)
	}
	f := &Fetcher{
		client:  cfg.Client,
		timeout: cmp.Or(cfg.Timeout, TimeoutDefault),
		maxBody: cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault),
		bounds: Bounds{
			Min:      cmp.Or(cfg.MinInterval, MinIntervalDefault),
			Max:      cmp.Or(cfg.MaxInterval, MaxIntervalDefault),
			Fallback: cmp.Or(cfg.FallbackInterval, FallbackIntervalDefault),
		},
		agent: cmp.Or(cfg.UserAgent, UserAgentDefault),
		now:   cfg.Now,
	}
	if f.bounds.Min > f.bounds.Max {
		return nil, fmt.Errorf("feedfetcher: MinInterval (%s) must not exceed MaxInterval (%s)", f.bounds.Min, f.bounds.Max)
	}
	if f.client == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		f.client = &http.Client{Transport: transport}
		f.ownsConn = true
	}
	if f.now == nil {
		f.now = time.Now
	}
	return f, nil
}

// Bounds returns the interval bounds the fetcher schedules within.
func (f *Fetcher) Bounds() Bounds { return f.bounds }

// Backoff returns how long to wait before fetching a feed again after its
// consecutiveFailures-th failure in a row: MinInterval doubled for each
// failure after the first, capped at MaxInterval. Zero or fewer failures give
// MinInterval.
func (f *Fetcher) Backoff(consecutiveFailures int) time.Duration {
	d := f.bounds.Min
	for i := 1; i < consecutiveFailures && d < f.bounds.Max; i++ {
		d *= 2
	}
	return f.bounds.Clamp(d)
}

// CloseIdleConnections closes the fetcher's idle keep-alive connections.
// Call it when the fetcher is no longer needed.
func (f *Fetcher) CloseIdleConnections() { f.client.CloseIdleConnections() }

// FetchRequest is what the caller knows of a feed before fetching it.
type FetchRequest struct {
	// URL is the feed's URL, http or https.
	URL string
	// ETag is the ETag header of the last successful fetch, sent back as
	// If-None-Match. Empty when unknown.
	ETag string
	// LastModified is the Last-Modified header of the last successful fetch,
	// sent back verbatim as If-Modified-Since. Empty when unknown.
	LastModified string
	// TTL is the feed's declared time to live from its last full fetch
	// (FetchResult.TTL). A 304 answer carries no feed, so it is needed to
	// schedule the next fetch after one. Zero when unknown.
	TTL time.Duration
}

// FetchResult is the outcome of a successful fetch: a new document, or
// confirmation that the stored one is current.
type FetchResult struct {
	// URL is the URL fetched, after redirects.
	URL string `json:"url"`
	// Status is the HTTP status: 200 (or another 2xx) with a document, or
	// 304 Not Modified.
	Status int `json:"status"`
	// NotModified is true for a 304 answer: Entries and Title are empty and
	// the stored entries are current.
	NotModified bool `json:"not_modified,omitempty"`
	// ETag and LastModified are the validators to store and send on the next
	// fetch; empty when the server sent none. After a 304 they are the
	// request's, unless the server sent new ones.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// Title is the feed's title.
	Title string `json:"title,omitempty"`
	// Entries are the feed's entries in document order, without duplicates
	// (by [Entry.Key]).
	Entries []Entry `json:"entries,omitempty"`
	// TTL is the feed's declared time to live (see [FeedTTL]), zero when it
	// declares none. After a 304 it is the request's TTL.
	TTL time.Duration `json:"ttl,omitempty"`
	// FetchedAt is when the response arrived.
	FetchedAt time.Time `json:"fetched_at"`
	// Interval is how long to wait before the next fetch ([NextInterval]
	// within the fetcher's bounds), and NextFetch is FetchedAt + Interval.
	Interval  time.Duration `json:"interval"`
	NextFetch time.Time     `json:"next_fetch"`
}

// Fetch fetches a feed with a conditional GET and parses it. A 304 answer is
// a success with NotModified set. Every failure is a *FetchError: an HTTP
// status other than 2xx or 304 (ErrHTTPStatus), a network error, a timeout
// (ErrTimeout), a body over the size cap (ErrResponseTooLarge), a body that
// is not a feed (ErrMalformedFeed), a bad URL (ErrInvalidURL), or the end of
// ctx (its error).
func (f *Fetcher) Fetch(ctx context.Context, req FetchRequest) (*FetchResult, error) {
	header := http.Header{
		"Accept": {"application/rss+xml, application/atom+xml, application/feed+json, application/xml;q=0.9, text/xml;q=0.8, */*;q=0.5"},
	}
	if req.ETag != "" {
		header.Set("If-None-Match", req.ETag)
	}
	if req.LastModified != "" {
		header.Set("If-Modified-Since", req.LastModified)
	}
	resp, body, err := f.get(ctx, req.URL, header, true)
	if err != nil {
		return nil, err
	}
	now := f.now()
	res := &FetchResult{
		URL:          resp.Request.URL.String(),
		Status:       resp.StatusCode,
		ETag:         pgText(resp.Header.Get("ETag")),
		LastModified: pgText(resp.Header.Get("Last-Modified")),
		TTL:          req.TTL,
		FetchedAt:    now,
	}
	if resp.StatusCode == http.StatusNotModified {
		// The stored document is current, and so are its validators unless
		// the server sent new ones.
		res.NotModified = true
		res.ETag = cmp.Or(res.ETag, req.ETag)
		res.LastModified = cmp.Or(res.LastModified, req.LastModified)
	} else {
		parser := gofeed.NewParser()
		parser.KeepOriginalFeed = true
		feed, err := parser.Parse(bytes.NewReader(body))
		if err != nil {
			return nil, &FetchError{URL: req.URL, Status: resp.StatusCode, Err: fmt.Errorf("%w: %w", ErrMalformedFeed, err)}
		}
		res.Title = plainText(feed.Title, titleLimit)
		res.TTL = FeedTTL(feed)
		res.Entries = entries(feed, resp.Request.URL)
	}
	res.Interval = NextInterval(resp.Header, now, res.TTL, f.bounds)
	res.NextFetch = now.Add(res.Interval)
	return res, nil
}

// entries converts a parsed feed's items, resolving relative links against
// base and dropping repeated keys.
func entries(feed *gofeed.Feed, base *url.URL) []Entry {
	out := make([]Entry, 0, len(feed.Items))
	seen := make(map[string]bool, len(feed.Items))
	for _, it := range feed.Items {
		if it == nil {
			continue
		}
		e := Entry{
			GUID:  pgText(strings.TrimSpace(it.GUID)),
			Link:  pgText(resolve(base, strings.TrimSpace(it.Link))),
			Title: plainText(it.Title, titleLimit),
		}
		summary := it.Description
		if strings.TrimSpace(summary) == "" {
			summary = it.Content
		}
		e.Summary = plainText(summary, summaryLimit)
		switch {
		case it.PublishedParsed != nil:
			e.Published = it.PublishedParsed.UTC()
		case it.UpdatedParsed != nil:
			e.Published = it.UpdatedParsed.UTC()
		}
		if key := e.Key(); !seen[key] {
			seen[key] = true
			out = append(out, e)
		}
	}
	return out
}

// resolve makes a link absolute against the document's URL; a link that
// does not parse is kept as it is.
func resolve(base *url.URL, link string) string {
	if link == "" {
		return ""
	}
	u, err := url.Parse(link)
	if err != nil {
		return link
	}
	return base.ResolveReference(u).String()
}

// Article is what the fan-out of a digest learns from an entry's page.
type Article struct {
	// URL is the page's URL, after redirects.
	URL string `json:"url"`
	// Status is the HTTP status of the page.
	Status int `json:"status"`
	// ContentType is the page's media type, such as "text/html".
	ContentType string `json:"content_type,omitempty"`
	// Title is the page's <title> (or first <h1>) as plain text; empty for a
	// page that is not HTML or has neither.
	Title string `json:"title,omitempty"`
	// Excerpt is the page's meta description, or else its first paragraph,
	// as plain text of at most 280 characters.
	Excerpt string `json:"excerpt,omitempty"`
	// Bytes is the size of the body.
	Bytes int `json:"bytes"`
	// FetchedAt is when the page arrived.
	FetchedAt time.Time `json:"fetched_at"`
}

// FetchArticle fetches an entry's page and reads its title and an excerpt.
// It fails like [Fetcher.Fetch]: every error is a *FetchError, and any status
// other than 2xx is ErrHTTPStatus.
func (f *Fetcher) FetchArticle(ctx context.Context, pageURL string) (Article, error) {
	header := http.Header{"Accept": {"text/html, application/xhtml+xml;q=0.9, */*;q=0.5"}}
	resp, body, err := f.get(ctx, pageURL, header, false)
	if err != nil {
		return Article{}, err
	}
	a := Article{
		URL:       resp.Request.URL.String(),
		Status:    resp.StatusCode,
		Bytes:     len(body),
		FetchedAt: f.now(),
	}
	a.ContentType, _, _ = strings.Cut(resp.Header.Get("Content-Type"), ";")
	a.ContentType = strings.TrimSpace(strings.ToLower(a.ContentType))
	if a.ContentType == "" || strings.Contains(a.ContentType, "html") {
		a.Title, a.Excerpt = readPage(body)
	}
	return a, nil
}

// Page is an entry's page as fetched for the article pipeline: the body
// itself, for the pipeline to extract the text from.
type Page struct {
	// URL is the page's URL, after redirects.
	URL string `json:"url"`
	// Status is the HTTP status of the page.
	Status int `json:"status"`
	// ContentType is the page's media type, such as "text/html".
	ContentType string `json:"content_type,omitempty"`
	// Body is the page's body as text, cut to the limit passed to
	// FetchPage; Truncated says whether it was cut.
	Body      string `json:"body"`
	Truncated bool   `json:"truncated,omitempty"`
	// Bytes is the size of the whole body.
	Bytes int `json:"bytes"`
	// FetchedAt is when the page arrived.
	FetchedAt time.Time `json:"fetched_at,omitzero"`
}

// FetchPage fetches an entry's page and returns its body, cut to at most
// limit bytes (at a character boundary) so that it can travel as a
// workflow's output. Invalid UTF-8 and NUL bytes are dropped. It fails like
// [Fetcher.Fetch]: every error is a *FetchError, and any status other than
// 2xx is ErrHTTPStatus.
func (f *Fetcher) FetchPage(ctx context.Context, pageURL string, limit int) (Page, error) {
	header := http.Header{"Accept": {"text/html, application/xhtml+xml;q=0.9, text/plain;q=0.8, */*;q=0.5"}}
	resp, body, err := f.get(ctx, pageURL, header, false)
	if err != nil {
		return Page{}, err
	}
	p := Page{URL: resp.Request.URL.String(), Status: resp.StatusCode, Bytes: len(body), FetchedAt: f.now()}
	p.ContentType, _, _ = strings.Cut(resp.Header.Get("Content-Type"), ";")
	p.ContentType = strings.TrimSpace(strings.ToLower(p.ContentType))
	if limit >= 0 && len(body) > limit {
		body, p.Truncated = body[:limit], true
	}
	p.Body = strings.ReplaceAll(strings.ToValidUTF8(string(body), ""), "\x00", "")
	return p, nil
}

// get sends a GET and reads the whole body within the fetcher's timeout and
// size cap. It accepts 2xx answers, and 304 when notModifiedOK.
func (f *Fetcher) get(ctx context.Context, rawURL string, header http.Header, notModifiedOK bool) (*http.Response, []byte, error) {
	fail := func(status int, err error) (*http.Response, []byte, error) {
		return nil, nil, &FetchError{URL: rawURL, Status: status, Err: err}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fail(0, fmt.Errorf("%w: %w", ErrInvalidURL, err))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fail(0, fmt.Errorf("%w: want an absolute http or https URL", ErrInvalidURL))
	}

	timeoutCause := fmt.Errorf("%w: no complete response within %s (Timeout)", ErrTimeout, f.timeout)
	reqCtx, cancel := context.WithTimeoutCause(ctx, f.timeout, timeoutCause)
	defer cancel()
	// cause tells a timeout of ours, or the caller's context ending, from a
	// plain network error.
	cause := func(err error) error {
		if c := context.Cause(reqCtx); c != nil {
			return c
		}
		return err
	}

	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fail(0, fmt.Errorf("%w: %w", ErrInvalidURL, err))
	}
	req.Header = header
	req.Header.Set("User-Agent", f.agent)
	resp, err := f.client.Do(req)
	if err != nil {
		return fail(0, cause(unwrapURLError(err)))
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusNotModified && notModifiedOK:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, f.maxBody))
		return resp, nil, nil
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fail(resp.StatusCode, fmt.Errorf("%w: %s", ErrHTTPStatus, resp.Status))
	}
	tooLarge := fmt.Errorf("%w: body exceeds the limit of %d bytes (MaxBodyBytes)", ErrResponseTooLarge, f.maxBody)
	if resp.ContentLength > f.maxBody {
		return fail(resp.StatusCode, tooLarge)
	}
	// Read one byte past the cap, to tell a body at the cap from a larger one.
	body, err := io.ReadAll(io.LimitReader(resp.Body, min(f.maxBody, math.MaxInt64-1)+1))
	if err != nil {
		return fail(resp.StatusCode, cause(err))
	}
	if int64(len(body)) > f.maxBody {
		return fail(resp.StatusCode, tooLarge)
	}
	return resp, body, nil
}

// unwrapURLError drops the *url.Error layer, whose message repeats the
// method and URL that FetchError already names.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// plainText turns a fragment that may hold HTML into plain text: tags are
// dropped, entities decoded, and the result is clipped to limit characters.
func plainText(s string, limit int) string {
	if !strings.ContainsAny(s, "<&") {
		return clip(s, limit)
	}
	var b strings.Builder
	z := html.NewTokenizer(strings.NewReader(s))
	skip := 0 // depth inside <script> or <style>
	for {
		switch z.Next() {
		case html.ErrorToken:
			return clip(b.String(), limit)
		case html.TextToken:
			if skip == 0 {
				b.Write(z.Text())
			}
		case html.StartTagToken:
			name, _ := z.TagName()
			if a := atom.Lookup(name); a == atom.Script || a == atom.Style {
				skip++
			}
			b.WriteByte(' ')
		case html.EndTagToken:
			name, _ := z.TagName()
			if a := atom.Lookup(name); (a == atom.Script || a == atom.Style) && skip > 0 {
				skip--
			}
			b.WriteByte(' ')
		case html.SelfClosingTagToken:
			b.WriteByte(' ')
		}
	}
}

// clip collapses runs of white space and cuts s to at most limit characters,
// ending in "…" when cut.
// pgText returns s as PostgreSQL's text stores it: invalid UTF-8 as
// U+FFFD, and without NUL characters, which a feed (a JSON Feed's
// "\u0000"), a header or a status line may carry, and which would fail the
// transaction that records the fetch.
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

func clip(s string, limit int) string {
	s = strings.Join(strings.Fields(pgText(s)), " ")
	if r := []rune(s); len(r) > limit {
		s = strings.TrimRight(string(r[:limit-1]), " ") + "…"
	}
	return s
}

// readPage returns an HTML page's title (its <title>, else its first <h1>)
// and an excerpt (its meta description, else its first <p>), as plain text.
func readPage(body []byte) (title, excerpt string) {
	var h1, para, metaDesc string
	z := html.NewTokenizer(bytes.NewReader(body))
	// capture collects the text of the element being read, up to its end.
	capture := func(end atom.Atom) string {
		var b strings.Builder
		for depth := 1; depth > 0; {
			switch z.Next() {
			case html.ErrorToken:
				return b.String()
			case html.TextToken:
				b.Write(z.Text())
			case html.StartTagToken:
				if name, _ := z.TagName(); atom.Lookup(name) == end {
					depth++
				}
				b.WriteByte(' ')
			case html.EndTagToken:
				if name, _ := z.TagName(); atom.Lookup(name) == end {
					depth--
				}
				b.WriteByte(' ')
			}
		}
		return b.String()
	}
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		name, hasAttr := z.TagName()
		switch atom.Lookup(name) {
		case atom.Title:
			if title == "" && tt == html.StartTagToken {
				title = capture(atom.Title)
			}
		case atom.H1:
			if h1 == "" && tt == html.StartTagToken {
				h1 = capture(atom.H1)
			}
		case atom.P:
			if para == "" && tt == html.StartTagToken {
				para = capture(atom.P)
			}
		case atom.Meta:
			var isDesc bool
			var content string
			for hasAttr {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				switch string(k) {
				case "name":
					isDesc = strings.EqualFold(string(v), "description")
				case "content":
					content = string(v)
				}
			}
			if isDesc && metaDesc == "" {
				metaDesc = content
			}
		}
	}
	title = clip(cmp.Or(strings.TrimSpace(title), h1), titleLimit)
	excerpt = clip(cmp.Or(strings.TrimSpace(metaDesc), para), excerptLimit)
	return title, excerpt
}
