package feedfetcher

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Feed is a feed the reader fetches: one row per URL, shared by all its
// subscribers.
type Feed struct {
	ID    int64  `json:"id"`
	URL   string `json:"url"`
	Title string `json:"title,omitempty"`
	// ETag and LastModified are the validators of the last full fetch, sent
	// back on the next one.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// TTL is the feed's declared time to live, zero when it declares none.
	TTL time.Duration `json:"ttl,omitempty"`
	// NextFetchAt mirrors the next run of the feed's fetch_feed job while
	// the job is enabled; nil while it is disabled (no subscribers).
	NextFetchAt   *time.Time `json:"next_fetch_at,omitempty"`
	LastFetchedAt *time.Time `json:"last_fetched_at,omitempty"`
	// ConsecutiveFailures counts failed fetches since the last success;
	// LastError is the error of the last failure, cleared by a success.
	ConsecutiveFailures int    `json:"consecutive_failures"`
	LastError           string `json:"last_error,omitempty"`
	// FetchCount counts every fetch, NotModifiedCount the 304 answers among
	// them and FailureCount the failures.
	FetchCount       int64     `json:"fetch_count"`
	NotModifiedCount int64     `json:"not_modified_count"`
	FailureCount     int64     `json:"failure_count"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// validateFeedURL checks that a feed URL is an absolute http or https URL
// within FeedURLMaxLength.
func validateFeedURL(raw string) error {
	if len(raw) > FeedURLMaxLength {
		return fmt.Errorf("feedfetcher: feed URL %.60q… is %d bytes, more than the limit of %d", raw, len(raw), FeedURLMaxLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("feedfetcher: feed URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("feedfetcher: feed URL %q must be an absolute http or https URL", raw)
	}
	return nil
}

const feedColumns = `id, url, title, coalesce(etag, ''), coalesce(last_modified, ''), coalesce(ttl_seconds, 0),
    next_fetch_at, last_fetched_at, consecutive_failures, coalesce(last_error, ''),
    fetch_count, not_modified_count, failure_count, created_at, updated_at`

func scanFeed(row pgx.Row) (*Feed, error) {
	var (
		f   Feed
		ttl int32
	)
	err := row.Scan(&f.ID, &f.URL, &f.Title, &f.ETag, &f.LastModified, &ttl, &f.NextFetchAt, &f.LastFetchedAt,
		&f.ConsecutiveFailures, &f.LastError, &f.FetchCount, &f.NotModifiedCount, &f.FailureCount, &f.CreatedAt, &f.UpdatedAt)
	if err != nil {
		return nil, err
	}
	f.TTL = time.Duration(ttl) * time.Second
	return &f, nil
}

// feedByID returns a feed, or an error matching ErrFeedNotFound.
func feedByID(ctx context.Context, db dbtx, id int64) (*Feed, error) {
	f, err := scanFeed(db.QueryRow(ctx, `SELECT `+feedColumns+` FROM feeds WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %d", ErrFeedNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: reading feed %d: %w", id, err)
	}
	return f, nil
}

// feedByURL returns the feed with the given URL, or an error matching
// ErrFeedNotFound.
func feedByURL(ctx context.Context, db dbtx, rawURL string) (*Feed, error) {
	f, err := scanFeed(db.QueryRow(ctx, `SELECT `+feedColumns+` FROM feeds WHERE url = $1`, rawURL))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrFeedNotFound, rawURL)
	}
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: reading feed %s: %w", rawURL, err)
	}
	return f, nil
}

