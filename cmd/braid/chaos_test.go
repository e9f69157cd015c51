package main

import (
	"strings"
	"testing"
)

func TestChaosWithoutRunSaysWhatItWouldDo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{
			"at the full size: 3 worker processes",
			"  kill, restart, freeze, lease, storm, timeout, errors\n",
			"The fault phases share 5m0s; settling comes on top.",
			"It starts a private PostgreSQL",
		}},
		{[]string{"--quick", "--scenario", "kill,storm", "--workers", "2"}, []string{
			"at the smoke size: 2 worker processes",
			"  kill, storm\n",
			"The fault phases share 28s;",
		}},
	} {
		code, out, errOut := braid(t, append([]string{"chaos"}, tc.args...)...)
		last := "braid chaos: nothing was run: add --run to start the fault suite, or run `make chaos` (QUICK=1 for the smoke size)\n"
		if code != 2 || out != "" || !strings.HasSuffix(errOut, last) {
			t.Errorf("braid chaos %v: code %d, stdout %q, stderr:\n%s\nwant code 2, nothing on stdout and stderr ending %q", tc.args, code, out, errOut, last)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("braid chaos %v: stderr lacks %q:\n%s", tc.args, w, errOut)
			}
		}
	}
}
