package feedfetcher

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// StatsFilter selects what [App.Stats] counts. The zero value counts
// everything.
type StatsFilter struct {
	// FeedIDs limits the figures to these feeds; nil means every feed.
	FeedIDs []int64
	// Since limits entries, digest runs, digests, renewals, article
	// pipeline runs and articles to those created at or after it; the zero
	// time means all.
	Since time.Time
}

// Stats are the feed reader's figures, for a dashboard or a summary.
type Stats struct {
	// Feeds counts the feeds; FeedsFetched those fetched at least once,
	// FeedsFailing those whose last fetch failed, and FetchDisabled those
	// whose fetch_feed job is disabled (no subscribers).
	Feeds         int `json:"feeds"`
	FeedsFetched  int `json:"feeds_fetched"`
	FeedsFailing  int `json:"feeds_failing"`
	FetchDisabled int `json:"fetch_disabled"`
	// Fetches counts every fetch, NotModified the 304 answers among them
	// and FetchFailures the failures.
	Fetches       int64 `json:"fetches"`
	NotModified   int64 `json:"not_modified"`
	FetchFailures int64 `json:"fetch_failures"`
	// Entries counts the entries stored.
	Entries int64 `json:"entries"`
	// Runs counts digest runs by status: pending, running, waiting,
	// completed, failed, cancelled.
	Runs map[string]int `json:"runs"`
	// DigestsSent counts the digests sent. DigestsSentTwice counts the
	// digest runs that sent more than one digest, which the idempotency key
	// keeps at zero, and DuplicatesSuppressed the send steps that found
	// their digest sent already.
	DigestsSent          int64 `json:"digests_sent"`
	DigestsSentTwice     int64 `json:"digests_sent_twice"`
	DuplicatesSuppressed int   `json:"duplicates_suppressed"`
	// SentEarly are the digests sent before their window passed, at a
	// reader's request (App.SendDigestNow), oldest run first.
	SentEarly []EarlyDigest `json:"sent_early"`
	// WebSubRenewals counts the renewals of WebSub subscriptions.
	WebSubRenewals int64 `json:"websub_renewals"`
	// Pipelines counts article pipeline runs by status.
	Pipelines map[string]int `json:"pipelines"`
	// PipelineNodes counts the nodes of those runs by node name, then by
	// status: blocked, pending, completed, failed, skipped, cancelled.
	PipelineNodes map[string]map[string]int `json:"pipeline_nodes"`
	// Skipped counts the skipped nodes of those runs by node and skip
	// reason, most frequent first.
	Skipped []SkippedNodes `json:"skipped"`
	// Articles counts the articles indexed, and Summarized those indexed
	// with a summary. Languages has both per detected language.
	Articles   int64                     `json:"articles"`
	Summarized int64                     `json:"summarized"`
	Languages  map[string]*LanguageStats `json:"languages"`
	// PerFeed has the figures of each feed, in ID order.
	PerFeed []*FeedStats `json:"per_feed"`
}

// EarlyDigest is a digest sent before its window passed, because a reader
// asked for it.
type EarlyDigest struct {
	RunID  string `json:"run_id"`
	UserID int64  `json:"user_id"`
	User   string `json:"user"`
	FeedID int64  `json:"feed_id"`
	// RequestedBy names the reader who asked.
	RequestedBy string `json:"requested_by"`
	// Ahead is how long before the window's end the request ended the
	// wait, by the database's clock: the send-now wait's timeout less the
	// moment the signal settled it.
	Ahead time.Duration `json:"ahead"`
}

// SkippedNodes counts the skipped nodes of article pipeline runs that share
// a node name and a skip reason.
type SkippedNodes struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// LanguageStats count the indexed articles of one language.
type LanguageStats struct {
	Articles   int64 `json:"articles"`
	Summarized int64 `json:"summarized"`
}

// FeedStats are the figures of one feed.
type FeedStats struct {
	Feed
	Subscribers int   `json:"subscribers"`
	Entries     int64 `json:"entries"`
	Digests     int64 `json:"digests"`
	// Articles counts the feed's indexed articles, and Language is the
	// language most of them are in ("" without articles).
	Articles int64  `json:"articles"`
	Language string `json:"language"`
	// FetchEnabled is whether the feed's fetch_feed job is enabled, and
	// FetchDead whether it is parked as a dead letter after too many
	// failures.
	FetchEnabled bool `json:"fetch_enabled"`
	FetchDead    bool `json:"fetch_dead"`
}

