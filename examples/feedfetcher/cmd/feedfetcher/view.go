package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/braidflow/braid/examples/feedfetcher"
)

// snapshot is what one frame of the view shows.
type snapshot struct {
	elapsed  time.Duration
	duration time.Duration
	now      time.Time
	database string // where the data lives, for the header
	server   string // the feed server's URL
	prefix   string // feed URLs below it are shown as slugs
	stats    *feedfetcher.Stats
	events   []string
	// languages are those the reader wants summaries in.
	languages []string
}

// ANSI sequences of the live view.
const (
	ansiBold    = "\x1b[1m"
	ansiDim     = "\x1b[2m"
	ansiRed     = "\x1b[31m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiReset   = "\x1b[0m"
	ansiClearLn = "\x1b[K"
	ansiClearDn = "\x1b[J"
	ansiHideCur = "\x1b[?25l"
	ansiShowCur = "\x1b[?25h"
)

// liveView redraws a frame in place on a terminal.
type liveView struct {
	w     io.Writer
	width int
	color bool
	lines int // lines of the frame on screen
}

// draw replaces the frame on screen with lines.
func (v *liveView) draw(lines []string) {
	var b strings.Builder
	if v.lines == 0 {
		b.WriteString(ansiHideCur)
	} else {
		fmt.Fprintf(&b, "\x1b[%dF", v.lines) // to the start of the frame
	}
	for _, l := range lines {
		b.WriteString(clipVisible(l, v.width-1))
		b.WriteString(ansiClearLn)
		b.WriteByte('\n')
	}
	b.WriteString(ansiClearDn)
	v.lines = len(lines)
	_, _ = io.WriteString(v.w, b.String())
}

// erase removes the frame and shows the cursor again.
func (v *liveView) erase() {
	if v.lines > 0 {
		fmt.Fprintf(v.w, "\x1b[%dF%s", v.lines, ansiClearDn)
	}
	v.lines = 0
	_, _ = io.WriteString(v.w, ansiShowCur)
}

// paint wraps s in an ANSI style when color is on.
func paint(color bool, style, s string) string {
	if !color || style == "" {
		return s
	}
	return style + s + ansiReset
}

// frame renders the live view.
func frame(s snapshot, color bool) []string {
	st := s.stats
	lines := []string{
		paint(color, ansiBold, fmt.Sprintf("braid feed fetcher · %s of %s", round(s.elapsed), s.duration)) +
			paint(color, ansiDim, fmt.Sprintf(" · %s · feeds served at %s", s.database, s.server)),
		"",
	}
	lines = append(lines, figures(st, color)...)
	lines = append(lines, pipelineFigures(s, color)...)
	lines = append(lines, "")
	lines = append(lines, feedTable(s, color)...)
	lines = append(lines, "", paint(color, ansiBold, "Recent events"))
	for _, e := range s.events {
		style := ""
		switch {
		case strings.Contains(e, " WARN "):
			style = ansiYellow
		case strings.Contains(e, " ERROR "):
			style = ansiRed
		case strings.Contains(e, "digest sent"):
			style = ansiGreen
		case strings.Contains(e, "summary=skipped"):
			style = ansiDim
		}
		lines = append(lines, "  "+paint(color, style, e))
	}
	return lines
}

// figures renders the totals, one line per subject.
func figures(st *feedfetcher.Stats, color bool) []string {
	label := func(s string) string { return paint(color, ansiBold, fmt.Sprintf("%-9s", s)) }
	failing := fmt.Sprintf("%d failing", st.FeedsFailing)
	if st.FeedsFailing > 0 {
		failing = paint(color, ansiYellow, failing)
	}
	twice := fmt.Sprintf("%d sent twice", st.DigestsSentTwice)
	if st.DigestsSentTwice > 0 {
		twice = paint(color, ansiRed, twice)
	}
	return []string{
		fmt.Sprintf("%s %d feeds · %d fetched · %s · %d without subscribers", label("Feeds"),
			st.Feeds, st.FeedsFetched, failing, st.FetchDisabled),
		fmt.Sprintf("%s %d · %d not modified (304) · %d failed", label("Fetches"), st.Fetches, st.NotModified, st.FetchFailures),
		fmt.Sprintf("%s %d new", label("Entries"), st.Entries),
		fmt.Sprintf("%s %d pending · %d running · %d waiting · %d completed · %d failed", label("Workflows"),
			st.Runs["pending"], st.Runs["running"], st.Runs["waiting"], st.Runs["completed"], st.Runs["failed"]),
		fmt.Sprintf("%s %d sent · %d early at a reader's request · %s", label("Digests"), st.DigestsSent, len(st.SentEarly), twice),
		fmt.Sprintf("%s %d renewals", label("WebSub"), st.WebSubRenewals),
	}
}

// pipelineFigures renders the article pipelines: their runs, the nodes
// skipped and why, and the articles indexed.
func pipelineFigures(s snapshot, color bool) []string {
	st := s.stats
	label := func(l string) string { return paint(color, ansiBold, fmt.Sprintf("%-9s", l)) }
	skipped := "no node skipped"
	if len(st.Skipped) > 0 {
		parts := make([]string, len(st.Skipped))
		for i, sk := range st.Skipped {
			parts[i] = fmt.Sprintf("%s %d (%s)", sk.Node, sk.Count, sk.Reason)
		}
		skipped = "skipped: " + strings.Join(parts, ", ")
	}
	return []string{
		fmt.Sprintf("%s %d running · %d completed · %d failed · %s", label("Pipelines"),
			inFlight(st.Pipelines), st.Pipelines["completed"], st.Pipelines["failed"], skipped),
		fmt.Sprintf("%s %d indexed · %d summarized · %s", label("Articles"), st.Articles, st.Summarized, languageCounts(s)),
	}
}

// inFlight counts the runs that have not finished.
func inFlight(runs map[string]int) int { return runs["pending"] + runs["running"] + runs["waiting"] }

// languageCounts describes the indexed articles per language, and the
// languages the reader wants summaries in.
func languageCounts(s snapshot) string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(s.stats.Languages)) {
		parts = append(parts, fmt.Sprintf("%s %d", code, s.stats.Languages[code].Articles))
	}
	if len(parts) == 0 {
		parts = []string{"none yet"}
	}
	return fmt.Sprintf("%s (summaries wanted in %s)", strings.Join(parts, ", "), strings.Join(s.languages, ", "))
}

