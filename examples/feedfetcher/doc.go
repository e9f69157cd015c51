// Package feedfetcher is braid's bundled example: the back end of a feed
// reader. Users subscribe to RSS and Atom feeds; each feed is fetched by its
// own recurring job, and every new entry starts an article pipeline, a
// DAG that reads and indexes it, and a digest workflow per subscriber that
// fetches the article pages and, after a digest window or sooner when a
// reader asks for it, sends the digest. The command in cmd/feedfetcher runs it against the bundled feed
// server with a live view; `make demo` starts it.
//
// # The application
//
// An [App] holds a workflow engine, whose River client works the feed
// reader's jobs too, and a scheduler; [New] builds them and [App.Start]
// starts them. [Migrate] applies braid's migrations and the feed reader's
// own, which goose records in their own table ([MigrationsTable]).
//
// # Storage
//
// The feed reader's tables: users; feeds, one row per URL, with the
// validators of the last fetch (etag, last_modified), the declared ttl, the
// mirrored next_fetch_at, consecutive_failures and last_error;
// subscriptions, soft-deleted by unsubscribed_at; entries, unique per feed
// by their key (GUID, else link); digests, unique by idempotency key;
// articles, the article pipeline's index, unique per entry; and
// websub_subscriptions with a websub_renewals record.
//
// # Subscriptions and the fetch_feed job
//
// Every feed has one fetch_feed recurring job (braid_recurring, kind
// [FetchFeedKind], keyed by the feed's ID), enabled while the feed has
// subscribers. [App.Subscribe] creates the feed, its job and the
// subscription in one transaction, or, for a feed that exists, enables its
// job again and mirrors the job's next_run_at into feeds.next_fetch_at.
// [App.Unsubscribe] soft-deletes the subscription and, in the same
// transaction, sets the job enabled exactly when an active subscription is
// left (an EXISTS decided under the job's row lock), clearing
// next_fetch_at when the job ends up disabled. A disabled job keeps its
// next run, so subscribing again resumes it.
//
// The job's handler fetches the feed with a conditional GET, stores the new
// entries and starts the digests in one transaction, and picks the next run
// from the HTTP cache headers and the feed's TTL within the fetcher's
// bounds, as a time on the database's clock, read in that transaction,
// mirrored into next_fetch_at and given to scheduler.NextRunAt. A failed fetch counts consecutive_failures
// on the feed, mirrors the backoff into next_fetch_at, and fails the run, so
// the job's row counts the failure and backs off by the same schedule.
// After every run, a worker middleware outside the scheduler's recurring
// middleware copies the row's next_run_at and consecutive_failures into
// the feed, so the mirror follows the row on every path, those the handler
// never sees too (a timeout, a failure before the fetch, a refused run).
//
// # Digests
//
// New entries start one [DigestWorkflow] run per subscriber, inside the
// transaction that stores them. The run fans out over the entries with
// workflow.Map, one [FetchArticleWorkflow] child task per article page,
// waits for the [SendNowSignal] signal with Config.DigestWindow as its
// timeout (workflow.WaitSignal), then sends the digest in a step: it writes
// the digest to the digests table, keyed by the step's idempotency key, and
// logs it, so a digest is never sent twice. The digest goes out when its
// window passes, or at once when a reader asks for it: [App.SendDigestNow]
// signals the user's pending digests, found by their runs' idempotency
// keys, and such a digest's output says Early and RequestedBy, which
// [App.Stats] lists under SentEarly. Each run starts a trace of its own
// (feedfetcher.digest, linked to the fetch that found the entries): its
// turns, the fan-out children, the wait between turns, and the send step.
//
// # The article pipeline
//
// New entries also start one [PipelineWorkflow] run per entry, a DAG, in
// the same transaction, under an idempotency key that names the entry, so
// a fetch retried after it committed never starts a second pipeline for
// an entry. Its nodes, each a task of the run with its own retries:
//
//   - fetch ([NodeFetch]) gets the entry's page in a step with a retry
//     policy ([Fetcher.FetchPage]); when the entry has no link or its
//     attempts are spent, the entry's summary from the feed stands in;
//   - extract ([NodeExtract]) turns the page into plain text;
//   - language ([NodeLanguage]) detects the text's language by counting
//     stop words ([KnownLanguages]);
//   - summary ([NodeSummary]) picks the text's most representative
//     sentences, only When the language is one the reader wants
//     ([SummaryCondition] over Config.Languages, which travel in the
//     run's input); otherwise it is skipped, with the reason
//     "condition false: language.code in input.languages";
//   - index ([NodeIndex]) writes the article's row, with its summary or
//     none, in a step keyed by the entry.
//
// language and summary follow extract; summary depends on language, whose
// output its condition reads; index waits for extract, language and
// summary, and runs whether summary ran or was skipped. Each node reads its
// dependencies' outputs typed (workflow.NodeRef.Output). [App.PipelineRun]
// returns an entry's run with its nodes and skip reasons, [App.Articles] a
// feed's index, and [App.Stats] counts the runs, the skipped nodes by
// reason and the articles by language. Each run starts a trace of its own
// (feedfetcher.article_pipeline, linked to the fetch that found the entry).
//
// # WebSub renewal
//
// The [RenewWebSubSchedule] cron schedule (@daily by default) inserts a
// [RenewWebSubKind] job that renews the WebSub subscriptions expiring within
// 24 hours and records each renewal. The example has no hub to ask.
//
// # Fetching
//
// A [Fetcher] does the HTTP side of fetching one feed and knows nothing of
// storage. [Fetcher.Fetch] sends a conditional GET with the validators kept
// from the last fetch (ETag as If-None-Match, Last-Modified as
// If-Modified-Since); a 304 answer is a success that says the stored entries
// are current. A new document is parsed with github.com/mmcdole/gofeed into
// [Entry] values, deduplicated by [Entry.Key]: the GUID, else the link.
// [Fetcher.FetchArticle] fetches one entry's page for the digest.
//
// # Scheduling
//
// Every successful fetch says when to fetch again. [NextInterval] takes the
// longer of the response's HTTP freshness (Cache-Control max-age, or Expires
// against Date, less Age) and the feed's declared time to live (RSS <ttl>,
// or sy:updatePeriod and sy:updateFrequency), falls back to a default
// without either, and clamps the result to [Bounds]: 15 minutes to 24 hours
// by default, seconds in the demo.
//
// # Failures
//
// Every failure is a *[FetchError] naming the URL, the HTTP status if one
// arrived, and the cause: [ErrHTTPStatus], [ErrMalformedFeed], [ErrTimeout],
// [ErrResponseTooLarge], [ErrInvalidURL] or a network error. The caller
// counts consecutive failures on the feed and waits [Fetcher.Backoff] before
// the next attempt.
//
// # The feed server
//
// Package feedserver, beside this one, serves sample feeds on loopback for
// the demo and the tests: feeds that gain entries over time, one that always
// fails, one that is malformed and one that is slow.
package feedfetcher
