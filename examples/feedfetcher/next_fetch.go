package feedfetcher

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mmcdole/gofeed"
	"github.com/mmcdole/gofeed/rss"
)

// Bounds limit how soon and how late a feed is fetched again.
type Bounds struct {
	// Min is the shortest interval between two fetches of a feed, whatever
	// the feed asks for.
	Min time.Duration
	// Max is the longest interval between two fetches of a feed.
	Max time.Duration
	// Fallback is the interval used when neither the HTTP cache headers nor
	// the feed say how long the feed stays fresh. It is clamped to
	// [Min, Max] like any other interval.
	Fallback time.Duration
}

// Clamp returns d limited to [b.Min, b.Max].
func (b Bounds) Clamp(d time.Duration) time.Duration {
	return min(max(d, b.Min), b.Max)
}

// NextInterval returns how long to wait before fetching a feed again. It
// takes the longer of two hints: how long the response stays fresh by its
// HTTP cache headers ([CacheLifetime]), and the feed's declared time to live
// (ttl, see [FeedTTL]; zero when the feed declares none). With neither hint
// it uses b.Fallback. The result is clamped to [b.Min, b.Max].
//
// Taking the longer hint is the polite choice: a publisher that says "cache
// for an hour" in either place is not asked again sooner.
func NextInterval(h http.Header, now time.Time, ttl time.Duration, b Bounds) time.Duration {
	d, ok := CacheLifetime(h, now)
	switch {
	case ttl > 0 && (!ok || ttl > d):
		d = ttl
	case !ok:
		d = b.Fallback
	}
	return b.Clamp(d)
}

// CacheLifetime returns how long a response with headers h, received at
// now, stays fresh, following RFC 9111: Cache-Control no-store or no-cache
// means not at all, max-age=N means N seconds, and otherwise Expires is taken
// relative to the Date header (or now without one); an Expires that does not
// parse means already stale. The Age header, when present, is subtracted.
// ok is false when the headers say nothing about freshness.
func CacheLifetime(h http.Header, now time.Time) (d time.Duration, ok bool) {
	cc := parseCacheControl(h.Values("Cache-Control"))
	switch {
	case cc.noStore || cc.noCache:
		return 0, true
	case cc.hasMaxAge:
		d = cc.maxAge
	case h.Get("Expires") != "":
		expires, err := http.ParseTime(h.Get("Expires"))
		if err != nil {
			return 0, true
		}
		base := now
		if date, err := http.ParseTime(h.Get("Date")); err == nil {
			base = date
		}
		d = expires.Sub(base)
	default:
		return 0, false
	}
	if age, ok := parseDeltaSeconds(h.Get("Age")); ok {
		d -= age
	}
	return max(d, 0), true
}

// cacheControl holds the Cache-Control directives that matter to a feed
// fetcher.
type cacheControl struct {
	maxAge    time.Duration
	hasMaxAge bool
	noCache   bool
	noStore   bool
}

// parseCacheControl reads Cache-Control header values (RFC 9111 section 5.2).
// Directive names are case-insensitive; a value may be quoted. A max-age
// whose value is not delta-seconds is ignored; when several are valid, the
// first wins.
func parseCacheControl(values []string) cacheControl {
	var cc cacheControl
	for _, v := range values {
		for directive := range strings.SplitSeq(v, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(directive), "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "no-store":
				cc.noStore = true
			case "no-cache":
				cc.noCache = true
			case "max-age":
				if cc.hasMaxAge {
					continue
				}
				arg = strings.TrimSpace(arg)
				if len(arg) >= 2 && arg[0] == '"' && arg[len(arg)-1] == '"' {
					arg = arg[1 : len(arg)-1]
				}
				if d, ok := parseDeltaSeconds(arg); ok {
					cc.maxAge, cc.hasMaxAge = d, true
				}
			}
		}
	}
	return cc
}

// maxDeltaSeconds is the largest delta-seconds value honoured; RFC 9111
// section 1.2.2 says a larger one must be taken as 2^31 seconds.
const maxDeltaSeconds = 1 << 31

// parseDeltaSeconds parses a non-negative decimal number of seconds, as in
// max-age and Age. Values beyond 2^31 are capped there.
func parseDeltaSeconds(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxDeltaSeconds {
		n = maxDeltaSeconds // only overflow can fail here: digits were checked
	}
	return time.Duration(n) * time.Second, true
}

// FeedTTL returns how long a parsed feed declares it may be cached: the RSS
// <ttl> element (minutes), else the syndication module's sy:updatePeriod
// divided by sy:updateFrequency. It returns zero when the feed declares
// neither or declares nonsense. The feed must have been parsed with
// gofeed.Parser.KeepOriginalFeed for <ttl> to be seen.
func FeedTTL(feed *gofeed.Feed) time.Duration {
	if feed == nil {
		return 0
	}
	if rf, ok := feed.OriginalFeed().(*rss.Feed); ok && rf != nil {
		if minutes, err := strconv.Atoi(strings.TrimSpace(rf.TTL)); err == nil && minutes > 0 {
			return time.Duration(min(minutes, int(maxTTL/time.Minute))) * time.Minute
		}
	}
	sy := feed.Extensions["sy"]
	if sy == nil {
		return 0
	}
	var period time.Duration
	if p := sy["updatePeriod"]; len(p) > 0 {
		switch strings.ToLower(strings.TrimSpace(p[0].Value)) {
		case "hourly":
			period = time.Hour
		case "daily":
			period = 24 * time.Hour
		case "weekly":
			period = 7 * 24 * time.Hour
		case "monthly":
			period = 30 * 24 * time.Hour
		case "yearly":
			period = 365 * 24 * time.Hour
		}
	}
	if period == 0 {
		return 0
	}
	frequency := 1
	if f := sy["updateFrequency"]; len(f) > 0 {
		if n, err := strconv.Atoi(strings.TrimSpace(f[0].Value)); err == nil && n > 0 {
			frequency = n
		}
	}
	return period / time.Duration(frequency)
}

// maxTTL caps a declared <ttl>, so that a huge number of minutes cannot
// overflow a time.Duration.
const maxTTL = 365 * 24 * time.Hour
