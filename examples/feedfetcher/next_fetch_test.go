package feedfetcher

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mmcdole/gofeed"
)

func TestNextInterval(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	demo := Bounds{Min: 2 * time.Second, Max: 10 * time.Second, Fallback: time.Hour}
	real := Bounds{Min: 15 * time.Minute, Max: 24 * time.Hour, Fallback: time.Hour}
	wide := Bounds{Min: time.Second, Max: 48 * time.Hour, Fallback: time.Hour}

	tests := []struct {
		name   string
		header map[string]string
		ttl    time.Duration
		bounds Bounds
		want   time.Duration
	}{
		{"no hints: fallback", nil, 0, wide, time.Hour},
		{"no hints: fallback clamped to max", nil, 0, demo, 10 * time.Second},
		{"no hints: fallback clamped to min", nil, 0, Bounds{Min: 2 * time.Hour, Max: 3 * time.Hour, Fallback: time.Hour}, 2 * time.Hour},
		{"max-age", map[string]string{"Cache-Control": "max-age=300"}, 0, wide, 5 * time.Minute},
		{"max-age among directives", map[string]string{"Cache-Control": "public, MAX-AGE=120, must-revalidate"}, 0, wide, 2 * time.Minute},
		{"quoted max-age", map[string]string{"Cache-Control": `max-age="90"`}, 0, wide, 90 * time.Second},
		{"max-age below min", map[string]string{"Cache-Control": "max-age=60"}, 0, real, 15 * time.Minute},
		{"max-age above max", map[string]string{"Cache-Control": "max-age=31536000"}, 0, real, 24 * time.Hour},
		{"max-age less Age", map[string]string{"Cache-Control": "max-age=600", "Age": "100"}, 0, wide, 500 * time.Second},
		{"Age beyond max-age", map[string]string{"Cache-Control": "max-age=60", "Age": "600"}, 0, demo, 2 * time.Second},
		{"max-age=0", map[string]string{"Cache-Control": "max-age=0"}, 0, demo, 2 * time.Second},
		{"no-cache", map[string]string{"Cache-Control": "no-cache, max-age=3600"}, 0, wide, time.Second},
		{"no-store", map[string]string{"Cache-Control": "no-store"}, 0, real, 15 * time.Minute},
		{"bad max-age falls through to Expires", map[string]string{"Cache-Control": "max-age=soon", "Expires": at(time.Hour)}, 0, wide, time.Hour},
		{"max-age wins over Expires", map[string]string{"Cache-Control": "max-age=60", "Expires": at(time.Hour)}, 0, wide, time.Minute},
		{"Expires without Date", map[string]string{"Expires": at(2 * time.Hour)}, 0, wide, 2 * time.Hour},
		{"Expires against Date", map[string]string{"Expires": at(2 * time.Hour), "Date": at(time.Hour)}, 0, wide, time.Hour},
		{"Expires in the past", map[string]string{"Expires": at(-time.Hour)}, 0, demo, 2 * time.Second},
		{"Expires unparseable means stale", map[string]string{"Expires": "0"}, time.Minute, wide, time.Minute},
		{"TTL only", nil, 30 * time.Minute, wide, 30 * time.Minute},
		{"TTL clamped", nil, 30 * time.Minute, demo, 10 * time.Second},
		{"TTL longer than max-age", map[string]string{"Cache-Control": "max-age=60"}, 30 * time.Minute, wide, 30 * time.Minute},
		{"max-age longer than TTL", map[string]string{"Cache-Control": "max-age=7200"}, 30 * time.Minute, wide, 2 * time.Hour},
		{"TTL over no-cache", map[string]string{"Cache-Control": "no-cache"}, 20 * time.Minute, wide, 20 * time.Minute},
		{"huge max-age capped", map[string]string{"Cache-Control": "max-age=99999999999999999999999"}, 0, Bounds{Min: 0, Max: 1 << 62}, maxDeltaSeconds * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := NextInterval(h, now, tt.ttl, tt.bounds); got != tt.want {
				t.Errorf("NextInterval(%v, ttl %s, %+v) = %s, want %s", tt.header, tt.ttl, tt.bounds, got, tt.want)
			}
		})
	}
}

func TestCacheLifetimeMultipleHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{"Cache-Control": {"public", "max-age=42", "max-age=99"}}
	if d, ok := CacheLifetime(h, time.Now()); !ok || d != 42*time.Second {
		t.Errorf("CacheLifetime = %s, %t; want 42s, true (first valid max-age)", d, ok)
	}
	h = http.Header{"Cache-Control": {"public, must-revalidate"}}
	if d, ok := CacheLifetime(h, time.Now()); ok {
		t.Errorf("CacheLifetime without freshness = %s, true; want false", d)
	}
}

