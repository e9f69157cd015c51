package admin

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
)

// An alert threshold that the overview cannot apply (a failed rate given
// in percent, a negative limit, NaN, which no JSON can carry) is refused
// by New with an error naming the field and its range, rather than taken
// silently: a rate of 5 would never alert, and NaN would leave /api/config
// and the overview answering 200 with an empty body.
func TestNewRefusesAlertThresholdsItCannotApply(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	tokens := []Token{{Name: "ops", Secret: adminSecret, Role: RoleAdmin}}
	for _, tc := range []struct {
		name   string
		alerts AlertThresholds
		want   string
	}{
		{"failed rate in percent", AlertThresholds{FailedRate: 5}, "Alerts.FailedRate is 5; it must be a fraction from 0 to 1"},
		{"negative failed rate", AlertThresholds{FailedRate: -0.1}, "Alerts.FailedRate is -0.1; it must be a fraction from 0 to 1"},
		{"NaN failed rate", AlertThresholds{FailedRate: math.NaN()}, "Alerts.FailedRate is NaN; it must be a fraction from 0 to 1"},
		{"infinite failed rate", AlertThresholds{FailedRate: math.Inf(1)}, "Alerts.FailedRate is +Inf; it must be a fraction from 0 to 1"},
		{"negative queue depth", AlertThresholds{QueueDepth: -1}, "Alerts.QueueDepth is -1; it must be positive"},
		{"negative long running", AlertThresholds{LongRunning: -time.Second}, "Alerts.LongRunning is -1s; it must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := New(pool, &Config{Tokens: tokens, Alerts: tc.alerts})
			if err == nil {
				srv.Close()
				t.Fatalf("New accepted alert thresholds %+v", tc.alerts)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
	for _, ok := range []AlertThresholds{{}, {FailedRate: 1}, {FailedRate: 0.5, QueueDepth: 1, LongRunning: time.Minute}} {
		srv, err := New(pool, &Config{Tokens: tokens, Alerts: ok})
		if err != nil {
			t.Errorf("alert thresholds %+v: %v", ok, err)
			continue
		}
		srv.Close()
	}
}
