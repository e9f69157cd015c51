package testutil

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/braidflow/braid/internal/testdb"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = testdb.EnvURL

// PoolMaxConnsDefault is the size of pools returned by DB.
const PoolMaxConnsDefault = testdb.PoolMaxConnsDefault

// Main runs the package's tests, then stops the private cluster and checks
// for leaked goroutines. Call it as the whole body of TestMain.
func Main(m *testing.M) { testdb.Main(m) }

// IgnoreGoroutines lists goroutines that outlive tests by design.
func IgnoreGoroutines() []goleak.Option { return testdb.IgnoreGoroutines() }

// Stop stops the private cluster, if one was started, and removes its
// directory. Main calls it.
func Stop() { testdb.Stop() }

// Database is a fresh, fully migrated database, for code that has no
// testing.TB (runnable examples, benchmarks).
type Database = testdb.Database

// Open creates a fresh, fully migrated database with a pool on it.
func Open(ctx context.Context) (*Database, error) { return testdb.Open(ctx) }

// URL creates a fresh, fully migrated database and returns its connection
// string; the database is dropped when the test ends.
func URL(tb testing.TB) string {
	tb.Helper()
	return testdb.URL(tb)
}

// DB returns a pool on a fresh, fully migrated database, closed and
// dropped when the test ends.
func DB(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return testdb.DB(tb)
}

// Pool opens a pool on connString, closed when the test ends.
func Pool(tb testing.TB, connString string) *pgxpool.Pool {
	tb.Helper()
	return testdb.Pool(tb, connString)
}
