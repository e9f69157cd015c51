package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"

	"github.com/braidflow/braid/examples/feedfetcher"
	"github.com/braidflow/braid/internal/admin"
)

// DashboardAddrDefault is where the demo serves braid's dashboard. When the
// port is taken, the demo takes a free one and prints it.
const DashboardAddrDefault = "127.0.0.1:8080"

// startDashboard serves braid's admin API and dashboard for the demo's
// engine on a loopback address, behind a fresh random admin token. It
// returns the dashboard's URL and token, and a function that stops it.
func startDashboard(ctx context.Context, app *feedfetcher.App, addr string, logger *slog.Logger) (url, token string, stop func() error, err error) {
	if !admin.IsLoopback(addr) {
		return "", "", nil, fmt.Errorf("-dashboard %s: the demo serves its dashboard on a loopback address only", addr)
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return "", "", nil, err
	}
	token = hex.EncodeToString(secret)
	serve := func(addr string) (string, func() error, error) {
		srv, err := admin.New(app.Pool(), &admin.Config{
			Addr:      addr,
			Tokens:    []admin.Token{{Name: "demo", Secret: token, Role: admin.RoleAdmin}},
			Engine:    app.Engine(),
			Queue:     app.Engine().Queue(),
			Scheduler: app.Scheduler(),
			Logger:    logger,
		})
		if err != nil {
			return "", nil, err
		}
		sctx, cancel := context.WithCancel(ctx)
		bound := make(chan net.Addr, 1)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(sctx, func(a net.Addr) { bound <- a }) }()
		select {
		case a := <-bound:
			return "http://" + a.String() + "/", func() error { cancel(); return <-done }, nil
		case err := <-done:
			cancel()
			return "", nil, err
		}
	}
	url, stop, err = serve(addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(addr)
		url, stop, err = serve(net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return "", "", nil, fmt.Errorf("starting the dashboard: %w", err)
	}
	return url, token, stop, nil
}
