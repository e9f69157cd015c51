// Command feedfetcher runs braid's bundled example end to end: a feed
// reader's back end fetching the bundled sample feeds, with a live view of
// what braid does and a summary at the end. `make demo` runs it.
//
// Without DATABASE_URL it starts a private PostgreSQL from the server
// binaries installed on the machine, in a temporary directory removed at
// exit; with DATABASE_URL it uses that database, and a second run copes
// with the rows of the first. When OTEL_EXPORTER_OTLP_ENDPOINT is set it
// exports traces and metrics over OTLP, less a signal whose
// OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER is "none", and says which.
//
// Beside itself it serves braid's dashboard and admin API on a loopback
// address (127.0.0.1:8080, or a free port when that one is taken), behind a
// random admin token printed at start; -dashboard "" turns it off.
//
// Usage:
//
//	feedfetcher [-duration 60s] [-fetch-min 2s] [-fetch-max 10s] [-digest-window 4s] [-languages en,de] [-dashboard 127.0.0.1:8080]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/examples/feedfetcher"
	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
	"github.com/braidflow/braid/internal/localpg"
	"github.com/braidflow/braid/internal/telemetry"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// options configure one run of the demo.
type options struct {
	duration     time.Duration
	databaseURL  string
	fetchMin     time.Duration
	fetchMax     time.Duration
	digestWindow time.Duration
	publishEvery time.Duration
	renewEvery   string
	slowDelay    time.Duration
	languages    []string // the languages the reader wants summaries in
	dashboard    string   // address of the dashboard, or "" for none

	out    io.Writer
	width  int  // terminal columns; 0 when out is not a terminal
	height int  // terminal rows
	color  bool // ANSI colours in the live view
}

func main() {
	opts := options{databaseURL: os.Getenv("DATABASE_URL"), out: os.Stdout}
	flag.DurationVar(&opts.duration, "duration", 60*time.Second, "how long to run the engine and the scheduler")
	flag.DurationVar(&opts.fetchMin, "fetch-min", 2*time.Second, "shortest interval between two fetches of a feed, and the first backoff")
	flag.DurationVar(&opts.fetchMax, "fetch-max", 10*time.Second, "longest interval between two fetches of a feed, and the longest backoff")
	flag.DurationVar(&opts.digestWindow, "digest-window", 4*time.Second, "how long a digest waits before it is sent")
	flag.DurationVar(&opts.publishEvery, "publish-every", 10*time.Second, "base cadence at which the sample feeds gain entries")
	flag.StringVar(&opts.renewEvery, "websub-schedule", "@every 10s", "schedule of the renew_websub job")
	languages := flag.String("languages", LanguagesDefault, "comma-separated languages the reader wants summaries in (of "+
		strings.Join(feedfetcher.KnownLanguages(), ", ")+")")
	flag.StringVar(&opts.dashboard, "dashboard", DashboardAddrDefault, "loopback address of braid's dashboard, or \"\" for none")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "feedfetcher: unexpected argument %q\n", flag.Arg(0))
		flag.Usage()
		os.Exit(2)
	}
	if opts.duration <= 0 {
		fmt.Fprintf(os.Stderr, "feedfetcher: -duration must be positive, got %s\n", opts.duration)
		os.Exit(2)
	}
	opts.slowDelay = 3 * time.Second
	opts.languages = strings.Split(*languages, ",")
	if term := os.Getenv("TERM"); term != "dumb" {
		opts.width, opts.height = terminalSize(os.Stdout)
		_, noColor := os.LookupEnv("NO_COLOR")
		opts.color = opts.width > 0 && !noColor
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "feedfetcher: %v\n", err)
		os.Exit(1)
	}
}

