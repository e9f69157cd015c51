package feedfetcher

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// fetchOnce subscribes a user to url and runs the fetch_feed worker once,
// outside the scheduler: it returns the app, the feed and Work's error,
// but for the one the success path gives outside a recurring job.
func fetchOnce(t *testing.T, url string) (*App, int64, error) {
	t.Helper()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	app := newApp(t, pool, testConfig(nil))
	u := user(t, app, "alice")
	sub, err := app.Subscribe(ctx, u.ID, url)
	if err != nil {
		t.Fatal(err)
	}
	w := &fetchFeedWorker{app: app}
	job := &river.Job[FetchFeedArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: FetchFeedKind}, Args: FetchFeedArgs{FeedID: sub.FeedID}}
	werr := w.Work(ctx, job)
	if werr != nil && strings.Contains(werr.Error(), "not running a recurring job") {
		werr = nil
	}
	return app, sub.FeedID, werr
}

// incompressible returns n hexadecimal digits that do not repeat, which
// PostgreSQL cannot compress into an index entry.
func incompressible(n int) string {
	var b strings.Builder
	sum := sha256.Sum256(nil)
	for b.Len() < n {
		sum = sha256.Sum256(sum[:])
		b.WriteString(hex.EncodeToString(sum[:]))
	}
	return b.String()[:n]
}

// rawServer answers every request with the raw HTTP response resp, which
// net/http's server would not write (bytes that are not UTF-8 in a header
// or the status line).
func rawServer(t *testing.T, resp string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if l, err := r.ReadString('\n'); err != nil || l == "\r\n" {
						break
					}
				}
				_, _ = c.Write([]byte(resp))
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/feed"
}

// A feed, or its server, may send text that PostgreSQL cannot store: a NUL
// (a JSON Feed's "\u0000"), bytes that are not UTF-8 in a header or the
// status line, a GUID longer than an index entry holds. The fetch stores
// what it can (the text cleaned, the long key hashed), and a fetch that
// still fails to be stored is recorded on the feed as a failed fetch.
func TestFetchOfTextPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	jsonFeed := func(title, item string) string {
		return `{"version":"https://jsonfeed.org/version/1.1","title":"` + title + `",
"items":[{"id":"1","title":"` + item + `","url":"https://example.org/1"},{"id":"2","title":"good","url":"https://example.org/2"}]}`
	}
	serve := func(t *testing.T, ctype, body string) string {
		s := startHandler(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			_, _ = w.Write([]byte(body))
		})
		return s.URL + "/feed"
	}
	body := jsonFeed("T", "good too")
	for _, c := range []struct {
		name    string
		url     func(t *testing.T) string
		fetched bool // the fetch succeeds, its entries stored
	}{
		{"a NUL in an item's title", func(t *testing.T) string {
			return serve(t, "application/feed+json", jsonFeed("T", `bad\u0000title`))
		}, true},
		{"a NUL in the feed's title", func(t *testing.T) string {
			return serve(t, "application/feed+json", jsonFeed(`T\u0000`, "x"))
		}, true},
		{"a GUID longer than an index entry", func(t *testing.T) string {
			return serve(t, "application/rss+xml", `<?xml version="1.0"?><rss version="2.0"><channel><title>T</title>
<item><title>x</title><guid isPermaLink="false">`+incompressible(8000)+`</guid></item></channel></rss>`)
		}, true},
		{"an ETag that is not UTF-8", func(t *testing.T) string {
			return rawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/feed+json\r\nETag: \"\xff\xfe\"\r\nContent-Length: "+
				strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body)
		}, true},
		{"a status line that is not UTF-8", func(t *testing.T) string {
			return rawServer(t, "HTTP/1.1 500 \xff\xfe Broken\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			app, feedID, werr := fetchOnce(t, c.url(t))
			f, err := app.Feed(context.Background(), feedID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.fetched && (werr != nil || f.FetchCount != 1 || f.ConsecutiveFailures != 0):
				t.Errorf("Work = %v; feed fetched %d times, %d failures in a row; want one fetch, stored", werr, f.FetchCount, f.ConsecutiveFailures)
			case !c.fetched && (werr == nil || f.ConsecutiveFailures != 1 || f.LastError == ""):
				t.Errorf("Work = %v; feed: %d failures in a row, last error %q; want the failure recorded", werr, f.ConsecutiveFailures, f.LastError)
			}
		})
	}
}

// The last subscriber leaves while the feed's fetch records its success:
// the job ends disabled, and the feed's next fetch, which mirrors it, ends
// NULL, rather than a time the fetch read before the unsubscribe committed.
func TestUnsubscribeDuringAFetchLeavesNoNextFetch(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	app := newApp(t, pool, &Config{Logger: quietLogger()})
	u := user(t, app, "alice")
	sub, err := app.Subscribe(ctx, u.ID, "https://example.org/feed.xml")
	if err != nil {
		t.Fatal(err)
	}
	unsub, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unsub.Rollback(ctx) }()
	if s, err := app.UnsubscribeTx(ctx, unsub, u.ID, sub.FeedID); err != nil || s.FetchEnabled {
		t.Fatalf("UnsubscribeTx = %+v, %v", s, err)
	}
	// The fetch records its success meanwhile, and waits for the feed's row.
	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return recordFetchSuccess(ctx, tx, sub.FeedID, &FetchResult{Status: 200, NextFetch: time.Now().Add(time.Hour)})
		})
	}()
	eventually(t, 10*time.Second, "the fetch to wait for the feed's row", func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
		return n > 0
	})
	if err := unsub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if job := fetchJob(t, app, sub.FeedID); job.Enabled {
		t.Fatalf("the feed's job is enabled after its last subscriber left")
	}
	if m := mirror(t, pool, sub.FeedID); m != nil {
		t.Errorf("the feed's job is disabled, but its next fetch is %v; want NULL", m)
	}
}
