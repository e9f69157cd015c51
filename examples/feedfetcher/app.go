package feedfetcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// Names under which the feed reader's work appears in braid.
const (
	// FetchFeedKind is the River job kind of the per-feed recurring job.
	FetchFeedKind = "fetch_feed"
	// RenewWebSubKind is the River job kind that the renew_websub schedule
	// inserts.
	RenewWebSubKind = "renew_websub"
	// RenewWebSubSchedule is the name of the cron schedule that renews
	// WebSub subscriptions.
	RenewWebSubSchedule = "renew_websub"
	// DigestWorkflow is the name of the workflow that sends a digest.
	DigestWorkflow = "digest"
	// FetchArticleWorkflow is the name of the child workflow that fetches
	// one article page for a digest.
	FetchArticleWorkflow = "fetch_article"
)

// Defaults for [Config] fields left at their zero value.
const (
	// DigestWindowDefault is how long a digest waits, after its articles
	// are fetched, before it is sent.
	DigestWindowDefault = time.Hour
	// MaxDigestEntriesDefault caps the entries of one digest.
	MaxDigestEntriesDefault = 50
	// ArticleAttemptsDefault is how many times an article page is tried
	// before the digest goes out with the entry's own title instead.
	ArticleAttemptsDefault = 3
	// ArticleRetryBaseDefault is the wait after the first failed try of an
	// article page; it doubles with each further try.
	ArticleRetryBaseDefault = 5 * time.Second
	// WebSubScheduleDefault is when WebSub subscriptions are renewed.
	WebSubScheduleDefault = "@daily"
	// WebSubRenewWithinDefault renews a WebSub subscription that expires
	// within this much time.
	WebSubRenewWithinDefault = 24 * time.Hour
	// WebSubLeaseDefault is the lease requested from a hub: ten days, the
	// common default of hubs.
	WebSubLeaseDefault = 10 * 24 * time.Hour
)

// Config configures an [App]. The zero value is usable: every field
// documents its default.
type Config struct {
	// Fetcher configures the HTTP side of fetching: the interval bounds
	// (MinInterval, MaxInterval), the timeout and the size cap. Its
	// defaults are those of FetcherConfig: fetches between 15 minutes and
	// 24 hours apart.
	Fetcher FetcherConfig

	// DigestWindow is how long a digest waits before it is sent, unless a
	// reader asks for it sooner (App.SendDigestNow): a durable wait on the
	// send-now signal with the window as its timeout. It defaults to
	// DigestWindowDefault and must not be negative.
	DigestWindow time.Duration

	// MaxDigestEntries caps the entries of one digest; a fetch that finds
	// more sends the newest. It defaults to MaxDigestEntriesDefault.
	MaxDigestEntries int

	// ArticleAttempts is how many times the digest tries to fetch an
	// article page. It defaults to ArticleAttemptsDefault.
	ArticleAttempts int

	// ArticleRetryBase is the wait after the first failed try of an
	// article page, doubled for each further try. It defaults to
	// ArticleRetryBaseDefault.
	ArticleRetryBase time.Duration

	// WebSubSchedule is the expression of the renew_websub schedule, in the
	// syntax of scheduler.Parse. It defaults to WebSubScheduleDefault
	// (@daily). Start creates the schedule, or updates its expression.
	WebSubSchedule string

	// WebSubRenewWithin renews the WebSub subscriptions that expire within
	// this much time. It defaults to WebSubRenewWithinDefault (24 h).
	WebSubRenewWithin time.Duration

	// WebSubLease is the lease requested from a hub on each renewal. It
	// defaults to WebSubLeaseDefault (10 days).
	WebSubLease time.Duration

	// Languages are the languages the reader wants summaries in, as ISO
	// 639-1 codes among those the detector knows ([KnownLanguages]). The
	// article pipeline of every new entry detects the entry's language,
	// and its summary node runs only when that language is one of these
	// (SummaryCondition); otherwise the node is skipped, and the entry is
	// indexed without a summary. It defaults to LanguagesDefault (en).
	Languages []string

	// MaxFailures parks a feed's recurring job as a dead letter after this
	// many failed fetches in a row; a negative value never parks. It
	// defaults to scheduler.RecurringMaxFailuresDefault.
	MaxFailures int

	// Engine is the base configuration of the workflow engine (queues,
	// leases, poll intervals, logger). The App adds its workflows and the
	// scheduler's recurring middleware to a copy, and registers its
	// workers (fetch_feed, renew_websub) in Engine.Queue.Workers when that
	// is set, or in a bundle of its own. It defaults to the engine's
	// defaults.
	Engine *workflow.Config

	// Scheduler is the base configuration of the scheduler (poll interval,
	// leases, logger). The App sets its Queue and Workflows on a copy. It
	// defaults to the scheduler's defaults.
	Scheduler *scheduler.Config

	// TracerProvider supplies the tracer of the feed reader's own spans. It
	// defaults to the engine's TracerProvider, else the global provider.
	TracerProvider trace.TracerProvider

	// Logger receives the feed reader's events: subscriptions, fetch
	// failures, digests sent, renewals. It defaults to slog.Default(). It
	// also serves the engine and the scheduler when their configurations
	// name no logger of their own.
	Logger *slog.Logger
}

