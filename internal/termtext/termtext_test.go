package termtext

import "testing"

func TestCellAndLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, cell, line string }{
		{"plain text, ünïcode ✓", "plain text, ünïcode ✓", "plain text, ünïcode ✓"},
		{"boom\x1b[2J\x1b[1;1H\rok", `boom\x1b[2J\x1b[1;1H\x0dok`, `boom\x1b[2J\x1b[1;1H\x0dok`},
		{"a\tb", `a\x09b`, "a\tb"},
		{"one\ntwo", `one\x0atwo`, `one\x0atwo`},
		{"abc\u202edef", `abc\u202edef`, `abc\u202edef`},
		{"x\u2066y\u2069\u2028", `x\u2066y\u2069\u2028`, `x\u2066y\u2069\u2028`},
		{"del\x7f c1\u0085", `del\x7f c1\u0085`, `del\x7f c1\u0085`},
	} {
		if got := Cell(c.in); got != c.cell {
			t.Errorf("Cell(%q) = %q; want %q", c.in, got, c.cell)
		}
		if got := Line(c.in); got != c.line {
			t.Errorf("Line(%q) = %q; want %q", c.in, got, c.line)
		}
	}
}

func FuzzCell(f *testing.F) {
	for _, s := range []string{"", "a\x1bb", "\u202e", "\t\n\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{Cell(s), Line(s)} {
			for _, r := range out {
				if unsafe(r, true) {
					t.Fatalf("escaped %q to %q, which holds %U", s, out, r)
				}
			}
		}
		if c := Cell(s); containsRune(c, '\t') {
			t.Fatalf("Cell(%q) = %q keeps a tab", s, c)
		}
	})
}

func containsRune(s string, r rune) bool {
	for _, c := range s {
		if c == r {
			return true
		}
	}
	return false
}
