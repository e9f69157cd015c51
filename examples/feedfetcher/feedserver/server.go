package feedserver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults for [Config] fields left at their zero value.
const (
	// AddrDefault listens on a free port of the IPv4 loopback interface.
	AddrDefault = "127.0.0.1:0"
	// PublishIntervalDefault is the base cadence at which feeds gain entries.
	PublishIntervalDefault = 10 * time.Second
	// InitialEntriesDefault is how many entries each feed holds at start.
	InitialEntriesDefault = 3
	// FeedWindowDefault is how many of the newest entries a feed document
	// lists.
	FeedWindowDefault = 20
	// SlowDelayDefault is how long the slow feed waits before it answers.
	SlowDelayDefault = 5 * time.Second
)

// shutdownTimeout bounds how long Close waits for requests in flight.
const shutdownTimeout = 5 * time.Second

// ErrUnknownFeed is returned for a feed slug the server does not serve.
var ErrUnknownFeed = errors.New("feedserver: unknown feed")

// Format is the syndication format of a feed document.
type Format string

// Formats served.
const (
	FormatRSS  Format = "rss"  // RSS 2.0
	FormatAtom Format = "atom" // Atom 1.0 (RFC 4287)
)

// Behavior is how a feed answers requests.
type Behavior string

// Behaviors served.
const (
	// BehaviorNormal answers promptly with a valid document, honouring
	// conditional requests.
	BehaviorNormal Behavior = "normal"
	// BehaviorFailing always answers 500 Internal Server Error.
	BehaviorFailing Behavior = "failing"
	// BehaviorMalformed answers 200 with a document that is not well-formed.
	BehaviorMalformed Behavior = "malformed"
	// BehaviorSlow answers like BehaviorNormal after [Config.SlowDelay].
	BehaviorSlow Behavior = "slow"
)

// Config configures a [Server]. The zero value is usable: every field
// documents its default.
type Config struct {
	// Addr is the TCP address to listen on. It defaults to AddrDefault, a free
	// port on 127.0.0.1.
	Addr string

	// PublishInterval is the base cadence of new entries. Each feed gains an
	// entry every k × PublishInterval, where k (1 to 3) is fixed per feed, and
	// the feeds are staggered so that they do not all publish at once. New
	// entries are derived from the clock ([Config.Now]) whenever the server
	// is asked about a feed, so a test that controls the clock controls the
	// entries. It defaults to PublishIntervalDefault; a negative value turns
	// automatic publishing off, and entries then appear only through
	// [Server.Publish].
	PublishInterval time.Duration

	// InitialEntries is how many entries each feed already holds when the
	// server starts, back-dated one cadence apart. It defaults to
	// InitialEntriesDefault and must not be negative.
	InitialEntries int

	// FeedWindow is how many of the newest entries a feed document lists;
	// older entries drop out of the document but their article pages stay
	// available. It defaults to FeedWindowDefault and must not be negative.
	FeedWindow int

	// SlowDelay is how long the slow feed ([SlugSlow]) waits before it
	// answers. It defaults to SlowDelayDefault and must not be negative. The
	// wait ends early when the client goes away or the server closes.
	SlowDelay time.Duration

	// Seed makes the generated content deterministic: the same seed gives the
	// same headlines, summaries, article text and publication offsets. Zero
	// is a valid seed.
	Seed uint64

	// Now is the clock. It defaults to time.Now.
	Now func() time.Time

	// Logger receives a debug record per request and server errors. It
	// defaults to slog.Default().
	Logger *slog.Logger
}

// FeedInfo describes a feed the server serves.
type FeedInfo struct {
	Slug     string
	Title    string
	Format   Format
	Behavior Behavior
	// Language is the ISO 639-1 code of the language the feed and its
	// article pages are written in, such as "en" or "fr".
	Language string
	// Path is the feed's path on the server, for example "/feeds/night-sky".
	Path string
	// URL is the feed's absolute URL.
	URL string
	// MaxAge is the Cache-Control max-age the feed sends, zero if none.
	MaxAge time.Duration
	// Expires is how far in the future the feed's Expires header points,
	// zero if it sends none.
	Expires time.Duration
	// TTL is the RSS <ttl> the feed declares, zero if none.
	TTL time.Duration
	// PublishEvery is the feed's cadence of new entries, zero if it does not
	// publish on its own.
	PublishEvery time.Duration
}

// Entry is one published entry of a feed.
type Entry struct {
	// Feed is the slug of the feed the entry belongs to.
	Feed string
	// Seq numbers the feed's entries from 1 in publication order.
	Seq int
	// ID is the entry's identifier in the document: the Atom <id> or the RSS
	// <guid>. It is empty for feeds whose entries carry no <guid>.
	ID string
	// Link is the absolute URL of the entry's article page.
	Link      string
	Title     string
	Summary   string
	Published time.Time
}