// listFeeds returns the feeds with the given IDs, or every feed when ids is
// nil, in ID order.
func listFeeds(ctx context.Context, db dbtx, ids []int64) ([]*Feed, error) {
	rows, err := db.Query(ctx, `SELECT `+feedColumns+` FROM feeds WHERE $1::bigint[] IS NULL OR id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing feeds: %w", err)
	}
	feeds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Feed, error) { return scanFeed(row) })
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing feeds: %w", err)
	}
	return feeds, nil
}

// createFeed inserts the feed with the given URL unless it exists, and
// returns it with created telling which happened. Two transactions creating
// the same feed at once get one row: the second waits for the first and
// then finds it.
func createFeed(ctx context.Context, db dbtx, rawURL string) (f *Feed, created bool, err error) {
	f, err = scanFeed(db.QueryRow(ctx, `INSERT INTO feeds (url) VALUES ($1) ON CONFLICT (url) DO NOTHING
RETURNING `+feedColumns, rawURL))
	switch {
	case err == nil:
		return f, true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, false, fmt.Errorf("feedfetcher: creating feed %s: %w", rawURL, err)
	}
	f, err = feedByURL(ctx, db, rawURL)
	return f, false, err
}

// activeSubscribersSQL is true while a feed has a subscriber left.
const activeSubscribersSQL = `EXISTS (SELECT 1 FROM subscriptions s WHERE s.feed_id = $1 AND s.unsubscribed_at IS NULL)`

// hasSubscribers reports whether a feed has an active subscription.
func hasSubscribers(ctx context.Context, db dbtx, feedID int64) (bool, error) {
	var left bool
	err := db.QueryRow(ctx, `SELECT `+activeSubscribersSQL, feedID).Scan(&left)
	return left, err
}

// subscribers returns the IDs of a feed's active subscribers, in order.
func subscribers(ctx context.Context, db dbtx, feedID int64) ([]int64, error) {
	rows, err := db.Query(ctx, `SELECT user_id FROM subscriptions WHERE feed_id = $1 AND unsubscribed_at IS NULL ORDER BY user_id`, feedID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing subscribers of feed %d: %w", feedID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing subscribers of feed %d: %w", feedID, err)
	}
	return ids, nil
}

// recordFetchSuccess stores the outcome of a successful fetch: validators,
// TTL, title, counters, and next_fetch_at mirroring the next run (NULL when
// the feed lost its subscribers meanwhile). It resets the failures.
func recordFetchSuccess(ctx context.Context, db dbtx, feedID int64, res *FetchResult) error {
	if err := lockFeed(ctx, db, feedID); err != nil {
		return err
	}
	notModified := 0
	if res.NotModified {
		notModified = 1
	}
	tag, err := db.Exec(ctx, `
UPDATE feeds SET
    title = CASE WHEN $2 <> '' THEN $2 ELSE title END,
    etag = nullif($3, ''), last_modified = nullif($4, ''), ttl_seconds = nullif($5::integer, 0),
    last_fetched_at = now(), consecutive_failures = 0, last_error = NULL,
    fetch_count = fetch_count + 1, not_modified_count = not_modified_count + $6,
    next_fetch_at = CASE WHEN `+activeSubscribersSQL+` THEN $7::timestamptz END,
    updated_at = now()
WHERE id = $1`, feedID, res.Title, res.ETag, res.LastModified, int32(res.TTL/time.Second), notModified, res.NextFetch)
	if err != nil {
		return fmt.Errorf("feedfetcher: recording the fetch of feed %d: %w", feedID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: id %d", ErrFeedNotFound, feedID)
	}
	return nil
}

// recordFetchFailure counts a failed fetch on the feed, stores its error
// and mirrors the backoff into next_fetch_at: backoff(n) from now after the
// n-th failure in a row. It returns n and the next fetch time (nil when the
// feed has no subscribers left).
func recordFetchFailure(ctx context.Context, db dbtx, feedID int64, fetchErr error, backoff func(int) time.Duration) (int, *time.Time, error) {
	if err := lockFeed(ctx, db, feedID); err != nil {
		return 0, nil, err
	}
	var failures int
	err := db.QueryRow(ctx, `
UPDATE feeds SET consecutive_failures = consecutive_failures + 1, failure_count = failure_count + 1,
    fetch_count = fetch_count + 1, last_error = $2, last_fetched_at = now(), updated_at = now()
WHERE id = $1 RETURNING consecutive_failures`, feedID, clipError(fetchErr)).Scan(&failures)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, fmt.Errorf("%w: id %d", ErrFeedNotFound, feedID)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("feedfetcher: recording the failure of feed %d: %w", feedID, err)
	}
	var next *time.Time
	err = db.QueryRow(ctx, `
UPDATE feeds SET next_fetch_at = CASE WHEN `+activeSubscribersSQL+` THEN braid_now() + $2::bigint * interval '1 microsecond' END
WHERE id = $1 RETURNING next_fetch_at`, feedID, backoff(failures).Microseconds()).Scan(&next)
	if err != nil {
		return 0, nil, fmt.Errorf("feedfetcher: recording the backoff of feed %d: %w", feedID, err)
	}
	return failures, next, nil
}

// lockFeed locks the feed's row in a statement of its own, so that the
// next statement of db (a transaction) reads its subscriptions as they
// stand once the lock is taken: an unsubscribe of its last subscriber that
// held the row meanwhile set next_fetch_at to NULL, which the record of a
// fetch must then not overwrite.
func lockFeed(ctx context.Context, db dbtx, feedID int64) error {
	if _, err := db.Exec(ctx, `SELECT 1 FROM feeds WHERE id = $1 FOR UPDATE`, feedID); err != nil {
		return fmt.Errorf("feedfetcher: locking feed %d: %w", feedID, err)
	}
	return nil
}

// clipError returns an error's text cut to 2000 characters.
func clipError(err error) string {
	s := pgText(err.Error())
	if utf8.RuneCountInString(s) <= 2000 {
		return s
	}
	return string([]rune(s)[:2000]) + "…"
}