// Stats returns the feed reader's figures, selected by f.
func (a *App) Stats(ctx context.Context, f StatsFilter) (*Stats, error) {
	st := &Stats{Runs: map[string]int{}, Pipelines: map[string]int{}, PipelineNodes: map[string]map[string]int{},
		Languages: map[string]*LanguageStats{}}
	rows, err := a.pool.Query(ctx, `
SELECT `+feedColumns+`,
    (SELECT count(*) FROM subscriptions s WHERE s.feed_id = feeds.id AND s.unsubscribed_at IS NULL),
    (SELECT count(*) FROM entries e WHERE e.feed_id = feeds.id AND e.created_at >= $2),
    (SELECT count(*) FROM digests d WHERE d.feed_id = feeds.id AND d.sent_at >= $2),
    (SELECT count(*) FROM articles a WHERE a.feed_id = feeds.id AND a.indexed_at >= $2),
    coalesce((SELECT a.language FROM articles a WHERE a.feed_id = feeds.id AND a.indexed_at >= $2
        GROUP BY a.language ORDER BY count(*) DESC, a.language LIMIT 1), '')
FROM feeds WHERE $1::bigint[] IS NULL OR id = ANY($1) ORDER BY id`, f.FeedIDs, f.Since)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: reading feed figures: %w", err)
	}
	st.PerFeed, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*FeedStats, error) {
		var (
			fs  FeedStats
			ttl int32
		)
		err := row.Scan(&fs.ID, &fs.URL, &fs.Title, &fs.ETag, &fs.LastModified, &ttl, &fs.NextFetchAt, &fs.LastFetchedAt,
			&fs.ConsecutiveFailures, &fs.LastError, &fs.FetchCount, &fs.NotModifiedCount, &fs.FailureCount,
			&fs.CreatedAt, &fs.UpdatedAt, &fs.Subscribers, &fs.Entries, &fs.Digests, &fs.Articles, &fs.Language)
		fs.TTL = time.Duration(ttl) * time.Second
		return &fs, err
	})
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: reading feed figures: %w", err)
	}

	jobs := map[string]*scheduler.Recurring{}
	for offset := 0; ; offset += 1000 {
		page, err := a.sched.ListRecurring(ctx, &scheduler.RecurringListParams{Kind: FetchFeedKind, Limit: 1000, Offset: offset})
		if err != nil {
			return nil, fmt.Errorf("feedfetcher: reading fetch jobs: %w", err)
		}
		for _, r := range page {
			jobs[r.Key] = r
		}
		if len(page) < 1000 {
			break
		}
	}
	for _, fs := range st.PerFeed {
		st.Feeds++
		if fs.FetchCount > 0 {
			st.FeedsFetched++
		}
		if fs.ConsecutiveFailures > 0 {
			st.FeedsFailing++
		}
		if job, ok := jobs[feedKey(fs.ID)]; ok {
			fs.FetchEnabled, fs.FetchDead = job.Enabled, job.DeadAt != nil
		}
		if !fs.FetchEnabled {
			st.FetchDisabled++
		}
		st.Fetches += fs.FetchCount
		st.NotModified += fs.NotModifiedCount
		st.FetchFailures += fs.FailureCount
		st.Entries += fs.Entries
		st.DigestsSent += fs.Digests
	}

	err = a.pool.QueryRow(ctx, `
SELECT
    (SELECT count(*) FROM (
        SELECT run_id FROM digests
        WHERE ($1::bigint[] IS NULL OR feed_id = ANY($1)) AND sent_at >= $2
        GROUP BY run_id HAVING count(*) > 1) twice),
    (SELECT count(*) FROM websub_renewals r JOIN websub_subscriptions w ON w.id = r.subscription_id
        WHERE ($1::bigint[] IS NULL OR w.feed_id = ANY($1)) AND r.renewed_at >= $2)`,
		f.FeedIDs, f.Since).Scan(&st.DigestsSentTwice, &st.WebSubRenewals)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: reading digest figures: %w", err)
	}

	if err := a.pipelineStats(ctx, f, st); err != nil {
		return nil, err
	}

	runs, err := a.engine.ListRuns(ctx, workflow.RunFilter{Workflow: DigestWorkflow, Limit: 10_000})
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing digest runs: %w", err)
	}
	for _, r := range runs {
		if r.CreatedAt.Before(f.Since) {
			continue
		}
		if f.FeedIDs != nil {
			var in DigestInput
			if err := json.Unmarshal(r.Input, &in); err != nil || !slices.Contains(f.FeedIDs, in.FeedID) {
				continue
			}
		}
		st.Runs[r.Status]++
		if r.Status == "completed" {
			var out DigestOutput
			if err := json.Unmarshal(r.Output, &out); err == nil && out.AlreadySent {
				st.DuplicatesSuppressed++
			}
			if out.Early {
				e, err := a.earlyDigest(ctx, r.ID, out.RequestedBy)
				if err != nil {
					return nil, err
				}
				st.SentEarly = append(st.SentEarly, e)
			}
		}
	}
	// ListRuns lists the newest first.
	slices.Reverse(st.SentEarly)
	return st, nil
}

