package feedfetcher_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/braidflow/braid/examples/feedfetcher"
	"github.com/braidflow/braid/testutil"
)

// Subscribe and unsubscribe drive a feed's fetch_feed job: created with the
// first subscriber, disabled when the last one leaves, enabled again when
// someone comes back.
func ExampleApp_Subscribe() {
	ctx := context.Background()
	db, err := testutil.Open(ctx) // a fresh database with braid's schema
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := feedfetcher.Migrate(ctx, db.Pool); err != nil {
		log.Fatal(err)
	}
	app, err := feedfetcher.New(db.Pool, &feedfetcher.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	alice, err := app.EnsureUser(ctx, "alice", "alice@example.org")
	if err != nil {
		log.Fatal(err)
	}
	const url = "https://example.org/feed.xml"

	sub, err := app.Subscribe(ctx, alice.ID, url)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("subscribed: new feed %t, fetching %t\n", sub.NewFeed, sub.FetchEnabled)

	left, err := app.Unsubscribe(ctx, alice.ID, sub.FeedID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("unsubscribed: fetching %t, next fetch %v\n", left.FetchEnabled, left.NextFetchAt)

	back, err := app.Subscribe(ctx, alice.ID, url)
	if err != nil {
		log.Fatal(err)
	}
	job, err := app.Scheduler().GetRecurring(ctx, feedfetcher.FetchFeedKind, fmt.Sprint(back.FeedID))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("back: new feed %t, fetching %t, same next run %t\n", back.NewFeed, job.Enabled, back.NextFetchAt.Equal(job.NextRunAt))
	// Output:
	// subscribed: new feed true, fetching true
	// unsubscribed: fetching false, next fetch <nil>
	// back: new feed false, fetching true, same next run true
}
