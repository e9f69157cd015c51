package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// eventLog is the slog handler of the demo. It turns records into one-line
// events: kept, the latest few, for the live view on a terminal, or written
// at once otherwise.
type eventLog struct {
	level slog.Leveler
	attrs []slog.Attr // from WithAttrs, in order
	sink  *eventSink
}

// eventSink is shared by a handler and the handlers derived from it.
type eventSink struct {
	mu     sync.Mutex
	keep   int       // events kept for the live view; 0 writes them to out
	out    io.Writer // where events go when none are kept
	recent []string
	users  map[int64]string // user IDs to names, for readable events
	prefix string           // the feed server's URL, cut from feed URLs
}

// newEventLog returns the event log: it keeps the latest keep events when
// keep > 0, and otherwise writes every event to out.
func newEventLog(out io.Writer, keep int) *eventSink {
	return &eventSink{keep: keep, out: out, users: map[int64]string{}}
}

// handler returns a handler that records events at level and above.
func (s *eventSink) handler(level slog.Leveler) slog.Handler {
	return &eventLog{level: level, sink: s}
}

// nameUser makes events show the user's name instead of the ID.
func (s *eventSink) nameUser(id int64, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[id] = name
}

// setFeedPrefix makes events show feed URLs below prefix as their slug.
func (s *eventSink) setFeedPrefix(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prefix = prefix
}

// latest returns the events kept, oldest first.
func (s *eventSink) latest() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recent)
}

// add records one event line.
func (s *eventSink) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keep == 0 {
		fmt.Fprintln(s.out, line)
		return
	}
	s.recent = append(s.recent, line)
	if len(s.recent) > s.keep {
		s.recent = slices.Delete(s.recent, 0, len(s.recent)-s.keep)
	}
}

func (h *eventLog) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *eventLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &eventLog{level: h.level, attrs: append(slices.Clip(h.attrs), attrs...), sink: h.sink}
}

// WithGroup flattens groups: the events are short lines, not structured
// data.
func (h *eventLog) WithGroup(string) slog.Handler { return h }

// shown lists the attributes an event line shows, in order; others are
// left out to keep the lines short.
var shown = []string{"user", "user_id", "feed", "entries", "subject", "requested_by", "language", "summary", "consecutive_failures",
	"backoff", "renewed", "retired", "kind", "error"}

func (h *eventLog) Handle(_ context.Context, r slog.Record) error {
	values := map[string]slog.Value{}
	collect := func(a slog.Attr) bool {
		values[a.Key] = a.Value.Resolve()
		return true
	}
	for _, a := range h.attrs {
		collect(a)
	}
	r.Attrs(collect)

	h.sink.mu.Lock()
	prefix, users := h.sink.prefix, h.sink.users
	var b strings.Builder
	b.WriteString(r.Time.Format(time.TimeOnly))
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString(" ERROR ")
	case r.Level >= slog.LevelWarn:
		b.WriteString(" WARN  ")
	default:
		b.WriteString("       ")
	}
	b.WriteString(r.Message)
	for _, key := range shown {
		v, ok := values[key]
		if !ok {
			continue
		}
		s := v.String()
		switch key {
		case "user_id":
			if name, ok := users[v.Int64()]; ok {
				key, s = "user", name
			}
		case "feed":
			s = strings.TrimPrefix(s, prefix+"/feeds/")
		case "error":
			// The fetcher's errors start with the URL, which the feed
			// already names.
			if i := strings.Index(s, prefix+"/feeds/"); i >= 0 {
				if j := strings.Index(s[i:], ": "); j >= 0 {
					s = s[i+j+2:]
				}
			}
		}
		fmt.Fprintf(&b, " %s=%s", key, s)
	}
	h.sink.mu.Unlock()
	h.sink.add(b.String())
	return nil
}