// feedTable renders the table of feeds.
func feedTable(s snapshot, color bool) []string {
	header := []string{"FEED", "SUBS", "FETCHES", "304", "FAILED", "STREAK", "ENTRIES", "INDEXED", "LANG", "DIGESTS", "NEXT FETCH", "JOB", "LAST ERROR"}
	rightAligned := []bool{false, true, true, true, true, true, true, true, false, true, false, false, false}
	rows := [][]string{header}
	for _, f := range s.stats.PerFeed {
		rows = append(rows, []string{
			slug(f.URL, s.prefix), fmt.Sprint(f.Subscribers), fmt.Sprint(f.FetchCount), fmt.Sprint(f.NotModifiedCount),
			fmt.Sprint(f.FailureCount), fmt.Sprint(f.ConsecutiveFailures), fmt.Sprint(f.Entries), fmt.Sprint(f.Articles),
			cmp.Or(f.Language, "-"), fmt.Sprint(f.Digests),
			nextFetch(f.NextFetchAt, s.now), jobState(f), shortError(f.LastError, s.prefix, 48),
		})
	}
	out := table(rows, rightAligned)
	for i := range out {
		switch {
		case i == 0:
			out[i] = paint(color, ansiBold, out[i])
		case s.stats.PerFeed[i-1].ConsecutiveFailures > 0:
			out[i] = paint(color, ansiYellow, out[i])
		case !s.stats.PerFeed[i-1].FetchEnabled:
			out[i] = paint(color, ansiDim, out[i])
		}
	}
	return out
}