// run runs the demo. It returns when the duration has passed or ctx ends,
// after printing the summary.
func run(ctx context.Context, opts options) (err error) {
	// Workers write events while the loop draws the view: one writer,
	// one write at a time.
	opts.out = &syncWriter{w: opts.out}
	say := func(format string, args ...any) { fmt.Fprintf(opts.out, format+"\n", args...) }
	keep := 0
	if opts.width > 0 {
		// Keep as many events as fit under the figures and the table.
		keep = max(3, min(10, opts.height-len(subscriptions)*4-16))
	}
	events := newEventLog(opts.out, keep)
	logger := slog.New(events.handler(slog.LevelInfo))
	quiet := slog.New(events.handler(slog.LevelWarn)) // braid's and River's own records
	slog.SetDefault(quiet)

	shutdownTelemetry, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "feedfetcher", Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, shutdownTelemetry(sctx))
	}()
	if on := telemetry.Exporting(); on.Traces || on.Metrics {
		say("Exporting %s over OTLP (OTEL_EXPORTER_OTLP_* is set).", on)
	}

	url, database := opts.databaseURL, "DATABASE_URL"
	if url == "" {
		dir, err := os.MkdirTemp("", "braid-demo-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		cluster, err := localpg.New(localpg.Config{Dir: dir})
		if err != nil {
			return err
		}
		say("Starting a private PostgreSQL in %s (set DATABASE_URL to use your own)…", dir)
		if err := cluster.Start(ctx); err != nil {
			return fmt.Errorf("starting PostgreSQL: %w\n%s", err, cluster.Logs())
		}
		defer func() { err = errors.Join(err, cluster.Remove()) }()
		url, database = cluster.URL("postgres"), "private PostgreSQL, removed at exit"
	}

	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	say("Migrating braid's schema and the feed reader's…")
	if err := feedfetcher.Migrate(ctx, pool); err != nil {
		return err
	}

	srv, err := feedserver.Start(ctx, feedserver.Config{
		PublishInterval: opts.publishEvery,
		SlowDelay:       opts.slowDelay,
		Logger:          quiet,
	})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()
	events.setFeedPrefix(srv.URL())
	say("Serving the sample feeds at %s.", srv.URL())

	app, err := feedfetcher.New(pool, &feedfetcher.Config{
		Fetcher: feedfetcher.FetcherConfig{
			MinInterval: opts.fetchMin,
			MaxInterval: opts.fetchMax,
			Timeout:     opts.slowDelay + 2*time.Second,
		},
		DigestWindow:     opts.digestWindow,
		ArticleRetryBase: time.Second,
		WebSubSchedule:   opts.renewEvery,
		WebSubLease:      time.Hour,
		Languages:        opts.languages,
		Engine: &workflow.Config{
			DelayPollInterval: 250 * time.Millisecond,
			Queue: &queue.Config{
				Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
				// Retries of failed turns, short for the demo.
				RetryPolicy: queue.Backoff{Base: time.Second, Max: 10 * time.Second, Jitter: 0.2},
			},
			Logger: quiet,
		},
		Scheduler: &scheduler.Config{PollInterval: 250 * time.Millisecond, Logger: quiet},
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	stopped := false
	stopApp := func() error {
		if stopped {
			return nil
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		return app.Stop(sctx)
	}
	defer func() { err = errors.Join(err, stopApp()) }()

	var since time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return err
	}
	if opts.dashboard != "" {
		url, token, stopDashboard, derr := startDashboard(ctx, app, opts.dashboard, quiet)
		if derr != nil {
			return derr
		}
		defer func() { err = errors.Join(err, stopDashboard()) }()
		say("Dashboard: %s  (log in with the token %s; it stops with the demo)", url, token)
	}

	d := &demo{app: app, srv: srv, logger: logger, start: time.Now()}
	if err := d.setUp(ctx, events); err != nil {
		return err
	}
	say("Running for %s: %d readers, %d feeds; an article pipeline per new entry, with summaries in %s.\n",
		opts.duration, len(d.users), len(d.feeds), strings.Join(app.Languages(), ", "))

	filter := feedfetcher.StatsFilter{FeedIDs: d.feedIDs(), Since: since}
	snap := func() (snapshot, error) {
		st, err := app.Stats(context.WithoutCancel(ctx), filter)
		if err != nil {
			return snapshot{}, err
		}
		return snapshot{
			elapsed: time.Since(d.start), duration: opts.duration, now: time.Now(),
			database: database, server: srv.URL(), prefix: srv.URL(), stats: st, events: events.latest(),
			languages: app.Languages(),
		}, nil
	}

	// A reader asks for her digests before their windows pass.
	askCtx, stopAsking := context.WithCancel(ctx)
	var asking sync.WaitGroup
	asking.Go(func() { d.askEarly(askCtx, since, opts.digestWindow) })
	defer asking.Wait()
	defer stopAsking()

	view := &liveView{w: opts.out, width: opts.width, color: opts.color}
	refresh := 5 * time.Second
	if opts.width > 0 {
		refresh = 500 * time.Millisecond
	}
	ticker := time.NewTicker(refresh)
	defer ticker.Stop()
	deadline := time.NewTimer(opts.duration)
	defer deadline.Stop()
	left, back := false, false
	interrupted := false
loop:
	for {
		elapsed := time.Since(d.start)
		if !left && elapsed >= time.Duration(leaveAt*float64(opts.duration)) {
			left = true
			if err := d.leave(ctx, elapsed); err != nil {
				return err
			}
		}
		if !back && elapsed >= time.Duration(returnAt*float64(opts.duration)) {
			back = true
			if err := d.comeBack(ctx, elapsed); err != nil {
				return err
			}
		}
		s, err := snap()
		if err != nil {
			return err
		}
		if opts.width > 0 {
			view.draw(frame(s, opts.color))
		} else {
			say("%s", statusLine(s))
		}
		select {
		case <-ticker.C:
		case <-deadline.C:
			break loop
		case <-ctx.Done():
			interrupted = true
			break loop
		}
	}

	elapsed := time.Since(d.start)
	if opts.width > 0 {
		view.erase()
	}
	stopAsking()
	asking.Wait()
	say("Stopping the scheduler and the engine…")
	if err := stopApp(); err != nil {
		return err
	}
	s, err := snap()
	if err != nil {
		return err
	}
	s.elapsed = elapsed
	if opts.width > 0 {
		// Events were shown in the live view; the last few belong here.
		say("Last events:")
		for _, e := range s.events {
			say("  %s", e)
		}
	}
	summary(opts.out, s, d.notes)
	if interrupted {
		say("\nInterrupted before %s; the summary covers %s.", opts.duration, round(elapsed))
	}
	return nil
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
