package feedfetcher

import (
	"testing"

	"github.com/braidflow/braid/testutil"
)

// TestMain stops the private PostgreSQL cluster of the database tests and
// fails the binary if goroutines leak.
func TestMain(m *testing.M) { testutil.Main(m) }