// table lays rows out in columns two spaces apart, right-aligning the
// columns marked so, and trims the trailing blanks.
func table(rows [][]string, rightAligned []bool) []string {
	widths := make([]int, len(rightAligned))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	out := make([]string, len(rows))
	for r, row := range rows {
		var b strings.Builder
		for i, cell := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if rightAligned[i] {
				b.WriteString(pad + cell)
			} else {
				b.WriteString(cell + pad)
			}
		}
		out[r] = strings.TrimRight(b.String(), " ")
	}
	return out
}

// slug returns a feed's slug when its URL is below prefix.
func slug(url, prefix string) string {
	if s, ok := strings.CutPrefix(url, prefix+"/feeds/"); ok {
		return s
	}
	return url
}

// nextFetch describes when a feed is fetched next.
func nextFetch(at *time.Time, now time.Time) string {
	switch {
	case at == nil:
		return "-"
	case at.Sub(now) < time.Second:
		return "due"
	default:
		return "in " + round(at.Sub(now)).String()
	}
}

// jobState describes a feed's fetch_feed job.
func jobState(f *feedfetcher.FeedStats) string {
	switch {
	case f.FetchDead:
		return "dead"
	case f.FetchEnabled:
		return "enabled"
	default:
		return "disabled"
	}
}

// shortError cuts a fetch error to its cause, at most limit characters.
func shortError(s, prefix string, limit int) string {
	if s == "" {
		return "-"
	}
	if i := strings.Index(s, prefix+"/feeds/"); i >= 0 {
		if j := strings.Index(s[i:], ": "); j >= 0 {
			s = s[i+j+2:]
		}
	}
	s = strings.TrimPrefix(s, "unexpected HTTP status: ")
	if utf8.RuneCountInString(s) > limit {
		s = string([]rune(s)[:limit-1]) + "…"
	}
	return s
}

// round rounds a duration to whole seconds (tenths below ten seconds).
func round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// clipVisible cuts a line with ANSI sequences to width visible characters.
func clipVisible(s string, width int) string {
	if width <= 0 {
		return s
	}
	var b strings.Builder
	visible, inEscape, clipped := 0, false, false
	for _, r := range s {
		switch {
		case inEscape:
			b.WriteRune(r)
			inEscape = !(r >= '@' && r <= '~' && r != '[')
		case r == '\x1b':
			b.WriteRune(r)
			inEscape = true
		case visible < width:
			b.WriteRune(r)
			visible++
		default:
			clipped = true
		}
	}
	if clipped {
		b.WriteString(ansiReset)
	}
	return b.String()
}

// statusLine is the periodic line written when stdout is not a terminal.
func statusLine(s snapshot) string {
	st := s.stats
	skipped := 0
	for _, sk := range st.Skipped {
		skipped += sk.Count
	}
	return fmt.Sprintf("[%s] feeds %d/%d fetched, %d failing · fetches %d (304: %d, failed: %d) · entries %d · "+
		"workflows %d running, %d waiting, %d completed, %d failed · digests sent %d (early: %d, twice: %d) · renewals %d · "+
		"pipelines %d running, %d completed, %d failed, %d nodes skipped · articles %d (%d summarized)",
		round(s.elapsed), st.FeedsFetched, st.Feeds, st.FeedsFailing, st.Fetches, st.NotModified, st.FetchFailures,
		st.Entries, st.Runs["running"]+st.Runs["pending"], st.Runs["waiting"], st.Runs["completed"], st.Runs["failed"],
		st.DigestsSent, len(st.SentEarly), st.DigestsSentTwice, st.WebSubRenewals,
		inFlight(st.Pipelines), st.Pipelines["completed"], st.Pipelines["failed"], skipped, st.Articles, st.Summarized)
}

