package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/examples/feedfetcher"
	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
)

// subscriptions are the demo's readers and their feeds: twelve feeds, three
// of which misbehave, one in French and one in German, some shared by two
// readers.
var subscriptions = []struct {
	user  string
	feeds []string
}{
	{"alice", []string{"harbor-engineering", "night-sky", "cycling-dispatch", "transit-updates", "marche-du-quartier", feedserver.SlugFailing}},
	{"bob", []string{"harbor-engineering", "kitchen-chemistry", "open-source-digest", feedserver.SlugMalformed, feedserver.SlugSlow}},
	{"carol", []string{"small-garden", "cycling-dispatch", "night-sky", "bergwetter"}},
}

// LanguagesDefault are the languages the demo's reader wants summaries in:
// the French feed's article pipelines skip their summary node.
const LanguagesDefault = "en,de"

// webSubFeeds are the feeds whose (pretend) hubs the demo subscribes at.
var webSubFeeds = []string{"harbor-engineering", "cycling-dispatch", "open-source-digest"}

// The script's moves: carol leaves a feed she alone reads (its job is
// disabled) and one alice reads too (its job stays enabled), then comes
// back to the first (its job is enabled again).
const (
	mover      = "carol"
	leaveAlone = "small-garden"
	leaveShare = "cycling-dispatch"
	leaveAt    = 0.35 // of the duration
	returnAt   = 0.65
)

// earlyReader asks for her digests before their windows pass, once one of
// them has waited half the digest window: the digest workflow waits on the
// send-now signal, with the window as its timeout, and sends at whichever
// comes first.
const earlyReader = "bob"

// demo is one run of the script.
type demo struct {
	app    *feedfetcher.App
	srv    *feedserver.Server
	logger *slog.Logger
	users  map[string]*feedfetcher.User
	feeds  map[string]int64 // slug to feed ID
	notes  []string         // what the moves did, for the summary
	start  time.Time
}

// setUp creates the users, retires subscriptions a previous run left in
// the database (their feeds were served on another port), subscribes the
// readers, and registers the WebSub subscriptions.
func (d *demo) setUp(ctx context.Context, events *eventSink) error {
	d.users, d.feeds = map[string]*feedfetcher.User{}, map[string]int64{}
	for _, s := range subscriptions {
		u, err := d.app.EnsureUser(ctx, s.user, s.user+"@example.org")
		if err != nil {
			return err
		}
		d.users[s.user] = u
		events.nameUser(u.ID, u.Name)
		old, err := d.app.Subscriptions(ctx, u.ID)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, d.app.Pool(), func(tx pgx.Tx) error {
			for _, sub := range old {
				if _, err := d.app.UnsubscribeTx(ctx, tx, u.ID, sub.FeedID); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(old) > 0 {
			d.logger.InfoContext(ctx, "unsubscribed from the feeds of a previous run; their fetch_feed jobs are disabled", slog.String("user", u.Name),
				slog.Int("retired", len(old)))
		}
	}
	for _, s := range subscriptions {
		for _, slug := range s.feeds {
			sub, err := d.app.Subscribe(ctx, d.users[s.user].ID, d.srv.FeedURL(slug))
			if err != nil {
				return err
			}
			d.feeds[slug] = sub.FeedID
		}
	}
	for _, slug := range webSubFeeds {
		if _, err := d.app.RegisterWebSub(ctx, d.feeds[slug], d.srv.URL()+"/hub", time.Hour); err != nil {
			return err
		}
	}
	return nil
}

// feedIDs returns the IDs of this run's feeds.
func (d *demo) feedIDs() []int64 {
	ids := make([]int64, 0, len(d.feeds))
	for _, id := range d.feeds {
		ids = append(ids, id)
	}
	return ids
}

// leave has the mover unsubscribe from two feeds.
func (d *demo) leave(ctx context.Context, elapsed time.Duration) error {
	u := d.users[mover]
	for _, slug := range []string{leaveAlone, leaveShare} {
		sub, err := d.app.Unsubscribe(ctx, u.ID, d.feeds[slug])
		if err != nil {
			return err
		}
		if sub.FetchEnabled {
			d.notes = append(d.notes, fmt.Sprintf("at %s %s left %s; others still read it, so its fetch_feed job stayed enabled",
				round(elapsed), mover, slug))
		} else {
			d.notes = append(d.notes, fmt.Sprintf("at %s %s left %s, its last reader: fetch_feed disabled, next fetch cleared",
				round(elapsed), mover, slug))
		}
	}
	return nil
}

// comeBack has the mover subscribe again to the feed she alone read.
func (d *demo) comeBack(ctx context.Context, elapsed time.Duration) error {
	sub, err := d.app.Subscribe(ctx, d.users[mover].ID, d.srv.FeedURL(leaveAlone))
	if err != nil {
		return err
	}
	when := "now"
	if sub.NextFetchAt != nil && time.Until(*sub.NextFetchAt) >= time.Second {
		when = "in " + round(time.Until(*sub.NextFetchAt)).String()
	}
	d.notes = append(d.notes, fmt.Sprintf("at %s %s came back to %s: the same job enabled again, its kept next fetch due %s",
		round(elapsed), mover, leaveAlone, when))
	return nil
}

// askEarly has earlyReader ask for her pending digests now
// (App.SendDigestNow), once a digest of hers started since since has been
// pending for half of window. It returns once she has asked, or when ctx
// ends.
func (d *demo) askEarly(ctx context.Context, since time.Time, window time.Duration) {
	u := d.users[earlyReader]
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var seen time.Time // when a digest of this run was first seen pending
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if seen.IsZero() {
			pending, err := d.app.PendingDigests(ctx, u.ID)
			if err != nil {
				if ctx.Err() == nil {
					d.logger.WarnContext(ctx, "listing pending digests failed", slog.String("user", u.Name), slog.String("error", err.Error()))
				}
				return
			}
			if slices.ContainsFunc(pending, func(p feedfetcher.PendingDigest) bool { return !p.CreatedAt.Before(since) }) {
				seen = time.Now()
			}
			continue
		}
		if time.Since(seen) < window/2 {
			continue
		}
		_, err := d.app.SendDigestNow(ctx, u.ID, earlyReader)
		switch {
		case errors.Is(err, feedfetcher.ErrNoPendingDigest):
			seen = time.Time{} // sent meanwhile: wait for the next
		case err != nil:
			if ctx.Err() == nil {
				d.logger.WarnContext(ctx, "asking for digests now failed", slog.String("user", u.Name), slog.String("error", err.Error()))
			}
			return
		default:
			return
		}
	}
}
