package feedfetcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
)

// WebSubSubscription is a subscription at a feed's WebSub hub, which
// pushes new entries instead of waiting to be polled. A hub grants a lease;
// the subscription lapses at ExpiresAt unless renewed before.
type WebSubSubscription struct {
	ID        int64         `json:"id"`
	FeedID    int64         `json:"feed_id"`
	HubURL    string        `json:"hub_url"`
	Lease     time.Duration `json:"lease"`
	ExpiresAt time.Time     `json:"expires_at"`
	RenewedAt *time.Time    `json:"renewed_at,omitempty"`
	CreatedAt time.Time     `json:"created_at"`
}

// WebSubLeaseMax is the longest WebSub lease stored, in whole seconds.
const WebSubLeaseMax = math.MaxInt32 * time.Second

// WebSubRenewal records one renewal of a WebSub subscription.
type WebSubRenewal struct {
	ID                int64     `json:"id"`
	SubscriptionID    int64     `json:"subscription_id"`
	FeedID            int64     `json:"feed_id"`
	PreviousExpiresAt time.Time `json:"previous_expires_at"`
	ExpiresAt         time.Time `json:"expires_at"`
	RenewedAt         time.Time `json:"renewed_at"`
}

// RenewWebSubArgs are the args of the renew_websub job that the
// renew_websub schedule inserts. It has none: one job renews every
// subscription that expires soon.
type RenewWebSubArgs struct{}

// Kind returns RenewWebSubKind.
func (RenewWebSubArgs) Kind() string { return RenewWebSubKind }

// renewWebSubWorker handles the renew_websub job.
type renewWebSubWorker struct {
	river.WorkerDefaults[RenewWebSubArgs]
	app *App
}

// Work renews the subscriptions that expire within
// Config.WebSubRenewWithin.
func (w *renewWebSubWorker) Work(ctx context.Context, _ *river.Job[RenewWebSubArgs]) error {
	_, err := w.app.RenewWebSub(ctx)
	return err
}

// RegisterWebSub records a subscription at hubURL for a feed, granted for
// lease from now; a feed has at most one, so registering again replaces
// the hub and the lease. No request is sent: the example has no hub.
func (a *App) RegisterWebSub(ctx context.Context, feedID int64, hubURL string, lease time.Duration) (*WebSubSubscription, error) {
	return registerWebSub(ctx, a.pool, feedID, hubURL, lease)
}

// RegisterWebSubTx is RegisterWebSub inside tx.
func (a *App) RegisterWebSubTx(ctx context.Context, tx pgx.Tx, feedID int64, hubURL string, lease time.Duration) (*WebSubSubscription, error) {
	return registerWebSub(ctx, tx, feedID, hubURL, lease)
}

func registerWebSub(ctx context.Context, db dbtx, feedID int64, hubURL string, lease time.Duration) (*WebSubSubscription, error) {
	if err := validateFeedURL(hubURL); err != nil {
		return nil, fmt.Errorf("feedfetcher: WebSub hub: %w", err)
	}
	if lease < time.Second || lease > WebSubLeaseMax {
		return nil, fmt.Errorf("feedfetcher: WebSub lease %s must be between 1s and %s", lease, WebSubLeaseMax)
	}
	var (
		s       WebSubSubscription
		seconds int32
	)
	err := db.QueryRow(ctx, `
INSERT INTO websub_subscriptions (feed_id, hub_url, lease_seconds, expires_at)
VALUES ($1, $2, $3::integer, now() + $3::integer * interval '1 second')
ON CONFLICT (feed_id) DO UPDATE SET hub_url = excluded.hub_url, lease_seconds = excluded.lease_seconds,
    expires_at = excluded.expires_at
RETURNING id, feed_id, hub_url, lease_seconds, expires_at, renewed_at, created_at`,
		feedID, hubURL, int32(lease/time.Second)).Scan(&s.ID, &s.FeedID, &s.HubURL, &seconds, &s.ExpiresAt, &s.RenewedAt, &s.CreatedAt)
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23503" { // foreign_key_violation
			return nil, fmt.Errorf("%w: id %d", ErrFeedNotFound, feedID)
		}
		return nil, fmt.Errorf("feedfetcher: registering WebSub for feed %d: %w", feedID, err)
	}
	s.Lease = time.Duration(seconds) * time.Second
	return &s, nil
}

// RenewWebSub renews every WebSub subscription that expires within
// Config.WebSubRenewWithin, for Config.WebSubLease from now, and records
// each renewal, in one transaction. It returns the renewals. The
// renew_websub schedule calls it; there is no real hub to ask.
func (a *App) RenewWebSub(ctx context.Context) ([]WebSubRenewal, error) {
	var renewals []WebSubRenewal
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
WITH due AS (
    SELECT id, expires_at FROM websub_subscriptions
    WHERE expires_at < now() + $1::bigint * interval '1 microsecond'
    ORDER BY id FOR UPDATE
), renewed AS (
    UPDATE websub_subscriptions w
    SET expires_at = now() + $2::bigint * interval '1 microsecond', lease_seconds = $3, renewed_at = now()
    FROM due WHERE w.id = due.id
    RETURNING w.id, w.feed_id, due.expires_at AS previous, w.expires_at
)
INSERT INTO websub_renewals (subscription_id, previous_expires_at, expires_at)
SELECT id, previous, expires_at FROM renewed
RETURNING id, subscription_id, (SELECT feed_id FROM renewed WHERE renewed.id = subscription_id),
    previous_expires_at, expires_at, renewed_at`,
			a.cfg.WebSubRenewWithin.Microseconds(), a.cfg.WebSubLease.Microseconds(), int32(a.cfg.WebSubLease/time.Second))
		if err != nil {
			return err
		}
		renewals, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (WebSubRenewal, error) {
			var r WebSubRenewal
			err := row.Scan(&r.ID, &r.SubscriptionID, &r.FeedID, &r.PreviousExpiresAt, &r.ExpiresAt, &r.RenewedAt)
			return r, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: renewing WebSub subscriptions: %w", err)
	}
	a.logger.InfoContext(ctx, "WebSub subscriptions renewed", slog.Int("renewed", len(renewals)),
		slog.Duration("lease", a.cfg.WebSubLease))
	return renewals, nil
}