// summary writes the closing summary: the table of feeds and what the run
// showed.
func summary(w io.Writer, s snapshot, notes []string) {
	st := s.stats
	fmt.Fprintf(w, "\nSummary after %s (%s)\n\n", round(s.elapsed), s.database)
	for _, l := range feedTable(s, false) {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintln(w)
	var backingOff []string
	for _, f := range st.PerFeed {
		if f.ConsecutiveFailures > 0 {
			backingOff = append(backingOff, fmt.Sprintf("%s (%d consecutive failures, %s)",
				slug(f.URL, s.prefix), f.ConsecutiveFailures, shortError(f.LastError, s.prefix, 40)))
		}
	}
	if len(backingOff) == 0 {
		backingOff = []string{"none"}
	}
	twice := "none sent twice"
	if st.DigestsSentTwice > 0 {
		twice = fmt.Sprintf("%d runs SENT TWICE", st.DigestsSentTwice)
	}
	rows := [][2]string{
		{"feeds fetched", fmt.Sprintf("%d of %d (%d fetches: %d not modified, %d failed)", st.FeedsFetched, st.Feeds,
			st.Fetches, st.NotModified, st.FetchFailures)},
		{"new entries", fmt.Sprint(st.Entries)},
		{"digest workflows", fmt.Sprintf("%d completed, %d waiting, %d running, %d failed", st.Runs["completed"],
			st.Runs["waiting"], st.Runs["running"]+st.Runs["pending"], st.Runs["failed"])},
		{"digests sent", fmt.Sprintf("%d, %s, %d early at a reader's request", st.DigestsSent, twice, len(st.SentEarly))},
	}
	rows = append(rows, sentEarly(s)...)
	rows = append(rows, [][2]string{
		{"backing off", strings.Join(backingOff, "; ")},
		{"websub renewals", fmt.Sprint(st.WebSubRenewals)},
		{"article pipelines", fmt.Sprintf("%d completed, %d running, %d failed (fetch → extract → language → summary? → index, one per new entry)",
			st.Pipelines["completed"], inFlight(st.Pipelines), st.Pipelines["failed"])},
	}...)
	if len(st.Skipped) == 0 {
		rows = append(rows, [2]string{"skipped nodes", "none"})
	}
	for _, sk := range st.Skipped {
		rows = append(rows, [2]string{"skipped nodes", fmt.Sprintf("%s %d: %s", sk.Node, sk.Count, sk.Reason)})
	}
	articles := fmt.Sprintf("%d, %d with a summary", st.Articles, st.Summarized)
	for _, code := range slices.Sorted(maps.Keys(st.Languages)) {
		l := st.Languages[code]
		articles += fmt.Sprintf("; %s %d (%d summarized)", code, l.Articles, l.Summarized)
	}
	rows = append(rows, [2]string{"articles indexed", articles},
		[2]string{"summaries wanted", strings.Join(s.languages, ", ")})
	for _, n := range notes {
		rows = append(rows, [2]string{"subscriptions", n})
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-17s %s\n", r[0], r[1])
	}
}

// sentEarlyShown caps the summary's lines of digests sent early.
const sentEarlyShown = 5

// sentEarly renders the summary's lines of the digests sent before their
// windows passed, at a reader's request.
func sentEarly(s snapshot) [][2]string {
	early := s.stats.SentEarly
	if len(early) == 0 {
		return [][2]string{{"sent early", "none"}}
	}
	feeds := map[int64]string{}
	for _, f := range s.stats.PerFeed {
		feeds[f.ID] = slug(f.URL, s.prefix)
	}
	var rows [][2]string
	for i, e := range early {
		if i == sentEarlyShown {
			rows = append(rows, [2]string{"sent early", fmt.Sprintf("… and %d more", len(early)-i)})
			break
		}
		rows = append(rows, [2]string{"sent early", fmt.Sprintf("digest for %s (%s) sent early at the reader's request (by %s), %s before its window",
			e.User, cmp.Or(feeds[e.FeedID], fmt.Sprintf("feed %d", e.FeedID)), e.RequestedBy, round(e.Ahead))})
	}
	return rows
}
