package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/internal/admin"
	"github.com/braidflow/braid/migrations"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve the admin HTTP API and the web dashboard: serve [--addr 127.0.0.1:8080] --token T",
		run:     serve,
	})
}

func serve(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("serve")
	addr := fs.String("addr", admin.AddrDefault, "address to listen on; a non-loopback address needs a token")
	token := fs.String("token", "", "admin bearer token (default $BRAID_ADMIN_TOKEN)")
	readOnly := fs.String("readonly-token", "", "read-only bearer token (default $BRAID_READONLY_TOKEN)")
	insecure := fs.Bool("insecure-no-auth", false, "serve without a token, as admin to anyone; refused unless --addr is a loopback address")
	jaeger := fs.String("jaeger-url", os.Getenv("BRAID_JAEGER_URL"), "base URL of a Jaeger UI, to link each run to its trace (default $BRAID_JAEGER_URL)")
	depth := fs.Int("alert-queue-depth", admin.AlertQueueDepthDefault, "alert when more jobs than this wait in one queue")
	failed := fs.Float64("alert-failed-rate", admin.AlertFailedRateDefault, "alert when more than this fraction (above 0, at most 1) of the jobs finished in the last hour failed")
	long := fs.Duration("alert-long-running", admin.AlertLongRunningDefault, "alert when a job has been running for longer")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	// admin.Config takes a zero threshold as its default: here a flag's
	// default is already its value, so zero is refused with the rest.
	switch {
	case *depth < 1:
		return usagef("--alert-queue-depth %d is out of range; it must be at least 1", *depth)
	case !(*failed > 0 && *failed <= 1):
		return usagef("--alert-failed-rate %v is out of range; it must be a fraction above 0 and at most 1 (0.1 alerts over 10 %%)", *failed)
	case *long <= 0:
		return usagef("--alert-long-running %s is out of range; it must be positive", *long)
	}
	cfg := &admin.Config{
		Addr:           *addr,
		InsecureNoAuth: *insecure,
		JaegerURL:      *jaeger,
		Alerts:         admin.AlertThresholds{QueueDepth: *depth, FailedRate: *failed, LongRunning: *long},
		Logger:         slog.New(slog.NewTextHandler(c.stderr, nil)),
	}
	if *token == "" {
		*token = os.Getenv("BRAID_ADMIN_TOKEN")
	}
	if *readOnly == "" {
		*readOnly = os.Getenv("BRAID_READONLY_TOKEN")
	}
	if *token != "" {
		cfg.Tokens = append(cfg.Tokens, admin.Token{Name: "admin", Secret: *token, Role: admin.RoleAdmin})
	}
	if *readOnly != "" {
		cfg.Tokens = append(cfg.Tokens, admin.Token{Name: "readonly", Secret: *readOnly, Role: admin.RoleReadOnly})
	}
	if *insecure && len(cfg.Tokens) > 0 {
		return usagef("--insecure-no-auth and a token exclude each other: drop one")
	}
	// Refuse a bad configuration before touching the database.
	switch {
	case *insecure && !admin.IsLoopback(*addr):
		return usagef("refusing to serve without authentication on %s, which is not a loopback address: give --token (or BRAID_ADMIN_TOKEN), or listen on 127.0.0.1", *addr)
	case !*insecure && len(cfg.Tokens) == 0:
		return usagef("refusing to serve without a token: give --token or set BRAID_ADMIN_TOKEN (and optionally --readonly-token), or pass --insecure-no-auth on a loopback address")
	case *insecure:
		fmt.Fprintf(c.stderr, "braid serve: WARNING: serving without authentication on %s; anyone who can reach it is admin\n", *addr)
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkMigrated(ctx, pool); err != nil {
		return err
	}
	srv, err := admin.New(pool, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	return srv.Serve(ctx, func(a net.Addr) {
		fmt.Fprintf(c.stdout, "braid serve: dashboard and API on http://%s/ (API reference: /api/openapi.json)\n", a)
	})
}

// checkMigrated refuses to serve a database whose braid schema is not
// fully applied, and says how to apply it.
func checkMigrated(ctx context.Context, pool *pgxpool.Pool) error {
	st, err := migrations.Status(ctx, pool)
	if err != nil {
		return fmt.Errorf("cannot read the migration status: %w", err)
	}
	pending := 0
	for _, v := range st {
		if !v.Applied {
			pending++
		}
	}
	if pending > 0 {
		return fmt.Errorf("the database is not migrated (%d of %d migrations pending): run `braid migrate up` first", pending, len(st))
	}
	return nil
}
