package queue

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Strategy is how a Backoff's delay grows from one attempt to the next.
type Strategy int

const (
	// Exponential doubles the delay after every attempt: Base, 2·Base,
	// 4·Base, … It is the zero value, so a Backoff without a Strategy is
	// exponential.
	Exponential Strategy = iota

	// Fixed waits Base after every attempt.
	Fixed

	// Linear grows the delay by Base after every attempt: Base, 2·Base,
	// 3·Base, …
	Linear
)

// String returns "exponential", "fixed" or "linear".
func (s Strategy) String() string {
	switch s {
	case Exponential:
		return "exponential"
	case Fixed:
		return "fixed"
	case Linear:
		return "linear"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// JitterMax is the largest Backoff.Jitter accepted: a jitter of 1 or more
// could make a delay zero or negative.
const JitterMax = 0.99

// Backoff is a retry delay schedule: fixed, linear or exponential growth
// from Base, capped at Max, spread by ±Jitter.
//
// A Backoff is a river.ClientRetryPolicy, so it can be Config.RetryPolicy,
// and its NextRetry also serves a worker's own schedule:
//
//	func (w *MyWorker) NextRetry(job *river.Job[MyArgs]) time.Time {
//		return queue.Backoff{Strategy: queue.Linear, Base: 10 * time.Second, Max: time.Minute}.NextRetry(job.JobRow)
//	}
//
// The zero value is not useful: Base must be positive. Validate reports
// what is wrong with a Backoff; New validates Config.RetryPolicy when it is
// a Backoff.
type Backoff struct {
	// Strategy is how the delay grows. The zero value is Exponential.
	Strategy Strategy

	// Base is the delay after the first attempt, and the step of Linear
	// growth. It must be positive.
	Base time.Duration

	// Max caps the delay before jitter is applied, so the delay actually
	// waited lies within Max·(1 ± Jitter). Zero means no cap (delays still
	// stop growing at about 292 years, the largest time.Duration).
	Max time.Duration

	// Jitter spreads each delay uniformly over ±Jitter of itself, so that
	// jobs failing together do not retry together. It is a fraction: 0.2
	// means ±20%. It must be within [0, JitterMax]; zero disables jitter.
	Jitter float64
}

// DefaultBackoff is the default retry policy: 1 minute × 2^(n−1) after the
// n-th failed attempt, capped at 24 hours, with ±20% jitter. The first retry
// comes 48–72 s after the first failure, the second 96–144 s after the
// second, and from the 12th failure on every retry waits 19.2–28.8 hours.
var DefaultBackoff = Backoff{Exponential, time.Minute, 24 * time.Hour, 0.2}

var _ river.ClientRetryPolicy = Backoff{}

// Validate returns an error naming the offending field when b cannot be
// used.
func (b Backoff) Validate() error {
	switch {
	case b.Strategy != Exponential && b.Strategy != Fixed && b.Strategy != Linear:
		return fmt.Errorf("queue: Backoff.Strategy is %d; it must be Exponential, Fixed or Linear", int(b.Strategy))
	case b.Base <= 0:
		return fmt.Errorf("queue: Backoff.Base is %s; it must be positive", b.Base)
	case b.Max < 0:
		return fmt.Errorf("queue: Backoff.Max is %s; it must be positive, or zero for no cap", b.Max)
	case math.IsNaN(b.Jitter) || b.Jitter < 0 || b.Jitter > JitterMax:
		return fmt.Errorf("queue: Backoff.Jitter is %v; it must be within [0, %v]", b.Jitter, JitterMax)
	}
	return nil
}

// Nominal returns the delay after the given failed attempt before jitter:
// Base for Fixed, Base·attempt for Linear, Base·2^(attempt−1) for
// Exponential, capped at Max.
//
// Attempts count from 1, as River's job.Attempt does: the delay after the
// first failed attempt is Nominal(1). An attempt below 1 counts as 1.
func (b Backoff) Nominal(attempt int) time.Duration {
	attempt = max(attempt, 1)
	limit := time.Duration(math.MaxInt64)
	if b.Max > 0 {
		limit = b.Max
	}
	if b.Base <= 0 {
		return 0
	}
	var d time.Duration
	switch b.Strategy {
	case Fixed:
		d = b.Base
	case Linear:
		if int64(attempt) > int64(limit/b.Base) {
			return limit
		}
		d = b.Base * time.Duration(attempt)
	default: // Exponential
		shift := attempt - 1
		if shift >= 63 || b.Base > limit>>shift {
			return limit
		}
		d = b.Base << shift
	}
	return min(d, limit)
}

// Bounds returns the shortest and longest delay Delay can return for the
// given attempt: Nominal(attempt)·(1 ± Jitter).
func (b Backoff) Bounds(attempt int) (lo, hi time.Duration) {
	n := b.Nominal(attempt)
	return scale(n, 1-b.Jitter), scale(n, 1+b.Jitter)
}

// Delay returns how long to wait after the given failed attempt (counted
// from 1): Nominal(attempt) spread uniformly over ±Jitter.
func (b Backoff) Delay(attempt int) time.Duration {
	n := b.Nominal(attempt)
	if b.Jitter <= 0 {
		return n
	}
	return scale(n, 1+b.Jitter*(2*rand.Float64()-1))
}

// NextRetry returns when a job whose attempt job.Attempt just failed should
// run again: now plus Delay(job.Attempt). It implements
// river.ClientRetryPolicy and suits a worker's NextRetry.
func (b Backoff) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(b.Delay(job.Attempt))
}

// scale multiplies d by f, saturating at the largest duration.
func scale(d time.Duration, f float64) time.Duration {
	v := float64(d) * f
	if v >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	if v <= 0 {
		return 0
	}
	return time.Duration(v)
}

// validateRetryPolicy checks a Backoff given as a retry policy.
func validateRetryPolicy(p river.ClientRetryPolicy) error {
	switch b := p.(type) {
	case Backoff:
		return b.Validate()
	case *Backoff:
		if b == nil {
			return errors.New("queue: Config.RetryPolicy is a nil *Backoff")
		}
		return b.Validate()
	}
	return nil
}