// Server is a running feed server. Its methods are safe for concurrent use.
type Server struct {
	cfg    Config
	logger *slog.Logger
	ln     net.Listener
	http   *http.Server
	url    string
	start  time.Time

	done      chan struct{} // closed by Close: ends slow responses early
	served    chan struct{} // closed when Serve has returned
	stopAfter func() bool
	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	feeds    map[string]*feedState
	requests map[string]int
}

// feedState is the mutable state of one feed. Guarded by Server.mu.
type feedState struct {
	sample
	every    time.Duration // cadence of automatic entries; 0 when off
	next     time.Time     // when the next automatic entry is due
	order    []int         // seeded order of the sample's titles
	entries  []Entry
	modified time.Time // when the document last changed
}

// Start listens on cfg.Addr and serves the bundled feeds until Close is
// called or ctx is done.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = AddrDefault
	}
	if cfg.PublishInterval == 0 {
		cfg.PublishInterval = PublishIntervalDefault
	}
	switch {
	case cfg.InitialEntries < 0:
		return nil, fmt.Errorf("feedserver: InitialEntries must not be negative, got %d", cfg.InitialEntries)
	case cfg.InitialEntries == 0:
		cfg.InitialEntries = InitialEntriesDefault
	}
	switch {
	case cfg.FeedWindow < 0:
		return nil, fmt.Errorf("feedserver: FeedWindow must not be negative, got %d", cfg.FeedWindow)
	case cfg.FeedWindow == 0:
		cfg.FeedWindow = FeedWindowDefault
	}
	switch {
	case cfg.SlowDelay < 0:
		return nil, fmt.Errorf("feedserver: SlowDelay must not be negative, got %s", cfg.SlowDelay)
	case cfg.SlowDelay == 0:
		cfg.SlowDelay = SlowDelayDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("feedserver: listen on %s: %w", cfg.Addr, err)
	}

	s := &Server{
		cfg:      cfg,
		logger:   logger,
		ln:       ln,
		url:      "http://" + ln.Addr().String(),
		start:    cfg.Now().UTC().Truncate(time.Second),
		done:     make(chan struct{}),
		served:   make(chan struct{}),
		feeds:    make(map[string]*feedState, len(samples)),
		requests: make(map[string]int),
	}
	for i, smp := range samples {
		s.feeds[smp.slug] = s.newFeedState(i, smp)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.serveIndex)
	mux.HandleFunc("GET /feeds/{slug}", s.serveFeed)
	mux.HandleFunc("GET /articles/{slug}/{seq}", s.serveArticle)
	s.http = &http.Server{
		Handler:           s.count(mux),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}

	go func() {
		defer close(s.served)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("feedserver: serve", "err", err)
		}
	}()
	s.stopAfter = context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}

// newFeedState seeds the state of the i-th sample feed with its initial,
// back-dated entries.
func (s *Server) newFeedState(i int, smp sample) *feedState {
	fs := &feedState{sample: smp, modified: s.start}
	if len(smp.titles) == 0 {
		return fs // a feed that never has entries
	}
	rng := s.rand(smp.slug, 0)
	fs.order = rng.Perm(len(smp.titles))

	spacing := time.Hour // back-dating when automatic publishing is off
	if s.cfg.PublishInterval > 0 {
		fs.every = time.Duration(smp.every) * s.cfg.PublishInterval
		spacing = fs.every
		// Stagger the feeds: the first automatic entry is due somewhere in
		// the feed's first cadence, at an offset fixed by the seed and the
		// feed's position.
		frac := (float64(i) + rng.Float64()) / float64(len(samples))
		offset := time.Duration(frac * float64(fs.every))
		fs.next = s.start.Add(max(offset, time.Second))
	}
	for k := s.cfg.InitialEntries; k > 0; k-- {
		s.appendEntry(fs, s.start.Add(-time.Duration(k)*spacing))
	}
	return fs
}

// rand returns a generator fixed by the seed, a feed and an entry number.
func (s *Server) rand(slug string, seq int) *rand.Rand {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d/%s/%d", s.cfg.Seed, slug, seq))
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

// URL returns the server's base URL, such as "http://127.0.0.1:39211".
func (s *Server) URL() string { return s.url }

// FeedURL returns the absolute URL of the feed with the given slug. It does
// not check that the feed exists.
func (s *Server) FeedURL(slug string) string { return s.url + feedPath(slug) }

func feedPath(slug string) string { return "/feeds/" + slug }

func articlePath(slug string, seq int) string {
	return "/articles/" + slug + "/" + strconv.Itoa(seq)
}

// Feeds lists every feed the server serves, well-behaved feeds first.
func (s *Server) Feeds() []FeedInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FeedInfo, 0, len(samples))
	for _, smp := range samples {
		fs := s.feeds[smp.slug]
		out = append(out, FeedInfo{
			Slug:         smp.slug,
			Title:        smp.title,
			Format:       smp.format,
			Behavior:     smp.behavior,
			Language:     smp.language(),
			Path:         feedPath(smp.slug),
			URL:          s.FeedURL(smp.slug),
			MaxAge:       smp.maxAge,
			Expires:      smp.expires,
			TTL:          smp.ttl,
			PublishEvery: fs.every,
		})
	}
	return out
}

