package termtext

import (
	"fmt"
	"strings"
	"unicode"
)

// Cell returns s as one cell of a table: every control character (a tab
// and a line break included), every line or paragraph separator and every
// bidirectional override or isolate escaped in Go's notation (\x1b,
// \u202e), so that text a workflow or a job stored cannot move the
// cursor, repaint the screen, forge a line or a column, or reorder what
// follows it.
func Cell(s string) string { return escape(s, false) }

// Line is Cell for one line of free text: tabs are kept.
func Line(s string) string { return escape(s, true) }

func escape(s string, tabs bool) string {
	if strings.IndexFunc(s, func(r rune) bool { return unsafe(r, tabs) }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unsafe(r, tabs):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// unsafe reports whether r must not reach a terminal as it is.
func unsafe(r rune, tabs bool) bool {
	switch {
	case r == '\t':
		return !tabs
	case unicode.IsControl(r), r == '\u2028', r == '\u2029':
		return true
	case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true // bidirectional embeddings, overrides and isolates
	}
	return false
}
