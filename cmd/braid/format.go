package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// quiet is the logger handed to the packages the CLI drives, so that their
// operational logs do not mix with its output.
var quiet = slog.New(slog.DiscardHandler)

// clipDefault is how many characters of an error or payload a table shows;
// --json shows everything.
const clipDefault = 80

// clip puts s on one line and cuts it to at most n characters.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// firstLine returns the first line of s, cut to at most n characters, and
// says so when there is more: a table shows the start of an error, and
// `runs show` prints the whole of it below the table.
func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	line, rest, more := strings.Cut(s, "\n")
	line = clip(line, n)
	if more && strings.TrimSpace(rest) != "" && !strings.HasSuffix(line, "…") {
		line += " …"
	}
	return line
}

// orDash returns s, or "-" when it is empty, so that table cells are never
// blank.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// between formats the time from one optional instant to another, or "-"
// when either is missing.
func between(from, to *time.Time) string {
	if from == nil || to == nil {
		return "-"
	}
	return humanDuration(to.Sub(*from))
}

// humanDuration rounds d for people: milliseconds under ten seconds, seconds
// above.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// at formats a time for tables.
func at(t time.Time) string { return ts(&t) }

// yesNo formats a boolean for tables.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// wantArgs checks the positional arguments of a subcommand against the names it
// expects, and reports the first missing or unexpected one.
func wantArgs(rest []string, names ...string) error {
	if len(rest) < len(names) {
		return usagef("missing argument %s", names[len(rest)])
	}
	if len(rest) > len(names) {
		return usagef("unexpected argument %q", rest[len(names)])
	}
	return nil
}

// limitFlag checks a --limit value against the range the packages accept.
func limitFlag(n, max int) error {
	if n < 1 || n > max {
		return usagef("--limit %d is out of range; it must be 1 to %d", n, max)
	}
	return nil
}

// optBool is a boolean flag that may be left unset: nil means "either".
// Written alone (--enabled) it means true.
type optBool struct{ v *bool }

func (o *optBool) String() string {
	if o == nil || o.v == nil {
		return ""
	}
	return strconv.FormatBool(*o.v)
}

func (o *optBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean; use true or false", s)
	}
	o.v = &b
	return nil
}

func (o *optBool) IsBoolFlag() bool { return true }
