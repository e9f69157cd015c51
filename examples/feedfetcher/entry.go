package feedfetcher

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// Entry is one item of a feed: an RSS <item> or an Atom <entry>.
type Entry struct {
	// GUID is the entry's identifier: the RSS <guid> or the Atom <id>. It
	// may be empty, since RSS makes <guid> optional.
	GUID string `json:"guid,omitempty"`
	// Link is the absolute URL of the entry's page.
	Link string `json:"link,omitempty"`
	// Title is the entry's title as plain text.
	Title string `json:"title,omitempty"`
	// Published is when the entry was published, or last updated when the
	// feed gives no publication date; the zero time when it gives neither.
	Published time.Time `json:"published,omitzero"`
	// Summary is the entry's description or content as plain text, cut to
	// at most 500 characters.
	Summary string `json:"summary,omitempty"`
}

// entryKeyMax is the longest GUID or link that is an entry's key as it is:
// a btree index entry holds 2,704 bytes at most.
const entryKeyMax = 1024

// Key returns the key that identifies the entry within its feed, for
// deduplication: see [EntryKey].
func (e Entry) Key() string { return EntryKey(e.GUID, e.Link, e.Title, e.Published) }

// EntryKey returns the deduplication key of an entry: its GUID when it has
// one, else its link. An entry with neither is keyed by a hash of its title
// and publication time, prefixed "sha256:", so that the same entry seen
// twice still gets the same key; so is a GUID or a link of more than
// entryKeyMax bytes, which the key's index could not hold. Surrounding white
// space is ignored.
func EntryKey(guid, link, title string, published time.Time) string {
	for _, k := range []string{strings.TrimSpace(guid), strings.TrimSpace(link)} {
		if len(k) > entryKeyMax {
			sum := sha256.Sum256([]byte(k))
			return "sha256:" + hex.EncodeToString(sum[:])
		}
		if k != "" {
			return k
		}
	}
	var stamp string
	if !published.IsZero() {
		stamp = published.UTC().Format(time.RFC3339)
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(title) + "\n" + stamp))
	return "sha256:" + hex.EncodeToString(sum[:])
}