// earlyDigest describes the digest of a run that was sent early at the
// request of by: how long before its window's end the send-now signal
// settled the wait, from the wait's record (the step "signal:send-now" of
// the root task, with its timeout as resume_at).
func (a *App) earlyDigest(ctx context.Context, runID, by string) (EarlyDigest, error) {
	run, err := a.engine.Run(ctx, runID)
	if err != nil {
		return EarlyDigest{}, fmt.Errorf("feedfetcher: reading digest run %s: %w", runID, err)
	}
	var in DigestInput
	if err := json.Unmarshal(run.Input, &in); err != nil {
		return EarlyDigest{}, fmt.Errorf("feedfetcher: reading the input of digest run %s: %w", runID, err)
	}
	e := EarlyDigest{RunID: runID, UserID: in.UserID, FeedID: in.FeedID, RequestedBy: by}
	if e.User, err = userName(ctx, a.pool, in.UserID); err != nil {
		return EarlyDigest{}, err
	}
	for _, task := range run.Tasks {
		if task.ParentID != "" {
			continue
		}
		for _, s := range task.Steps {
			if s.Name == "signal:"+SendNowSignal && s.ResumeAt != nil && s.FinishedAt != nil {
				e.Ahead = max(0, s.ResumeAt.Sub(*s.FinishedAt))
			}
		}
	}
	return e, nil
}

// pipelineStats fills the figures of the article pipelines: their runs by
// status, their nodes by status and skip reason (braid_tasks rows whose
// dependents are set are DAG nodes), and the articles indexed.
func (a *App) pipelineStats(ctx context.Context, f StatsFilter, st *Stats) error {
	const selected = `r.workflow = $3 AND r.created_at >= $2 AND ($1::bigint[] IS NULL OR (r.input->>'feed_id')::bigint = ANY($1))`
	rows, err := a.pool.Query(ctx, `SELECT r.status, count(*) FROM braid_runs r WHERE `+selected+` GROUP BY 1`,
		f.FeedIDs, f.Since, PipelineWorkflow)
	if err != nil {
		return fmt.Errorf("feedfetcher: counting article pipelines: %w", err)
	}
	var (
		status string
		n      int
	)
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		st.Pipelines[status] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("feedfetcher: counting article pipelines: %w", err)
	}

	rows, err = a.pool.Query(ctx, `
SELECT t.key, t.status, coalesce(t.skip_reason, ''), count(*)
FROM braid_runs r JOIN braid_tasks t ON t.run_id = r.id AND t.dependents IS NOT NULL
WHERE `+selected+`
GROUP BY 1, 2, 3`, f.FeedIDs, f.Since, PipelineWorkflow)
	if err != nil {
		return fmt.Errorf("feedfetcher: counting article pipeline nodes: %w", err)
	}
	var node, reason string
	_, err = pgx.ForEachRow(rows, []any{&node, &status, &reason, &n}, func() error {
		if st.PipelineNodes[node] == nil {
			st.PipelineNodes[node] = map[string]int{}
		}
		st.PipelineNodes[node][status] += n
		if status == "skipped" {
			st.Skipped = append(st.Skipped, SkippedNodes{Node: node, Reason: reason, Count: n})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("feedfetcher: counting article pipeline nodes: %w", err)
	}
	slices.SortFunc(st.Skipped, func(x, y SkippedNodes) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Node, y.Node), cmp.Compare(x.Reason, y.Reason))
	})

	rows, err = a.pool.Query(ctx, `
SELECT language, count(*), count(summary) FROM articles
WHERE ($1::bigint[] IS NULL OR feed_id = ANY($1)) AND indexed_at >= $2
GROUP BY 1`, f.FeedIDs, f.Since)
	if err != nil {
		return fmt.Errorf("feedfetcher: counting articles: %w", err)
	}
	var lang string
	var all, summarized int64
	_, err = pgx.ForEachRow(rows, []any{&lang, &all, &summarized}, func() error {
		st.Languages[lang] = &LanguageStats{Articles: all, Summarized: summarized}
		st.Articles += all
		st.Summarized += summarized
		return nil
	})
	if err != nil {
		return fmt.Errorf("feedfetcher: counting articles: %w", err)
	}
	return nil
}

// Feed returns a feed, or an error matching ErrFeedNotFound.
func (a *App) Feed(ctx context.Context, id int64) (*Feed, error) { return feedByID(ctx, a.pool, id) }

// Feeds returns the feeds with the given IDs, or every feed when ids is
// nil, in ID order.
func (a *App) Feeds(ctx context.Context, ids []int64) ([]*Feed, error) {
	return listFeeds(ctx, a.pool, ids)
}

// FeedByURL returns the feed with the given URL, or an error matching
// ErrFeedNotFound.
func (a *App) FeedByURL(ctx context.Context, rawURL string) (*Feed, error) {
	return feedByURL(ctx, a.pool, rawURL)
}

// Entries returns the entries stored for a feed, oldest first.
func (a *App) Entries(ctx context.Context, feedID int64) ([]StoredEntry, error) {
	return listEntries(ctx, a.pool, feedID)
}
