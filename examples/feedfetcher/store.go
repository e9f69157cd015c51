package feedfetcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Limits on what the feed reader stores.
const (
	// UserNameMaxLength is the longest user name, in characters.
	UserNameMaxLength = 100
	// FeedURLMaxLength is the longest feed URL, in bytes.
	FeedURLMaxLength = 2048
)

// Sentinel errors. Check them with errors.Is.
var (
	// ErrUserNotFound is returned for a user ID that does not exist.
	ErrUserNotFound = errors.New("feedfetcher: user not found")
	// ErrFeedNotFound is returned for a feed ID or URL that does not exist.
	ErrFeedNotFound = errors.New("feedfetcher: feed not found")
	// ErrNotSubscribed is returned when unsubscribing a user who has no
	// active subscription to the feed.
	ErrNotSubscribed = errors.New("feedfetcher: not subscribed")
)

// dbtx is what the store functions need of a pool or a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// User is a reader who subscribes to feeds.
type User struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Email     string    `json:"email,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

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

// StoredEntry is an entry as stored: the fetched [Entry] with its row ID,
// feed and deduplication key.
type StoredEntry struct {
	Entry
	ID        int64     `json:"id"`
	FeedID    int64     `json:"feed_id"`
	Key       string    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}

// Digest is a digest that was sent: one row per idempotency key.
type Digest struct {
	ID             int64     `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	RunID          string    `json:"run_id"`
	UserID         int64     `json:"user_id"`
	FeedID         int64     `json:"feed_id"`
	EntryIDs       []int64   `json:"entry_ids"`
	Subject        string    `json:"subject"`
	Body           string    `json:"body"`
	SentAt         time.Time `json:"sent_at"`
}

