package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// number returns the integer that re's first group captures in s, or -1.
func number(re *regexp.Regexp, s string) int {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return n
}

// TestRunTwice runs the demo twice on one database, with short timings and
// output that is not a terminal, and checks what each summary shows.
func TestRunTwice(t *testing.T) {
	url := testutil.URL(t)
	for i := range 2 {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		err := run(ctx, options{
			duration:     5 * time.Second,
			databaseURL:  url,
			fetchMin:     300 * time.Millisecond,
			fetchMax:     time.Second,
			digestWindow: time.Second,
			publishEvery: time.Second,
			renewEvery:   "@every 1s",
			slowDelay:    200 * time.Millisecond,
			languages:    []string{"en", "de"},
			dashboard:    "127.0.0.1:0",
			out:          &out,
		})
		cancel()
		slog.SetDefault(slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i+1, err, out.String())
		}
		got := out.String()
		if !regexp.MustCompile(`Dashboard: http://127\.0\.0\.1:\d+/  \(log in with the token [0-9a-f]{32};`).MatchString(got) {
			t.Errorf("run %d did not print the dashboard's URL and token:\n%s", i+1, got)
		}
		if !strings.Contains(got, "Running for 5s: 3 readers, 12 feeds; an article pipeline per new entry, with summaries in en, de.") {
			t.Errorf("run %d did not say what it runs:\n%s", i+1, got)
		}
		_, summary, ok := strings.Cut(got, "\nSummary after ")
		if !ok {
			t.Fatalf("run %d printed no summary:\n%s", i+1, got)
		}
		checks := []struct {
			what string
			re   string
			min  int
		}{
			{"feeds fetched", `feeds fetched\s+(\d+) of 12`, 12},
			{"new entries", `new entries\s+(\d+)`, 30},
			{"digest workflows completed", `digest workflows\s+(\d+) completed`, 1},
			{"digests sent", `digests sent\s+(\d+), none sent twice`, 1},
			{"failures of always-failing", `always-failing \((\d+) consecutive failures`, 2},
			{"failures of malformed", `malformed \((\d+) consecutive failures`, 2},
			{"websub renewals", `websub renewals\s+(\d+)`, 1},
			{"article pipelines completed", `article pipelines\s+(\d+) completed`, 20},
			// The French feed's entries: its first fetch alone finds three.
			{"summary nodes skipped", `skipped nodes\s+summary (\d+): condition false: language\.code in input\.languages`, 3},
			{"French articles indexed without a summary", `; fr (\d+) \(0 summarized\)`, 3},
			{"German articles summarized", `; de \d+ \((\d+) summarized\)`, 3},
		}
		for _, c := range checks {
			if n := number(regexp.MustCompile(c.re), summary); n < c.min {
				t.Errorf("run %d: %s = %d, want at least %d; summary:\n%s", i+1, c.what, n, c.min, summary)
			}
		}
		// bob asks for his digests once one has waited half its window.
		early := regexp.MustCompile(`sent early\s+digest for bob \([a-z-]+\) sent early at the reader's request \(by bob\), [0-9.]+m?s before its window`)
		if !early.MatchString(summary) || number(regexp.MustCompile(`digests sent\s+\d+, none sent twice, (\d+) early at a reader's request`), summary) < 1 {
			t.Errorf("run %d: the summary shows no digest of bob's sent early:\n%s", i+1, summary)
		}
		for _, want := range []string{
			"summaries wanted  en, de",
			"carol left small-garden, its last reader: fetch_feed disabled",
			"carol left cycling-dispatch; others still read it",
			"carol came back to small-garden: the same job enabled again",
		} {
			if !strings.Contains(summary, want) {
				t.Errorf("run %d: the summary lacks %q:\n%s", i+1, want, summary)
			}
		}
		if i == 1 && !strings.Contains(got, "unsubscribed from the feeds of a previous run") {
			t.Errorf("the second run did not retire the first run's subscriptions:\n%s", got)
		}
	}
}

func TestClipVisible(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in    string
		width int
		want  string
	}{
		{"hello", 10, "hello"},
		{"hello world", 5, "hello" + ansiReset},
		{ansiBold + "héllo" + ansiReset, 3, ansiBold + "hél" + ansiReset + ansiReset},
		{"\x1b[2Fab", 1, "\x1b[2Fa" + ansiReset},
		{"anything", 0, "anything"},
	} {
		if got := clipVisible(tt.in, tt.width); got != tt.want {
			t.Errorf("clipVisible(%q, %d) = %q, want %q", tt.in, tt.width, got, tt.want)
		}
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	got := table([][]string{{"FEED", "N", "JOB"}, {"night-sky", "12", "enabled"}, {"slow", "3", "-"}}, []bool{false, true, false})
	want := []string{
		"FEED        N  JOB",
		"night-sky  12  enabled",
		"slow        3  -",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("table =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEventLog(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	sink := newEventLog(&out, 0)
	sink.setFeedPrefix("http://127.0.0.1:9")
	sink.nameUser(7, "carol")
	log := slog.New(sink.handler(slog.LevelInfo))
	log.Debug("not shown")
	log.Info("unsubscribed", slog.Int64("user_id", 7), slog.String("feed", "http://127.0.0.1:9/feeds/small-garden"), slog.Int64("feed_id", 3))
	log.With(slog.String("kind", "fetch_feed")).Warn("fetch failed", slog.String("error",
		"feedfetcher: fetch http://127.0.0.1:9/feeds/always-failing: unexpected HTTP status: 500"))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 ||
		!strings.HasSuffix(lines[0], "       unsubscribed user=carol feed=small-garden") ||
		!strings.HasSuffix(lines[1], " WARN  fetch failed kind=fetch_feed error=unexpected HTTP status: 500") {
		t.Errorf("events:\n%s", out.String())
	}

	kept := newEventLog(&out, 2)
	log = slog.New(kept.handler(slog.LevelInfo))
	for _, m := range []string{"one", "two", "three"} {
		log.Info(m)
	}
	if got := kept.latest(); len(got) != 2 || !strings.HasSuffix(got[0], "two") || !strings.HasSuffix(got[1], "three") {
		t.Errorf("kept events %q, want the last two", got)
	}
}
