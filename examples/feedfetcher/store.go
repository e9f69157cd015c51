package feedfetcher

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
