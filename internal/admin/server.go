package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// AddrDefault is the address Serve listens on when Config.Addr is empty: the
// loopback interface only.
const AddrDefault = "127.0.0.1:8080"

// MaxBodyBytesDefault is the largest request body the API reads. A larger
// one gets 413.
const MaxBodyBytesDefault = 1 << 20

// ErrNoToken is returned by New when no token is configured and
// Config.InsecureNoAuth is not set.
var ErrNoToken = errors.New("admin: no token configured: give an admin token, or allow unauthenticated access on a loopback address explicitly")

// ErrInsecureAddr is returned by New and Serve when Config.InsecureNoAuth is
// set and the address is not a loopback address.
var ErrInsecureAddr = errors.New("admin: unauthenticated access is allowed only on a loopback address")

// Role is what a token may do.
type Role string

const (
	// RoleReadOnly may call every GET route and open the dashboard.
	RoleReadOnly Role = "read-only"
	// RoleAdmin may also call the routes that change something.
	RoleAdmin Role = "admin"
)

// Token is a bearer token and the role it grants. Name identifies the token
// in the audit log; the secret never appears there.
type Token struct {
	Name   string
	Secret string
	Role   Role
}

// Config configures a Server. The zero value is not valid: it needs a token,
// or InsecureNoAuth on a loopback address.
type Config struct {
	// Addr is the TCP address Serve listens on.
	//
	// Defaults to AddrDefault (127.0.0.1:8080).
	Addr string

	// Tokens are the bearer tokens the server accepts. A request without
	// one of them gets 401; a read-only token on a route that changes
	// something gets 403.
	Tokens []Token

	// InsecureNoAuth serves every route to anyone, as admin. It is
	// refused unless Addr is a loopback address.
	InsecureNoAuth bool

	// JaegerURL is the base URL of a Jaeger UI. When set, a run's page
	// links to its trace at JaegerURL + "/trace/" + trace ID.
	JaegerURL string

	// Alerts are the thresholds of the overview's alerts.
	//
	// Zero fields take the defaults of AlertThresholds; New refuses the
	// values AlertThresholds.Validate refuses.
	Alerts AlertThresholds

	// MaxBodyBytes is the largest request body read.
	//
	// Defaults to MaxBodyBytesDefault (1 MiB).
	MaxBodyBytes int64

	// Logger receives the audit lines of mutations and the server's errors.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger

	// Engine, Queue and Scheduler serve the operations on runs, jobs,
	// schedules and recurring jobs. Each left nil is built on the pool and
	// never started: it only writes, as the braid CLI does, and the
	// processes that run braid do the work. Give a process's own started
	// values to serve the API from inside it.
	Engine    *workflow.Engine
	Queue     *queue.Queue
	Scheduler *scheduler.Scheduler
}

// Defaults of AlertThresholds.
const (
	AlertQueueDepthDefault  = 1000
	AlertFailedRateDefault  = 0.10
	AlertLongRunningDefault = time.Hour
)

// AlertThresholds are the limits past which the overview raises an alert,
// after the classic job-queue monitoring alerts.
type AlertThresholds struct {
	// QueueDepth alerts when more jobs than this wait in one queue.
	//
	// Defaults to AlertQueueDepthDefault (1000).
	QueueDepth int

	// FailedRate alerts when more than this fraction of the jobs finished
	// in the last hour failed (were discarded): from 0 to 1, so 0.10 is
	// 10 %.
	//
	// Defaults to AlertFailedRateDefault (0.10).
	FailedRate float64

	// LongRunning alerts when a job has been running for longer.
	//
	// Defaults to AlertLongRunningDefault (1h).
	LongRunning time.Duration
}

// Validate reports the first threshold the overview cannot apply, naming
// it and its range: a negative one, or a failed rate that is not a
// fraction from 0 to 1 (a rate given in percent would never alert, and NaN
// cannot be encoded as JSON). Zero fields are valid; they take the
// defaults.
func (a AlertThresholds) Validate() error {
	switch {
	case a.QueueDepth < 0:
		return fmt.Errorf("admin: Config.Alerts.QueueDepth is %d; it must be positive (or zero for the default %d)", a.QueueDepth, AlertQueueDepthDefault)
	case !(a.FailedRate >= 0 && a.FailedRate <= 1):
		return fmt.Errorf("admin: Config.Alerts.FailedRate is %v; it must be a fraction from 0 to 1, as 0.1 alerts over 10 %% (or zero for the default %v)", a.FailedRate, AlertFailedRateDefault)
	case a.LongRunning < 0:
		return fmt.Errorf("admin: Config.Alerts.LongRunning is %s; it must be positive (or zero for the default %s)", a.LongRunning, AlertLongRunningDefault)
	}
	return nil
}

// Server serves braid's admin API and dashboard. Create it with New; it is
// safe for concurrent use.
type Server struct {
	pool  *pgxpool.Pool
	cfg   Config
	log   *slog.Logger
	eng   *workflow.Engine
	q     *queue.Queue
	sched *scheduler.Scheduler
	// insertQ is an insert-only queue on the pool: River refuses to
	// insert a kind its client has no worker for, and the server inserts
	// jobs of kinds that other processes work (dispatch, run now).
	insertQ *queue.Queue
	leases  *leases.Manager
	ownEng  bool

	mux    *http.ServeMux
	routes []*route
	hub    *hub

	closeOnce sync.Once
}

