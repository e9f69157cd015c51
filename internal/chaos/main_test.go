package chaos_test

import (
	"os"
	"testing"

	"github.com/braidflow/braid/internal/chaos"
	"github.com/braidflow/braid/testutil"
)

// TestMain serves as a chaos worker when the smoke test starts this binary
// as one, and otherwise runs the tests.
func TestMain(m *testing.M) {
	if chaos.IsWorker() {
		os.Exit(chaos.WorkerMain())
	}
	testutil.Main(m)
}
