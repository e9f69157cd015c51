package feedfetcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/scheduler"
)

// Subscription is a user's subscription to a feed. Unsubscribing keeps the
// row and sets UnsubscribedAt; subscribing again adds a new row.
type Subscription struct {
	ID             int64      `json:"id"`
	UserID         int64      `json:"user_id"`
	FeedID         int64      `json:"feed_id"`
	FeedURL        string     `json:"feed_url"`
	SubscribedAt   time.Time  `json:"subscribed_at"`
	UnsubscribedAt *time.Time `json:"unsubscribed_at,omitempty"`

	// NewFeed is true when subscribing created the feed and its fetch_feed
	// recurring job.
	NewFeed bool `json:"new_feed,omitempty"`
	// AlreadySubscribed is true when Subscribe found the user subscribed
	// already and returned that subscription.
	AlreadySubscribed bool `json:"already_subscribed,omitempty"`
	// FetchEnabled is whether the feed's fetch_feed job is enabled after the
	// call: always after Subscribe, and after Unsubscribe only while other
	// subscribers are left.
	FetchEnabled bool `json:"fetch_enabled"`
	// FetchParked is true when Subscribe found the feed's fetch_feed job
	// parked as a dead letter (it failed too often): the feed is not
	// fetched until an operator revives the job.
	FetchParked bool `json:"fetch_parked,omitempty"`
	// NextFetchAt is the feed's next fetch as mirrored into
	// feeds.next_fetch_at: the job's next_run_at, or nil once the job is
	// disabled or while it is parked.
	NextFetchAt *time.Time `json:"next_fetch_at,omitempty"`
}

// feedKey is the entity key of a feed's fetch_feed recurring job.
func feedKey(feedID int64) string { return strconv.FormatInt(feedID, 10) }

// EnsureUser creates the user named name, or returns the existing one. A
// non-empty email replaces the stored one.
func (a *App) EnsureUser(ctx context.Context, name, email string) (*User, error) {
	return ensureUser(ctx, a.pool, name, email)
}

// EnsureUserTx is EnsureUser inside tx.
func (a *App) EnsureUserTx(ctx context.Context, tx pgx.Tx, name, email string) (*User, error) {
	return ensureUser(ctx, tx, name, email)
}

// Subscribe subscribes a user to the feed at feedURL, in one transaction:
//
//   - a feed seen for the first time is created together with its
//     fetch_feed recurring job, due at once;
//   - for a feed that exists, its job is enabled again (it may have been
//     disabled when its last subscriber left) and keeps its next_run_at;
//     a job parked as a dead letter stays parked (FetchParked), and no
//     next fetch is mirrored until it is revived;
//
// either way next_run_at is mirrored into feeds.next_fetch_at and the
// subscription is added. Subscribing twice returns the active subscription
// with AlreadySubscribed set.
func (a *App) Subscribe(ctx context.Context, userID int64, feedURL string) (*Subscription, error) {
	var sub *Subscription
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		sub, err = a.SubscribeTx(ctx, tx, userID, feedURL)
		return err
	})
	if err != nil {
		return nil, err
	}
	a.logSubscribed(ctx, sub)
	return sub, nil
}

