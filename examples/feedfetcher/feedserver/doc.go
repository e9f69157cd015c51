// Package feedserver serves sample RSS 2.0 and Atom feeds on loopback, for
// braid's feed-reader example and its tests. It is a real HTTP server on a
// real port, so a fetcher talks to it exactly as it would to a publisher.
//
// # Feeds
//
// [Start] serves twelve well-behaved feeds, a mix of RSS and Atom with
// generated but readable content, and three that misbehave on purpose:
// [SlugFailing] always answers 500, [SlugMalformed] answers with XML that
// breaks off mid-element, and [SlugSlow] waits [Config.SlowDelay] before it
// answers. [Server.Feeds] lists them all with their URLs.
//
// Most feeds are in English; marche-du-quartier is in French and
// bergwetter in German ([FeedInfo.Language]), article pages included, so
// that a reader that detects the language of what it reads has something
// to tell apart.
//
// Feeds live at /feeds/{slug}; every entry links to an HTML article page at
// /articles/{slug}/{seq}; / is an index page.
//
// # New entries
//
// Each well-behaved feed gains an entry every one to three
// [Config.PublishInterval]s, staggered between feeds. Entries are derived
// from the clock ([Config.Now]) whenever the server is asked about a feed,
// and their text from [Config.Seed], so a test that controls the clock
// controls exactly what is served. [Server.Publish] adds an entry on demand.
//
// # HTTP caching
//
// Every feed document carries an ETag and a Last-Modified header, and a
// request whose If-None-Match or If-Modified-Since matches gets 304 Not
// Modified. Some feeds also send Cache-Control max-age or Expires, and some
// RSS feeds declare a <ttl> or sy:updatePeriod, so a fetcher's scheduling
// has something to read.
//
// # Counting
//
// The server counts the requests it receives per path ([Server.Requests],
// [Server.RequestCounts]), for assertions in tests and for the demo's
// summary.
package feedserver