// New builds a Server on pool. It checks the configuration but opens no
// listener; see Handler and Serve.
func New(pool *pgxpool.Pool, cfg *Config) (*Server, error) {
	if pool == nil {
		return nil, errors.New("admin: pool is nil")
	}
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Addr == "" {
		c.Addr = AddrDefault
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = MaxBodyBytesDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := c.Alerts.Validate(); err != nil {
		return nil, err
	}
	if c.Alerts.QueueDepth == 0 {
		c.Alerts.QueueDepth = AlertQueueDepthDefault
	}
	if c.Alerts.FailedRate == 0 {
		c.Alerts.FailedRate = AlertFailedRateDefault
	}
	if c.Alerts.LongRunning == 0 {
		c.Alerts.LongRunning = AlertLongRunningDefault
	}
	c.JaegerURL = strings.TrimRight(c.JaegerURL, "/")
	if err := checkTokens(&c); err != nil {
		return nil, err
	}
	s := &Server{pool: pool, cfg: c, log: c.Logger, q: c.Queue, eng: c.Engine, sched: c.Scheduler}
	var err error
	if s.eng == nil {
		s.eng, err = workflow.NewEngine(pool, &workflow.Config{
			Queue:                 &queue.Config{Logger: quietLogger, MaintenanceDisabled: true},
			DisableDelayProcessor: true,
			Logger:                quietLogger,
		})
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		s.ownEng = true
	}
	if s.q == nil {
		s.q = s.eng.Queue()
	}
	s.insertQ, err = queue.New(pool, &queue.Config{Logger: quietLogger, MaintenanceDisabled: true})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if s.sched == nil {
		// A server that is not given a process's scheduler serves
		// processes it knows nothing of, as the braid CLI does: it checks
		// schedules as far as a remote can (any job kind, any workflow
		// name), inserts the jobs of "run now" through an insert-only
		// queue, and starts runs by name with the turn options of their
		// workflow's earlier runs.
		s.sched, err = scheduler.New(pool, &scheduler.Config{Queue: s.insertQ, Workflows: byName{s.eng}, Leases: s.q.Leases(), Logger: quietLogger})
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	s.leases = s.q.Leases()
	s.hub = newHub(pool, s.log)
	s.mux = http.NewServeMux()
	s.routeAll()
	return s, nil
}

// checkTokens validates the tokens and the insecure mode against the
// address.
func checkTokens(c *Config) error {
	seen := map[string]string{}
	for i, t := range c.Tokens {
		if t.Secret == "" {
			return fmt.Errorf("admin: token %d (%q) has an empty secret", i, t.Name)
		}
		if t.Role != RoleAdmin && t.Role != RoleReadOnly {
			return fmt.Errorf("admin: token %q has role %q; use %q or %q", t.Name, t.Role, RoleAdmin, RoleReadOnly)
		}
		if other, dup := seen[t.Secret]; dup {
			return fmt.Errorf("admin: tokens %q and %q have the same secret", other, t.Name)
		}
		seen[t.Secret] = t.Name
		if t.Name == "" {
			c.Tokens[i].Name = string(t.Role)
		}
	}
	if c.InsecureNoAuth {
		if !IsLoopback(c.Addr) {
			return fmt.Errorf("%w: %s is not one (use 127.0.0.1, ::1 or localhost, or give a token)", ErrInsecureAddr, c.Addr)
		}
		return nil
	}
	if len(c.Tokens) == 0 {
		return ErrNoToken
	}
	return nil
}

// IsLoopback reports whether the host of addr (host:port) is a loopback
// address or "localhost". An empty host listens on every interface and is
// not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Handler returns the server's HTTP handler: the API under /api/ and the
// dashboard everywhere else, every route behind authentication.
func (s *Server) Handler() http.Handler {
	return s.authenticate(s.mux)
}

// Addr is the address Serve listens on.
func (s *Server) Addr() string { return s.cfg.Addr }

// Serve listens on Config.Addr and serves until ctx ends, then shuts down
// gracefully. ready, when not nil, is called with the bound address once
// the listener is open.
func (s *Server) Serve(ctx context.Context, ready func(addr net.Addr)) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.cfg.Addr, err)
	}
	if s.cfg.InsecureNoAuth {
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
			ln.Close()
			return fmt.Errorf("%w: %s is not one", ErrInsecureAddr, ln.Addr())
		}
	}
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	s.hub.close()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	<-errc
	s.Close()
	return err
}

// Close stops the server's background work: the LISTEN connection of live
// updates, and the engine it built. It does not close the pool.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.hub.close()
		if s.ownEng {
			_ = s.eng.Stop(context.Background())
		}
	})
}

// byName starts the runs of workflow schedules by name through the
// server's engine, whether or not it registers the workflow.
type byName struct{ eng *workflow.Engine }

func (b byName) StartWorkflowTx(ctx context.Context, tx pgx.Tx, name string, input json.RawMessage, idempotencyKey string) (string, error) {
	run, err := b.eng.StartByNameTx(ctx, tx, name, input, &workflow.StartByNameOpts{IdempotencyKey: idempotencyKey})
	if err != nil {
		return "", err
	}
	return run.ID, nil
}

// quietLogger drops the logs of the engine and queue the server builds,
// which never run work.
var quietLogger = slog.New(slog.DiscardHandler)
