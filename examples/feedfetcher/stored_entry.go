package feedfetcher

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// StoredEntry is an entry as stored: the fetched [Entry] with its row ID,
// feed and deduplication key.
type StoredEntry struct {
	Entry
	ID        int64     `json:"id"`
	FeedID    int64     `json:"feed_id"`
	Key       string    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}

// insertEntries stores a feed's entries, skipping those whose key the feed
// already has, and returns the new ones, oldest first. Entries are given in
// document order, newest first as feeds list them, and stored in reverse,
// so that IDs grow with publication.
func insertEntries(ctx context.Context, db dbtx, feedID int64, entries []Entry) ([]StoredEntry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	n := len(entries)
	keys, guids, links := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	titles, summaries := make([]string, 0, n), make([]string, 0, n)
	published := make([]pgtype.Timestamptz, 0, n)
	for _, e := range slices.Backward(entries) {
		keys, guids, links = append(keys, e.Key()), append(guids, e.GUID), append(links, e.Link)
		titles, summaries = append(titles, e.Title), append(summaries, e.Summary)
		published = append(published, pgtype.Timestamptz{Time: e.Published, Valid: !e.Published.IsZero()})
	}
	rows, err := db.Query(ctx, `
INSERT INTO entries (feed_id, key, guid, link, title, summary, published_at)
SELECT $1, e.key, e.guid, e.link, e.title, e.summary, e.published_at
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
    WITH ORDINALITY AS e(key, guid, link, title, summary, published_at, n)
ORDER BY e.n
ON CONFLICT (feed_id, key) DO NOTHING
RETURNING id, feed_id, key, guid, link, title, summary, published_at, created_at`,
		feedID, keys, guids, links, titles, summaries, published)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: storing entries of feed %d: %w", feedID, err)
	}
	stored, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: storing entries of feed %d: %w", feedID, err)
	}
	slices.SortFunc(stored, func(a, b StoredEntry) int { return cmp.Compare(a.ID, b.ID) })
	return stored, nil
}

func scanEntry(row pgx.CollectableRow) (StoredEntry, error) {
	var (
		e         StoredEntry
		published *time.Time
	)
	err := row.Scan(&e.ID, &e.FeedID, &e.Key, &e.GUID, &e.Link, &e.Title, &e.Summary, &published, &e.CreatedAt)
	if published != nil {
		e.Published = published.UTC()
	}
	return e, err
}

// listEntries returns a feed's stored entries, oldest first.
func listEntries(ctx context.Context, db dbtx, feedID int64) ([]StoredEntry, error) {
	rows, err := db.Query(ctx, `SELECT id, feed_id, key, guid, link, title, summary, published_at, created_at
FROM entries WHERE feed_id = $1 ORDER BY id`, feedID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing entries of feed %d: %w", feedID, err)
	}
	entries, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing entries of feed %d: %w", feedID, err)
	}
	return entries, nil
}
