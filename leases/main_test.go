package leases_test

import (
	"testing"

	"github.com/braidflow/braid/testutil"
)

func TestMain(m *testing.M) {
	testutil.Main(m)
}