func TestFeedTTL(t *testing.T) {
	t.Parallel()
	rss := func(channel string) string {
		return `<?xml version="1.0"?><rss version="2.0" xmlns:sy="http://purl.org/rss/1.0/modules/syndication/"><channel><title>T</title>` +
			channel + `<item><title>x</title><link>http://example.org/x</link></item></channel></rss>`
	}
	tests := []struct {
		name, doc string
		want      time.Duration
	}{
		{"ttl", rss("<ttl>30</ttl>"), 30 * time.Minute},
		{"ttl with spaces", rss("<ttl> 45 </ttl>"), 45 * time.Minute},
		{"ttl zero", rss("<ttl>0</ttl>"), 0},
		{"ttl negative", rss("<ttl>-5</ttl>"), 0},
		{"ttl not a number", rss("<ttl>soon</ttl>"), 0},
		{"ttl huge", rss("<ttl>999999999999999</ttl>"), 365 * 24 * time.Hour},
		{"ttl wins over sy", rss("<ttl>10</ttl><sy:updatePeriod>daily</sy:updatePeriod>"), 10 * time.Minute},
		{"sy daily", rss("<sy:updatePeriod>daily</sy:updatePeriod>"), 24 * time.Hour},
		{"sy hourly, twice", rss("<sy:updatePeriod>hourly</sy:updatePeriod><sy:updateFrequency>2</sy:updateFrequency>"), 30 * time.Minute},
		{"sy weekly, bad frequency", rss("<sy:updatePeriod>Weekly</sy:updatePeriod><sy:updateFrequency>0</sy:updateFrequency>"), 7 * 24 * time.Hour},
		{"sy unknown period", rss("<sy:updatePeriod>fortnightly</sy:updatePeriod>"), 0},
		{"nothing", rss(""), 0},
		{"atom", `<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>T</title><id>x</id></feed>`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := gofeed.NewParser()
			p.KeepOriginalFeed = true
			feed, err := p.ParseString(tt.doc)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if got := FeedTTL(feed); got != tt.want {
				t.Errorf("FeedTTL = %s, want %s", got, tt.want)
			}
		})
	}
	if got := FeedTTL(nil); got != 0 {
		t.Errorf("FeedTTL(nil) = %s, want 0", got)
	}
}

// FuzzParseCacheControl checks that any Cache-Control value parses without
// panicking into a max-age within [0, 2^31 s], and that a value holding a
// single well-formed max-age gives exactly that number.
func FuzzParseCacheControl(f *testing.F) {
	for _, seed := range []string{
		"max-age=60", "public, max-age=0", `max-age="120"`, "no-cache", "no-store, max-age=5",
		"MAX-AGE = 7", "max-age=", "max-age=-1", "max-age=1e3", "max-age=99999999999999999999", ",,=,", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		cc := parseCacheControl([]string{v})
		if cc.maxAge < 0 || cc.maxAge > maxDeltaSeconds*time.Second {
			t.Fatalf("parseCacheControl(%q).maxAge = %s, out of range", v, cc.maxAge)
		}
		if !cc.hasMaxAge && cc.maxAge != 0 {
			t.Fatalf("parseCacheControl(%q) = %+v: a max-age without hasMaxAge", v, cc)
		}
		if n, err := strconv.ParseUint(v, 10, 31); err == nil {
			got := parseCacheControl([]string{"public, max-age=" + v})
			if !got.hasMaxAge || got.maxAge != time.Duration(n)*time.Second {
				t.Fatalf("max-age=%s parsed as %+v", v, got)
			}
		}
	})
}

// FuzzCacheLifetime checks that any combination of freshness headers gives a
// lifetime that is never negative.
func FuzzCacheLifetime(f *testing.F) {
	f.Add("max-age=60", "", "", "")
	f.Add("", "Fri, 14 Mar 2025 13:00:00 GMT", "Fri, 14 Mar 2025 12:00:00 GMT", "30")
	f.Add("no-cache", "0", "garbage", "-1")
	f.Add("max-age=10", "", "", "99999999999999999999")
	f.Fuzz(func(t *testing.T, cacheControl, expires, date, age string) {
		h := http.Header{}
		for k, v := range map[string]string{"Cache-Control": cacheControl, "Expires": expires, "Date": date, "Age": age} {
			if v != "" && !strings.ContainsAny(v, "\r\n") {
				h.Set(k, v)
			}
		}
		d, ok := CacheLifetime(h, time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC))
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("CacheLifetime(%v) = %s, %t", h, d, ok)
		}
	})
}
