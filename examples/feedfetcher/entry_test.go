package feedfetcher

import (
	"strings"
	"testing"
	"time"
)

func TestEntryKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		e    Entry
		want string
	}{
		{"GUID wins", Entry{GUID: "tag:x,2025:1", Link: "https://example.org/1"}, "tag:x,2025:1"},
		{"GUID trimmed", Entry{GUID: "  g1\n"}, "g1"},
		{"link without GUID", Entry{Link: "https://example.org/1"}, "https://example.org/1"},
		{"blank GUID falls back to link", Entry{GUID: "  ", Link: "https://example.org/2"}, "https://example.org/2"},
	}
	for _, tt := range tests {
		if got := tt.e.Key(); got != tt.want {
			t.Errorf("%s: Key() = %q, want %q", tt.name, got, tt.want)
		}
	}

	// Without GUID or link, the key is a stable hash of title and time.
	a := Entry{Title: "Bare", Published: at}
	b := Entry{Title: " Bare ", Published: at.In(time.FixedZone("CET", 3600)), Summary: "other summary"}
	c := Entry{Title: "Bare", Published: at.Add(time.Second)}
	if !strings.HasPrefix(a.Key(), "sha256:") || a.Key() != b.Key() || a.Key() == c.Key() {
		t.Errorf("hash keys: a %q, b %q (want equal to a), c %q (want different)", a.Key(), b.Key(), c.Key())
	}
	if (Entry{}).Key() == a.Key() {
		t.Error("an empty entry has the same key as a titled one")
	}
}