// validateUserName checks a user name against the table's limits.
func validateUserName(name string) error {
	if n := utf8.RuneCountInString(name); strings.TrimSpace(name) == "" || n > UserNameMaxLength || !utf8.ValidString(name) {
		return fmt.Errorf("feedfetcher: user name %q must be 1 to %d characters of UTF-8, not blank", name, UserNameMaxLength)
	}
	return nil
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

// ensureUser creates the user named name, or returns the existing one
// (updating its email when a non-empty one is given).
func ensureUser(ctx context.Context, db dbtx, name, email string) (*User, error) {
	if err := validateUserName(name); err != nil {
		return nil, err
	}
	var u User
	err := db.QueryRow(ctx, `
INSERT INTO users (name, email) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET email = CASE WHEN excluded.email <> '' THEN excluded.email ELSE users.email END
RETURNING id, name, email, created_at`, name, email).Scan(&u.ID, &u.Name, &u.Email, &u.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: ensuring user %q: %w", name, err)
	}
	return &u, nil
}

// userName returns the name of a user.
func userName(ctx context.Context, db dbtx, userID int64) (string, error) {
	var name string
	err := db.QueryRow(ctx, `SELECT name FROM users WHERE id = $1`, userID).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w: id %d", ErrUserNotFound, userID)
	}
	return name, err
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
UPDATE feeds SET next_fetch_at = CASE WHEN `+activeSubscribersSQL+` THEN now() + $2::bigint * interval '1 microsecond' END
WHERE id = $1 RETURNING next_fetch_at`, feedID, backoff(failures).Microseconds()).Scan(&next)
	if err != nil {
		return 0, nil, fmt.Errorf("feedfetcher: recording the backoff of feed %d: %w", feedID, err)
	}
	return failures, next, nil
}

// clipError returns an error's text cut to 2000 characters.
func clipError(err error) string {
	s := err.Error()
	if utf8.RuneCountInString(s) <= 2000 {
		return s
	}
	return string([]rune(s)[:2000]) + "…"
}

// insertEntries stores a feed's entries, skipping those whose key the feed
// already has, and returns the new ones, oldest first. Entries are given in
// document order, newest first as feeds list them, and stored in reverse,
// so that IDs grow with publication.
func insertEntries(ctx context.Context, db dbtx, feedID int64, entries []Entry) ([]StoredEntry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	n := len(entries)
	keys, guids, links := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	titles, summaries := make([]string, 0, n), make([]string, 0, n)
	published := make([]pgtype.Timestamptz, 0, n)
	for _, e := range slices.Backward(entries) {
		keys, guids, links = append(keys, e.Key()), append(guids, e.GUID), append(links, e.Link)
		titles, summaries = append(titles, e.Title), append(summaries, e.Summary)
		published = append(published, pgtype.Timestamptz{Time: e.Published, Valid: !e.Published.IsZero()})
	}
	rows, err := db.Query(ctx, `
INSERT INTO entries (feed_id, key, guid, link, title, summary, published_at)
SELECT $1, e.key, e.guid, e.link, e.title, e.summary, e.published_at
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
    WITH ORDINALITY AS e(key, guid, link, title, summary, published_at, n)
ORDER BY e.n
ON CONFLICT (feed_id, key) DO NOTHING
RETURNING id, feed_id, key, guid, link, title, summary, published_at, created_at`,
		feedID, keys, guids, links, titles, summaries, published)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: storing entries of feed %d: %w", feedID, err)
	}
	stored, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: storing entries of feed %d: %w", feedID, err)
	}
	slices.SortFunc(stored, func(a, b StoredEntry) int { return cmp.Compare(a.ID, b.ID) })
	return stored, nil
}

func scanEntry(row pgx.CollectableRow) (StoredEntry, error) {
	var (
		e         StoredEntry
		published *time.Time
	)
	err := row.Scan(&e.ID, &e.FeedID, &e.Key, &e.GUID, &e.Link, &e.Title, &e.Summary, &published, &e.CreatedAt)
	if published != nil {
		e.Published = published.UTC()
	}
	return e, err
}

// listEntries returns a feed's stored entries, oldest first.
func listEntries(ctx context.Context, db dbtx, feedID int64) ([]StoredEntry, error) {
	rows, err := db.Query(ctx, `SELECT id, feed_id, key, guid, link, title, summary, published_at, created_at
FROM entries WHERE feed_id = $1 ORDER BY id`, feedID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing entries of feed %d: %w", feedID, err)
	}
	entries, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing entries of feed %d: %w", feedID, err)
	}
	return entries, nil
}

const digestColumns = `id, idempotency_key, run_id, user_id, feed_id, entry_ids, subject, body, sent_at`

func scanDigest(row pgx.Row) (*Digest, error) {
	var d Digest
	if err := row.Scan(&d.ID, &d.IdempotencyKey, &d.RunID, &d.UserID, &d.FeedID, &d.EntryIDs, &d.Subject, &d.Body, &d.SentAt); err != nil {
		return nil, err
	}
	return &d, nil
}

// insertDigest records a digest as sent, once per idempotency key. When a
// digest with the key was already sent it returns that one and false.
func insertDigest(ctx context.Context, db dbtx, d *Digest) (*Digest, bool, error) {
	if d.IdempotencyKey == "" {
		return nil, false, errors.New("feedfetcher: a digest needs an idempotency key")
	}
	if d.EntryIDs == nil {
		d.EntryIDs = []int64{}
	}
	got, err := scanDigest(db.QueryRow(ctx, `
INSERT INTO digests (idempotency_key, run_id, user_id, feed_id, entry_ids, subject, body)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING `+digestColumns, d.IdempotencyKey, d.RunID, d.UserID, d.FeedID, d.EntryIDs, d.Subject, d.Body))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("feedfetcher: recording digest %s: %w", d.IdempotencyKey, err)
	}
	got, err = scanDigest(db.QueryRow(ctx, `SELECT `+digestColumns+` FROM digests WHERE idempotency_key = $1`, d.IdempotencyKey))
	if err != nil {
		return nil, false, fmt.Errorf("feedfetcher: reading digest %s: %w", d.IdempotencyKey, err)
	}
	return got, false, nil
}

// listDigests returns the digests sent to a user, oldest first.
func listDigests(ctx context.Context, db dbtx, userID int64) ([]*Digest, error) {
	rows, err := db.Query(ctx, `SELECT `+digestColumns+` FROM digests WHERE user_id = $1 ORDER BY id`, userID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing digests of user %d: %w", userID, err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Digest, error) { return scanDigest(row) })
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing digests of user %d: %w", userID, err)
	}
	return ds, nil
}
