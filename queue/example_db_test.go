package queue_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
)

// exampleTB lets the examples, which have no *testing.T, take a database
// from testutil: a fresh, fully migrated database, dropped afterwards.
type exampleTB struct {
	testing.TB // only the methods below are called
	cleanups   []func()
}

func (tb *exampleTB) Helper()                        {}
func (tb *exampleTB) Cleanup(f func())               { tb.cleanups = append(tb.cleanups, f) }
func (tb *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

func (tb *exampleTB) done() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}

// exampleDB returns a pool on a fresh, migrated database (in a service,
// your own *pgxpool.Pool after migrations.Up) and a function that drops it.
func exampleDB() (*pgxpool.Pool, func()) {
	tb := &exampleTB{}
	return testutil.DB(tb), tb.done
}
