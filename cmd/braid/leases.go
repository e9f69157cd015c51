package main

import (
	"context"
	"text/tabwriter"
	"time"

	"github.com/braidflow/braid/leases"
)

func init() {
	register(&command{
		name:    "leases",
		summary: "show who holds the leases (delay processor, scheduler, maintenance)",
		subs: []sub{
			{"list", "", "list the leases with their holders, generations and expiry", leasesList},
		},
	})
}

// leaseView is a lease as the CLI prints it in JSON.
type leaseView struct {
	Name       string    `json:"name"`
	Holder     string    `json:"holder"`
	Generation int64     `json:"generation"`
	AcquiredAt time.Time `json:"acquired_at"`
	RenewedAt  time.Time `json:"renewed_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Expired    bool      `json:"expired"`
}

func leasesList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("leases list")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := leases.New(pool, &leases.Config{Logger: quiet})
	if err != nil {
		return err
	}
	list, err := m.List(ctx)
	if err != nil {
		return err
	}
	views := make([]leaseView, len(list))
	for i, l := range list {
		views[i] = leaseView{Name: l.Name, Holder: l.Holder, Generation: l.Generation, AcquiredAt: l.AcquiredAt, RenewedAt: l.RenewedAt, ExpiresAt: l.ExpiresAt, Expired: l.Expired}
	}
	return c.emit(views, func(w *tabwriter.Writer) {
		if len(views) == 0 {
			row(w, "no leases")
			return
		}
		row(w, "NAME", "HOLDER", "GENERATION", "ACQUIRED", "RENEWED", "EXPIRES", "EXPIRED")
		for _, l := range views {
			row(w, l.Name, l.Holder, l.Generation, at(l.AcquiredAt), at(l.RenewedAt), at(l.ExpiresAt), yesNo(l.Expired))
		}
	})
}
