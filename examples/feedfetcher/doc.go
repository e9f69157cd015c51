// Package feedfetcher is braid's bundled example: the back end of a feed
// reader. Users subscribe to RSS and Atom feeds; each feed is fetched by its
// own recurring job, and new entries start a digest workflow per subscriber
// that fetches the article pages and, after a digest window, sends the
// digest.
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