// SubscribeTx is Subscribe inside tx: the feed, its job and the
// subscription exist only if tx commits.
func (a *App) SubscribeTx(ctx context.Context, tx pgx.Tx, userID int64, feedURL string) (*Subscription, error) {
	if err := validateFeedURL(feedURL); err != nil {
		return nil, err
	}
	if _, err := userName(ctx, tx, userID); err != nil {
		return nil, err
	}
	feed, created, err := createFeed(ctx, tx, feedURL)
	if err != nil {
		return nil, err
	}
	// The subscription's row comes before the job's, the order
	// UnsubscribeTx takes them in: the other order deadlocks a subscribe
	// with an unsubscribe of the same user and feed, which holds the
	// subscription while it waits for the job.
	sub := &Subscription{UserID: userID, FeedID: feed.ID, FeedURL: feed.URL, NewFeed: created, FetchEnabled: true}
	if err := insertSubscription(ctx, tx, sub); err != nil {
		return nil, err
	}
	// EnsureTx creates the job of a new feed, due now, and enables the job
	// of an existing one, keeping its next_run_at. A job parked as a dead
	// letter stays parked, and its next_run_at does not come: the mirror
	// shows no next fetch.
	next, err := a.sched.EnsureTx(ctx, tx, "", feedKey(feed.ID), FetchFeedArgs{FeedID: feed.ID}, time.Time{})
	switch {
	case errors.Is(err, scheduler.ErrRecurringParked):
		sub.FetchParked = true
	case err != nil:
		return nil, fmt.Errorf("feedfetcher: ensuring the %s job of feed %d: %w", FetchFeedKind, feed.ID, err)
	default:
		sub.NextFetchAt = &next
	}
	if _, err := tx.Exec(ctx, `UPDATE feeds SET next_fetch_at = $2, updated_at = now() WHERE id = $1`, feed.ID, sub.NextFetchAt); err != nil {
		return nil, fmt.Errorf("feedfetcher: mirroring the next fetch of feed %d: %w", feed.ID, err)
	}
	return sub, nil
}

// insertSubscription adds sub's user's subscription to its feed, or finds
// the active one and sets AlreadySubscribed. An active subscription that a
// concurrent unsubscribe ends between the insert, which it made do
// nothing, and the read, which then finds none, is no longer in the way:
// the insert is tried again.
func insertSubscription(ctx context.Context, tx pgx.Tx, sub *Subscription) error {
	const attempts = 3
	for range attempts {
		err := tx.QueryRow(ctx, `
INSERT INTO subscriptions (user_id, feed_id) VALUES ($1, $2)
ON CONFLICT (user_id, feed_id) WHERE unsubscribed_at IS NULL DO NOTHING
RETURNING id, subscribed_at`, sub.UserID, sub.FeedID).Scan(&sub.ID, &sub.SubscribedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `SELECT id, subscribed_at FROM subscriptions
WHERE user_id = $1 AND feed_id = $2 AND unsubscribed_at IS NULL`, sub.UserID, sub.FeedID).Scan(&sub.ID, &sub.SubscribedAt)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // ended meanwhile
			}
			sub.AlreadySubscribed = err == nil
		}
		if err != nil {
			return fmt.Errorf("feedfetcher: subscribing user %d to feed %d: %w", sub.UserID, sub.FeedID, err)
		}
		return nil
	}
	return fmt.Errorf("feedfetcher: subscribing user %d to feed %d: its active subscription kept changing under %d attempts", sub.UserID, sub.FeedID, attempts)
}

// Unsubscribe ends a user's subscription to a feed, in one transaction: the
// subscription is soft-deleted (unsubscribed_at is set), then the feed's
// fetch_feed job is enabled exactly when an active subscription is left
// (an EXISTS over subscriptions, decided under the job's row lock so that a
// concurrent Subscribe is never lost), and when the job ends up disabled
// feeds.next_fetch_at is cleared. The job keeps its next_run_at, so a later
// Subscribe resumes it. It returns an error matching ErrNotSubscribed when
// the user has no active subscription to the feed.
func (a *App) Unsubscribe(ctx context.Context, userID, feedID int64) (*Subscription, error) {
	var sub *Subscription
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		sub, err = a.UnsubscribeTx(ctx, tx, userID, feedID)
		return err
	})
	if err != nil {
		return nil, err
	}
	a.logUnsubscribed(ctx, sub)
	return sub, nil
}

