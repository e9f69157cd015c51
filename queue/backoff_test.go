package queue

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river/rivertype"
)

func TestBackoffSchedules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    Backoff
		want []time.Duration // Nominal(1), Nominal(2), …
	}{
		{"fixed", Backoff{Strategy: Fixed, Base: 3 * time.Second}, []time.Duration{
			3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}},
		{"fixed capped", Backoff{Strategy: Fixed, Base: 3 * time.Second, Max: time.Second}, []time.Duration{
			time.Second, time.Second}},
		{"linear", Backoff{Strategy: Linear, Base: time.Second, Max: 4 * time.Second}, []time.Duration{
			time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}},
		{"exponential", Backoff{Strategy: Exponential, Base: time.Second, Max: 10 * time.Second}, []time.Duration{
			time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"default (1 min × 2^(n-1), 24 h cap)", DefaultBackoff, []time.Duration{
			time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute,
			64 * time.Minute, 128 * time.Minute, 256 * time.Minute, 512 * time.Minute, 1024 * time.Minute,
			24 * time.Hour, 24 * time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.b.Validate(); err != nil {
				t.Fatal(err)
			}
			var got []time.Duration
			for attempt := 1; attempt <= len(tt.want); attempt++ {
				got = append(got, tt.b.Nominal(attempt))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("nominal delays by attempt (-want +got):\n%s", diff)
			}
			if tt.b.Jitter == 0 {
				for attempt := 1; attempt <= len(tt.want); attempt++ {
					if d := tt.b.Delay(attempt); d != tt.want[attempt-1] {
						t.Errorf("Delay(%d) without jitter = %s, want %s", attempt, d, tt.want[attempt-1])
					}
				}
			}
		})
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	t.Parallel()
	// The documented schedule: retry 1 waits 48–72 s, retry 5 768–1152 s, and once
	// capped 19.2–28.8 h.
	wantBounds := map[int][2]time.Duration{
		1:  {48 * time.Second, 72 * time.Second},
		2:  {96 * time.Second, 144 * time.Second},
		3:  {192 * time.Second, 288 * time.Second},
		4:  {384 * time.Second, 576 * time.Second},
		5:  {768 * time.Second, 1152 * time.Second},
		20: {time.Duration(19.2 * float64(time.Hour)), time.Duration(28.8 * float64(time.Hour))},
	}
	for attempt, want := range wantBounds {
		lo, hi := DefaultBackoff.Bounds(attempt)
		if lo != want[0] || hi != want[1] {
			t.Errorf("DefaultBackoff.Bounds(%d) = [%s, %s], want [%s, %s]", attempt, lo, hi, want[0], want[1])
		}
	}

	for _, b := range []Backoff{
		DefaultBackoff,
		{Strategy: Fixed, Base: time.Second, Jitter: 0.5},
		{Strategy: Linear, Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.1},
	} {
		for attempt := 1; attempt <= 15; attempt++ {
			lo, hi := b.Bounds(attempt)
			n := b.Nominal(attempt)
			var below, above bool
			for range 500 {
				d := b.Delay(attempt)
				if d < lo || d > hi {
					t.Fatalf("%s Delay(%d) = %s, outside [%s, %s]", b.Strategy, attempt, d, lo, hi)
				}
				below = below || d < n
				above = above || d > n
			}
			// 500 uniform draws all on one side of the nominal delay would
			// mean the jitter is not spread both ways.
			if !below || !above {
				t.Errorf("%s Delay(%d): jitter never went both ways around %s", b.Strategy, attempt, n)
			}
		}
	}
}

func TestBackoffNextRetry(t *testing.T) {
	t.Parallel()
	b := Backoff{Strategy: Linear, Base: time.Hour}
	before := time.Now()
	got := b.NextRetry(&rivertype.JobRow{Attempt: 3})
	after := time.Now()
	if got.Before(before.Add(3*time.Hour)) || got.After(after.Add(3*time.Hour)) {
		t.Errorf("NextRetry after attempt 3 = %s, want now + 3h", got.Sub(before))
	}
}

func TestBackoffEdges(t *testing.T) {
	t.Parallel()
	b := Backoff{Strategy: Exponential, Base: time.Second}
	if got := b.Nominal(0); got != time.Second {
		t.Errorf("Nominal(0) = %s, want the first attempt's %s", got, time.Second)
	}
	if got := b.Nominal(1000); got != time.Duration(math.MaxInt64) {
		t.Errorf("uncapped Nominal(1000) = %s, want saturation at the largest duration", got)
	}
	if got := (Backoff{Strategy: Linear, Base: time.Hour}).Nominal(math.MaxInt32); got != time.Duration(math.MaxInt64) {
		t.Errorf("uncapped linear Nominal(MaxInt32) = %s, want saturation", got)
	}
	if _, hi := (Backoff{Base: time.Second, Jitter: 0.5}).Bounds(100); hi != time.Duration(math.MaxInt64) {
		t.Errorf("jittered saturated Bounds hi = %s, want saturation", hi)
	}
}

func TestBackoffValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b    Backoff
		want string
	}{
		{Backoff{}, "Backoff.Base is 0s"},
		{Backoff{Base: time.Second, Max: -1}, "Backoff.Max"},
		{Backoff{Base: time.Second, Jitter: 1}, "Backoff.Jitter is 1"},
		{Backoff{Base: time.Second, Jitter: -0.1}, "Backoff.Jitter"},
		{Backoff{Base: time.Second, Jitter: math.NaN()}, "Backoff.Jitter"},
		{Backoff{Strategy: 7, Base: time.Second}, "Backoff.Strategy is 7"},
	} {
		err := tc.b.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v.Validate() = %v, want an error containing %q", tc.b, err, tc.want)
		}
	}
	if got := []string{Exponential.String(), Fixed.String(), Linear.String()}; !cmp.Equal(got, []string{"exponential", "fixed", "linear"}) {
		t.Errorf("strategy names = %v", got)
	}
}
