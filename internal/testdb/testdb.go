package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/braidflow/braid/internal/localpg"
	"github.com/braidflow/braid/migrations"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = "TEST_DATABASE_URL"

// PoolMaxConnsDefault is the size of pools returned by DB.
const PoolMaxConnsDefault = 16

var (
	serverOnce sync.Once
	serverURL  string // admin connection string
	serverErr  error
	cluster    *localpg.Cluster
	clusterDir string

	templateMu   sync.Mutex
	templateName string
)

// Main runs the package's tests, then stops the private cluster and checks
// for leaked goroutines. Call it as the whole body of TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	if code == 0 {
		if err := goleak.Find(IgnoreGoroutines()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// IgnoreGoroutines lists goroutines that outlive tests by design.
func IgnoreGoroutines() []goleak.Option {
	return []goleak.Option{
		// database/sql's connection opener lives as long as a *sql.DB that
		// goose keeps for the process's template database.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	}
}

// Stop stops the private cluster, if one was started, and removes its
// directory. Main calls it.
func Stop() {
	if cluster != nil {
		_ = cluster.Stop()
		_ = os.RemoveAll(clusterDir)
		cluster = nil
	}
}

// server returns an admin connection string: TEST_DATABASE_URL, or the
// private cluster's postgres database.
func server() (string, error) {
	serverOnce.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			serverURL = u
			return
		}
		dir, err := os.MkdirTemp("", "braidpg")
		if err != nil {
			serverErr = err
			return
		}
		c, err := localpg.New(localpg.Config{Dir: dir, DisableFsync: true})
		if err != nil {
			_ = os.RemoveAll(dir)
			serverErr = fmt.Errorf("testutil: set %s or install PostgreSQL: %w", EnvURL, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Start(ctx); err != nil {
			_ = os.RemoveAll(dir)
			serverErr = err
			return
		}
		cluster, clusterDir = c, dir
		serverURL = c.URL("postgres")
	})
	return serverURL, serverErr
}

// withDatabase returns connString with its database replaced by name.
func withDatabase(connString, name string) (string, error) {
	if _, err := pgx.ParseConfig(connString); err != nil {
		return "", err
	}
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return connString + " dbname=" + name, nil
}

// migrationsHash identifies the schema, so a template from an older schema
// is never reused.
func migrationsHash() (string, error) {
	h := sha256.New()
	fsys := migrations.FS()
	var names []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// template returns the name of a migrated template database, creating it
// once per server. An advisory lock makes concurrent test binaries safe.
func template(ctx context.Context, admin string) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if templateName != "" {
		return templateName, nil
	}
	hash, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "braid_tmpl_" + hash
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("testutil: connecting to %s: %w", redact(admin), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7263514)"); err != nil {
		return "", err
	}
	defer func() { _, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7263514)") }()

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		building := name + "_build"
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
			return "", fmt.Errorf("testutil: creating template: %w", err)
		}
		u, err := withDatabase(admin, building)
		if err != nil {
			return "", err
		}
		pool, err := pgxpool.New(ctx, u)
		if err != nil {
			return "", err
		}
		err = migrations.Up(ctx, pool)
		pool.Close()
		if err != nil {
			return "", fmt.Errorf("testutil: migrating template: %w", err)
		}
		// Rename only once complete, so a crash never leaves a half-built
		// template under the final name.
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
			return "", err
		}
	}
	templateName = name
	return name, nil
}

func redact(connString string) string {
	if u, err := url.Parse(connString); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxx")
		}
		return u.String()
	}
	return connString
}

// Database is a fresh, fully migrated database, for code that has no
// testing.TB (runnable examples, benchmarks).
type Database struct {
	// URL is the database's connection string.
	URL string
	// Pool is a pool on it.
	Pool *pgxpool.Pool

	drop func()
}

// Close closes the pool and drops the database.
func (d *Database) Close() {
	if d.Pool != nil {
		d.Pool.Close()
	}
	d.drop()
}

// Open creates a fresh, fully migrated database with a pool on it.
func Open(ctx context.Context) (*Database, error) {
	u, drop, err := create(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		drop()
		return nil, err
	}
	if cfg.MaxConns < PoolMaxConnsDefault {
		cfg.MaxConns = PoolMaxConnsDefault
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, err
	}
	return &Database{URL: u, Pool: pool, drop: drop}, nil
}

// create makes a fresh database from the template and returns its URL and
// a function that drops it.
func create(ctx context.Context) (string, func(), error) {
	admin, err := server()
	if err != nil {
		return "", nil, err
	}
	tmpl, err := template(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "braid_test_" + hex.EncodeToString(rnd[:])
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("testutil: connecting: %w", err)
	}
	defer conn.Close(ctx)
	// CREATE DATABASE … TEMPLATE fails while anyone else is connected to
	// the template; only testutil connects to it, and briefly, so retry.
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl)
		if err == nil || attempt >= 50 || !strings.Contains(err.Error(), "being accessed by other users") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return "", nil, fmt.Errorf("testutil: creating database %s: %w", name, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	u, err := withDatabase(admin, name)
	if err != nil {
		drop()
		return "", nil, err
	}
	return u, drop, nil
}

// URL creates a fresh, fully migrated database for the test and returns
// its connection string. The database is dropped when the test ends. Use it
// when another process must connect to the same database.
func URL(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, drop, err := create(ctx)
	if err != nil {
		tb.Fatalf("testutil: %v", err)
	}
	tb.Cleanup(drop)
	return u
}

// DB returns a pool on a fresh, fully migrated database. The pool is
// closed and the database dropped when the test ends.
func DB(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return Pool(tb, URL(tb))
}

// Pool opens a pool on connString, closed when the test ends. Use it to
// give one test several pools on the same database, as separate processes
// would have.
func Pool(tb testing.TB, connString string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		tb.Fatalf("testutil: %v", err)
	}
	if cfg.MaxConns < PoolMaxConnsDefault {
		cfg.MaxConns = PoolMaxConnsDefault
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testutil: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}