// UnsubscribeTx is Unsubscribe inside tx.
func (a *App) UnsubscribeTx(ctx context.Context, tx pgx.Tx, userID, feedID int64) (*Subscription, error) {
	sub := &Subscription{UserID: userID, FeedID: feedID}
	err := tx.QueryRow(ctx, `
UPDATE subscriptions s SET unsubscribed_at = now()
FROM feeds f
WHERE s.user_id = $1 AND s.feed_id = $2 AND s.unsubscribed_at IS NULL AND f.id = s.feed_id
RETURNING s.id, s.subscribed_at, s.unsubscribed_at, f.url`, userID, feedID).Scan(&sub.ID, &sub.SubscribedAt, &sub.UnsubscribedAt, &sub.FeedURL)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: user %d has no active subscription to feed %d", ErrNotSubscribed, userID, feedID)
	}
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: unsubscribing user %d from feed %d: %w", userID, feedID, err)
	}
	job, err := a.sched.SyncEnabledTx(ctx, tx, FetchFeedKind, feedKey(feedID), func(ctx context.Context, tx pgx.Tx) (bool, error) {
		return hasSubscribers(ctx, tx, feedID)
	})
	switch {
	case errors.Is(err, scheduler.ErrRecurringNotFound):
		// No job to disable: the feed is not fetched either way.
	case err != nil:
		return nil, fmt.Errorf("feedfetcher: syncing the %s job of feed %d: %w", FetchFeedKind, feedID, err)
	default:
		sub.FetchEnabled = job.Enabled
		if job.Enabled {
			sub.NextFetchAt = &job.NextRunAt
		}
	}
	if !sub.FetchEnabled {
		if _, err := tx.Exec(ctx, `UPDATE feeds SET next_fetch_at = NULL, updated_at = now() WHERE id = $1`, feedID); err != nil {
			return nil, fmt.Errorf("feedfetcher: clearing the next fetch of feed %d: %w", feedID, err)
		}
	}
	return sub, nil
}

// Subscriptions returns a user's active subscriptions, in feed order.
func (a *App) Subscriptions(ctx context.Context, userID int64) ([]*Subscription, error) {
	rows, err := a.pool.Query(ctx, `
SELECT s.id, s.user_id, s.feed_id, f.url, s.subscribed_at, f.next_fetch_at
FROM subscriptions s JOIN feeds f ON f.id = s.feed_id
WHERE s.user_id = $1 AND s.unsubscribed_at IS NULL ORDER BY s.feed_id`, userID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing subscriptions of user %d: %w", userID, err)
	}
	subs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Subscription, error) {
		s := &Subscription{FetchEnabled: true}
		err := row.Scan(&s.ID, &s.UserID, &s.FeedID, &s.FeedURL, &s.SubscribedAt, &s.NextFetchAt)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing subscriptions of user %d: %w", userID, err)
	}
	return subs, nil
}

func (a *App) logSubscribed(ctx context.Context, sub *Subscription) {
	what := "subscribed to an existing feed; its fetch_feed job is enabled"
	switch {
	case sub.AlreadySubscribed:
		what = "already subscribed"
	case sub.NewFeed:
		what = "subscribed to a new feed; its fetch_feed job is created"
	}
	attrs := []any{slog.Int64("user_id", sub.UserID), slog.Int64("feed_id", sub.FeedID), slog.String("feed", sub.FeedURL)}
	if sub.FetchParked {
		a.logger.WarnContext(ctx, what+", but it is parked as a dead letter: the feed is not fetched until it is revived", attrs...)
		return
	}
	a.logger.InfoContext(ctx, what, append(attrs, slog.Time("next_fetch_at", *sub.NextFetchAt))...)
}

func (a *App) logUnsubscribed(ctx context.Context, sub *Subscription) {
	what := "unsubscribed; other subscribers are left, the fetch_feed job stays enabled"
	if !sub.FetchEnabled {
		what = "unsubscribed; the last subscriber left, the fetch_feed job is disabled"
	}
	a.logger.InfoContext(ctx, what, slog.Int64("user_id", sub.UserID), slog.Int64("feed_id", sub.FeedID),
		slog.String("feed", sub.FeedURL))
}