// Publish adds a new entry to the feed with the given slug now, in addition to
// the entries published on the feed's own cadence, and returns it. The
// entry's publication time is the clock's current second, or one second after
// the feed last changed if that is later, so that Last-Modified always moves
// forward.
func (s *Server) Publish(slug string) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs, err := s.lockedFeed(slug)
	if err != nil {
		return Entry{}, err
	}
	if len(fs.titles) == 0 {
		return Entry{}, fmt.Errorf("feedserver: feed %q (%s) does not publish entries", slug, fs.behavior)
	}
	at := s.cfg.Now().UTC().Truncate(time.Second)
	if !at.After(fs.modified) {
		at = fs.modified.Add(time.Second)
	}
	return s.appendEntry(fs, at), nil
}

// Entries returns every entry the feed with the given slug has published so
// far, oldest first.
func (s *Server) Entries(slug string) ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs, err := s.lockedFeed(slug)
	if err != nil {
		return nil, err
	}
	return append([]Entry(nil), fs.entries...), nil
}

// Requests returns how many requests the server has received for a path,
// such as "/feeds/slow", whatever their outcome (304 answers included).
func (s *Server) Requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

// RequestCounts returns the number of requests received per path.
func (s *Server) RequestCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests)
}

// Close stops the server: it ends slow responses, waits up to five seconds
// for requests in flight and then closes the remaining connections. It is
// safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stopAfter()
		close(s.done)
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := s.http.Shutdown(ctx); err != nil {
			s.closeErr = errors.Join(fmt.Errorf("feedserver: shutdown: %w", err), s.http.Close())
		}
		<-s.served
	})
	return s.closeErr
}

// lockedFeed returns the state of a feed, caught up with the clock. The
// caller holds s.mu.
func (s *Server) lockedFeed(slug string) (*feedState, error) {
	fs, ok := s.feeds[slug]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownFeed, slug)
	}
	s.catchUp(fs)
	return fs, nil
}

// maxCatchUp bounds how many automatic entries one catch-up adds, so that a
// clock jumping far ahead does not flood a feed.
const maxCatchUp = 1000

// catchUp publishes the automatic entries that have fallen due. The caller
// holds s.mu.
func (s *Server) catchUp(fs *feedState) {
	if fs.every <= 0 || len(fs.titles) == 0 {
		return
	}
	now := s.cfg.Now().UTC()
	if behind := now.Sub(fs.next) / fs.every; behind > maxCatchUp {
		fs.next = fs.next.Add((behind - maxCatchUp) * fs.every)
	}
	for !fs.next.After(now) {
		s.appendEntry(fs, fs.next.Truncate(time.Second))
		fs.next = fs.next.Add(fs.every)
	}
}

// appendEntry generates the feed's next entry, published at the given time.
// The caller holds s.mu or owns fs.
func (s *Server) appendEntry(fs *feedState, published time.Time) Entry {
	seq := len(fs.entries) + 1
	n := len(fs.titles)
	title := fs.titles[fs.order[(seq-1)%n]]
	if round := (seq-1)/n + 1; round > 1 {
		title = fmt.Sprintf("%s (part %d)", title, round)
	}
	rng := s.rand(fs.slug, seq)
	e := Entry{
		Feed:      fs.slug,
		Seq:       seq,
		Link:      s.url + articlePath(fs.slug, seq),
		Title:     title,
		Summary:   strings.Join(pick(rng, fs.sentences, 2), " "),
		Published: published,
	}
	switch {
	case fs.format == FormatAtom:
		e.ID = fmt.Sprintf("tag:feeds.example.org,2025:%s/%d", fs.slug, seq)
	case !fs.noGUID:
		e.ID = fmt.Sprintf("%s-%04d", fs.slug, seq)
	}
	fs.entries = append(fs.entries, e)
	if published.After(fs.modified) {
		fs.modified = published
	}
	return e
}

// pick returns k distinct elements of from, in a seeded order.
func pick(rng *rand.Rand, from []string, k int) []string {
	k = min(k, len(from))
	out := make([]string, 0, k)
	for _, i := range rng.Perm(len(from))[:k] {
		out = append(out, from[i])
	}
	return out
}

// count counts requests per path and logs them.
func (s *Server) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[r.URL.Path]++
		s.mu.Unlock()
		s.logger.Debug("feedserver: request", "method", r.Method, "path", r.URL.Path)
		next.ServeHTTP(w, r)
	})
}
