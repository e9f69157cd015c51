package queue

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSanitizeErrorText(t *testing.T) {
	t.Parallel()
	if got := SanitizeErrorText("plain", 0); got != "plain" {
		t.Fatalf("plain text changed: %q", got)
	}
	if got := SanitizeErrorText("a\x00b\x00", 0); got != "ab" {
		t.Fatalf("NUL bytes not removed: %q", got)
	}
	if got := SanitizeErrorText("bad \xff utf8", 0); got != "bad \uFFFD utf8" {
		t.Fatalf("invalid UTF-8 not replaced: %q", got)
	}
	long := strings.Repeat("é", 1000) // 2,000 bytes
	got := SanitizeErrorText(long, 500)
	if len(got) > 500 {
		t.Fatalf("cut text is %d bytes, over the limit of 500", len(got))
	}
	if !utf8.ValidString(got) {
		t.Fatalf("cut text is not valid UTF-8: %q", got)
	}
	if !strings.Contains(got, "bytes cut; the limit is 500]") {
		t.Fatalf("cut text does not say it was cut: %q", got)
	}
	if got := SanitizeErrorText(strings.Repeat("x", MaxErrorBytesDefault+1), 0); len(got) > MaxErrorBytesDefault {
		t.Fatalf("default limit not applied: %d bytes", len(got))
	}
}

func FuzzSanitizeErrorText(f *testing.F) {
	f.Add("boom", 10)
	f.Add("a\x00b", 2)
	f.Add("\xff\xfe", 1)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit = limit%5000 + 1
		if limit < 1 {
			limit = -limit + 1
		}
		got := SanitizeErrorText(s, limit)
		if strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("NUL byte left in %q", got)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 left in %q", got)
		}
		if len(s) > limit && len(got) > max(limit, len(got)-len(s)) && len(got) > limit {
			// A marker longer than a tiny limit may exceed it; the text
			// itself is then empty.
			if !strings.HasPrefix(got, "…") {
				t.Fatalf("text of %d bytes over limit %d: %q", len(got), limit, got)
			}
		}
	})
}
