package scheduler_test

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/scheduler"
)

type FetchFeedArgs struct {
	FeedID string `json:"feed_id"`
}

func (FetchFeedArgs) Kind() string { return "fetch_feed" }

// FetchFeedWorker is the handler of the recurring job: an ordinary River
// worker that chooses its next run.
type FetchFeedWorker struct {
	river.WorkerDefaults[FetchFeedArgs]
}

func (w *FetchFeedWorker) Work(ctx context.Context, job *river.Job[FetchFeedArgs]) error {
	// … fetch the feed; pick the next fetch from its update rate …
	return scheduler.NextRunAt(ctx, time.Now().Add(15*time.Minute))
}

// One fetch_feed recurring job per feed, enabled while the feed has
// subscribers. Subscribing ensures the job in the same transaction;
// unsubscribing disables it atomically when the last subscriber leaves. A
// feed whose job is parked as a dead letter is subscribed to all the same:
// EnsureTx says so with ErrRecurringParked, and the feed is fetched again
// once an operator revives it.
func Example_recurring() {
	ctx := context.Background()
	var pool *pgxpool.Pool // the application's pool
	s, err := scheduler.New(pool, nil)
	if err != nil {
		panic(err)
	}

	subscribe := func(userID int, feedID string) (nextFetch time.Time, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO subscriptions (user_id, feed_id) VALUES ($1, $2)`, userID, feedID); err != nil {
				return err
			}
			nextFetch, err = s.EnsureTx(ctx, tx, "", feedID, FetchFeedArgs{FeedID: feedID}, time.Time{})
			if errors.Is(err, scheduler.ErrRecurringParked) {
				nextFetch = time.Time{} // no fetch until it is revived
				return nil
			}
			return err
		})
		return nextFetch, err
	}
	unsubscribe := func(userID int, feedID string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `DELETE FROM subscriptions WHERE user_id = $1 AND feed_id = $2`, userID, feedID); err != nil {
				return err
			}
			_, err := s.SyncEnabledTx(ctx, tx, "fetch_feed", feedID, func(ctx context.Context, tx pgx.Tx) (bool, error) {
				var left bool
				err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM subscriptions WHERE feed_id = $1)`, feedID).Scan(&left)
				return left, err
			})
			return err
		})
	}
	_, _ = subscribe, unsubscribe
}