// App is the back end of a feed reader built on braid: users subscribe to
// feeds, every feed is fetched by its own recurring job, and new entries
// start an article pipeline per entry and a digest workflow per
// subscriber. Create it with [New], then
// [App.Start] it; [App.Subscribe] and the other methods work whether it is
// started or not. An App is safe for concurrent use.
type App struct {
	pool    *pgxpool.Pool
	cfg     Config
	fetcher *Fetcher
	engine  *workflow.Engine
	sched   *scheduler.Scheduler
	tracer  trace.Tracer
	logger  *slog.Logger

	digest  *workflow.Workflow[DigestInput, DigestOutput]
	article *workflow.Workflow[ArticleInput, ArticleSummary]
	pipe    pipeline

	mu      sync.Mutex
	started bool
}

// New returns an App on pool, configured by cfg (nil means all defaults),
// or an error naming the first invalid field. It builds the workflow engine
// and the scheduler but starts nothing. The database must be migrated
// ([Migrate]) before the App is used.
func New(pool *pgxpool.Pool, cfg *Config) (*App, error) {
	if pool == nil {
		return nil, errors.New("feedfetcher: New needs a non-nil pool")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DigestWindow", &c.DigestWindow, DigestWindowDefault},
		{"ArticleRetryBase", &c.ArticleRetryBase, ArticleRetryBaseDefault},
		{"WebSubRenewWithin", &c.WebSubRenewWithin, WebSubRenewWithinDefault},
		{"WebSubLease", &c.WebSubLease, WebSubLeaseDefault},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("feedfetcher: Config.%s must not be negative, got %s", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.WebSubLease < time.Second || c.WebSubLease > WebSubLeaseMax {
		return nil, fmt.Errorf("feedfetcher: Config.WebSubLease must be between 1s and %s, got %s", WebSubLeaseMax, c.WebSubLease)
	}
	for _, n := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxDigestEntries", &c.MaxDigestEntries, MaxDigestEntriesDefault},
		{"ArticleAttempts", &c.ArticleAttempts, ArticleAttemptsDefault},
	} {
		if *n.v < 0 {
			return nil, fmt.Errorf("feedfetcher: Config.%s must not be negative, got %d", n.name, *n.v)
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	if c.WebSubSchedule == "" {
		c.WebSubSchedule = WebSubScheduleDefault
	}
	if _, err := scheduler.Parse(c.WebSubSchedule, ""); err != nil {
		return nil, fmt.Errorf("feedfetcher: Config.WebSubSchedule: %w", err)
	}
	var err error
	if c.Languages, err = checkLanguages(c.Languages); err != nil {
		return nil, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}

	fetcher, err := NewFetcher(c.Fetcher)
	if err != nil {
		return nil, err
	}
	a := &App{pool: pool, cfg: c, fetcher: fetcher, logger: c.Logger}

	// Failed fetches back off on the recurring row exactly as the feed's
	// mirror says: MinInterval doubled per failure, capped at MaxInterval,
	// without jitter (Fetcher.Backoff).
	bounds := fetcher.Bounds()
	mw, err := scheduler.NewRecurringMiddleware(pool, &scheduler.RecurringConfig{
		MaxFailures: c.MaxFailures,
		Backoff:     queue.Backoff{Strategy: queue.Exponential, Base: bounds.Min, Max: bounds.Max},
		Logger:      c.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: %w", err)
	}

	var ec workflow.Config
	if c.Engine != nil {
		ec = *c.Engine
	}
	var qc queue.Config
	if ec.Queue != nil {
		qc = *ec.Queue
	}
	if qc.Workers == nil {
		qc.Workers = river.NewWorkers()
	}
	if err := river.AddWorkerSafely(qc.Workers, &fetchFeedWorker{app: a}); err != nil {
		return nil, fmt.Errorf("feedfetcher: registering the %s worker: %w", FetchFeedKind, err)
	}
	if err := river.AddWorkerSafely(qc.Workers, &renewWebSubWorker{app: a}); err != nil {
		return nil, fmt.Errorf("feedfetcher: registering the %s worker: %w", RenewWebSubKind, err)
	}
	// The mirror wraps the recurring middleware, so it reads each outcome
	// that middleware records.
	mirror := &fetchMirror{pool: pool, logger: c.Logger}
	qc.Middleware = append([]rivertype.Middleware{mirror, mw}, qc.Middleware...)
	ec.Queue = &qc
	a.article = workflow.Define(FetchArticleWorkflow, a.fetchArticle, workflow.WithMaxAttempts(5))
	a.digest = workflow.Define(DigestWorkflow, a.sendDigest, workflow.WithMaxAttempts(10))
	ec.Workflows = append(append([]workflow.Definition(nil), ec.Workflows...), a.digest, a.article)
	ec.Workflows = append(ec.Workflows, a.definePipeline()...)
	if ec.Logger == nil {
		ec.Logger = c.Logger
	}
	if a.engine, err = workflow.NewEngine(pool, &ec); err != nil {
		return nil, fmt.Errorf("feedfetcher: %w", err)
	}

	var sc scheduler.Config
	if c.Scheduler != nil {
		sc = *c.Scheduler
	}
	sc.Queue = a.engine.Queue()
	sc.Workflows = a.engine
	sc.Recurring = mw
	if sc.Logger == nil {
		sc.Logger = ec.Logger
	}
	if a.sched, err = scheduler.New(pool, &sc); err != nil {
		return nil, fmt.Errorf("feedfetcher: %w", err)
	}

	tp := c.TracerProvider
	if tp == nil {
		tp = ec.TracerProvider
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	a.tracer = tp.Tracer("github.com/braidflow/braid/examples/feedfetcher")
	return a, nil
}

// Start creates the renew_websub schedule (or brings its expression up to
// date), then starts the workflow engine, which works the fetch_feed,
// renew_websub, digest and article pipeline jobs, and the scheduler, which claims due
// recurring jobs and fires schedules.
func (a *App) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return errors.New("feedfetcher: App already started")
	}
	if err := a.ensureSchedule(ctx); err != nil {
		return err
	}
	if err := a.engine.Start(ctx); err != nil {
		return fmt.Errorf("feedfetcher: starting the engine: %w", err)
	}
	if err := a.sched.Start(ctx); err != nil {
		_ = a.engine.Stop(context.WithoutCancel(ctx))
		return fmt.Errorf("feedfetcher: starting the scheduler: %w", err)
	}
	a.started = true
	return nil
}

// Stop stops the scheduler, so that no further fetch is claimed, then the
// engine, which waits for running jobs until ctx ends. Stopping an App that
// is not started does nothing.
func (a *App) Stop(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		return nil
	}
	a.started = false
	err := a.sched.Stop(ctx)
	if e := a.engine.Stop(ctx); e != nil {
		err = errors.Join(err, e)
	}
	a.fetcher.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("feedfetcher: stopping: %w", err)
	}
	return nil
}

// ensureSchedule creates the renew_websub schedule, or sets the configured
// expression on the one that exists.
func (a *App) ensureSchedule(ctx context.Context) error {
	_, err := a.sched.Create(ctx, &scheduler.ScheduleParams{
		TargetType:  scheduler.TargetJob,
		Name:        RenewWebSubSchedule,
		Description: "Renew WebSub subscriptions that expire soon.",
		Expression:  a.cfg.WebSubSchedule,
		Target:      RenewWebSubKind,
		CreatedBy:   "feedfetcher",
	})
	if errors.Is(err, scheduler.ErrScheduleExists) {
		var s *scheduler.Schedule
		if s, err = a.sched.Get(ctx, RenewWebSubSchedule); err == nil && !sameExpression(s, a.cfg.WebSubSchedule) {
			expr, zone := a.cfg.WebSubSchedule, ""
			_, err = a.sched.Update(ctx, RenewWebSubSchedule, &scheduler.ScheduleUpdate{Expression: &expr, TimeZone: &zone})
		}
	}
	if err != nil {
		return fmt.Errorf("feedfetcher: ensuring the %s schedule: %w", RenewWebSubSchedule, err)
	}
	return nil
}

// sameExpression reports whether schedule s fires on expr in UTC.
func sameExpression(s *scheduler.Schedule, expr string) bool {
	have, err := scheduler.Parse(s.Expression, s.TimeZone)
	if err != nil {
		return false
	}
	want, err := scheduler.Parse(expr, "")
	return err == nil && have.String() == want.String() && have.Location().String() == want.Location().String()
}

// Engine returns the workflow engine that runs the digests and works the
// feed reader's jobs.
func (a *App) Engine() *workflow.Engine { return a.engine }

// Scheduler returns the scheduler that holds the fetch_feed recurring jobs
// and the renew_websub schedule.
func (a *App) Scheduler() *scheduler.Scheduler { return a.sched }

// Fetcher returns the fetcher the fetch_feed jobs and the digests use.
func (a *App) Fetcher() *Fetcher { return a.fetcher }

// Pool returns the App's database pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// checkLanguages normalizes the configured languages (lower case, no
// repeats), or says which one the detector does not know. None means
// LanguagesDefault.
func checkLanguages(langs []string) ([]string, error) {
	if len(langs) == 0 {
		return slices.Clone(LanguagesDefault), nil
	}
	known := KnownLanguages()
	out := make([]string, 0, len(langs))
	for _, l := range langs {
		l = strings.ToLower(strings.TrimSpace(l))
		if !slices.Contains(known, l) {
			return nil, fmt.Errorf("feedfetcher: Config.Languages: %q is not a language the detector knows (%s)", l, strings.Join(known, ", "))
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

// Languages returns the languages the reader wants summaries in.
func (a *App) Languages() []string { return slices.Clone(a.cfg.Languages) }
