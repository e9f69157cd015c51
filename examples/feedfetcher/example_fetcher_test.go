package feedfetcher_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/braidflow/braid/examples/feedfetcher"
	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
)

// Fetch a feed, fetch it again with the stored validators (304), and see a
// new entry once the publisher adds one.
func ExampleFetcher_Fetch() {
	ctx := context.Background()
	frozen := func() time.Time { return time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC) }
	srv, err := feedserver.Start(ctx, feedserver.Config{
		Now:    frozen, // entries appear only through Publish
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	fetcher, err := feedfetcher.NewFetcher(feedfetcher.FetcherConfig{
		MinInterval: 2 * time.Second,
		MaxInterval: 10 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer fetcher.CloseIdleConnections()

	url := srv.FeedURL("cycling-dispatch")
	res, err := fetcher.Fetch(ctx, feedfetcher.FetchRequest{URL: url})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d %q: %d entries, next fetch in %s\n", res.Status, res.Title, len(res.Entries), res.Interval)
	for _, e := range res.Entries {
		fmt.Printf("  %s %s\n", e.Published.Format(time.DateTime), e.Title)
	}

	// The caller stores the validators and sends them back.
	req := feedfetcher.FetchRequest{URL: url, ETag: res.ETag, LastModified: res.LastModified, TTL: res.TTL}
	again, err := fetcher.Fetch(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d not modified: %t\n", again.Status, again.NotModified)

	if _, err := srv.Publish("cycling-dispatch"); err != nil {
		log.Fatal(err)
	}
	third, err := fetcher.Fetch(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d: newest is %q\n", third.Status, third.Entries[0].Title)
	// Output:
	// 200 "Cycling Dispatch": 3 entries, next fetch in 5s
	//   2025-03-14 08:59:50 Chain wear, measured and explained
	//   2025-03-14 08:59:40 A gravel loop through the river valley
	//   2025-03-14 08:59:30 Commuting by bike in the rain
	// 304 not modified: true
	// 200: newest is "Winter training without a trainer"
}
