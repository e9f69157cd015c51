package leases

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leaser is the small contract of a lease service: one attempt to take a
// lease, a heartbeat that extends it, and a release that gives it up.
//
// Every lease carries a fencing generation. Renew and Release only succeed for
// the exact (name, holder, generation) that is still current and unexpired;
// otherwise they return an error matching ErrLeaseNotHeld, so a holder that
// was replaced can never extend or drop its successor's lease.
type Leaser interface {
	// TryAcquire makes one attempt to take the named lease. It returns an
	// error matching ErrLeaseHeld (a *HeldError) when another holder has an
	// unexpired lease.
	TryAcquire(ctx context.Context, name string) (*Lease, error)

	// Renew extends a lease that is still held and returns its new state.
	// The generation is unchanged. It returns an error matching
	// ErrLeaseNotHeld when the lease expired or has a new holder.
	Renew(ctx context.Context, lease *Lease) (*Lease, error)

	// Release gives up a lease that is still held, making it available to
	// others at once. It returns an error matching ErrLeaseNotHeld when the
	// lease expired or has a new holder.
	Release(ctx context.Context, lease *Lease) error
}

// Lease is one term of ownership of a named lease. All times come from the
// database clock.
type Lease struct {
	// Name identifies the lease, for example "braid:delays".
	Name string

	// Holder identifies the process that holds (or last held) the lease.
	Holder string

	// Generation is the fencing token. It increases every time a new term
	// starts (a change of holder, a take-over after expiry, or a new
	// acquisition by the same holder) and stays the same across renewals.
	Generation int64

	// AcquiredAt is when the current term started.
	AcquiredAt time.Time

	// RenewedAt is when the lease was last acquired or renewed.
	RenewedAt time.Time

	// ExpiresAt is when the lease lapses unless renewed first.
	ExpiresAt time.Time

	// Expired reports whether ExpiresAt had passed on the database clock when
	// the lease was read. It is only ever true for leases returned by List.
	Expired bool
}

// ErrLeaseHeld is matched (with errors.Is) by the error TryAcquire returns
// when another holder has an unexpired lease. The error itself is a
// *HeldError naming the holder.
var ErrLeaseHeld = errors.New("lease is held by another holder")

// ErrLeaseNotHeld is returned by Renew, Release and CheckTx when the given
// term of the lease is no longer current: it expired, was released, or a new
// term started. Run's error matches it when the lease was lost while the
// function was running.
var ErrLeaseNotHeld = errors.New("lease not held")

// ErrNoHolder is returned by Holder when nobody holds the lease: it does not
// exist, was released, or expired.
var ErrNoHolder = errors.New("lease has no holder")

// HeldError is returned by TryAcquire when another holder has an unexpired
// lease. It matches ErrLeaseHeld with errors.Is.
type HeldError struct {
	// Name is the lease that could not be acquired.
	Name string

	// Holder is the current holder.
	Holder string

	// Generation is the current holder's generation.
	Generation int64

	// ExpiresAt is when the current holder's lease lapses unless renewed,
	// on the database clock.
	ExpiresAt time.Time

	// remaining is how long until ExpiresAt, measured on the database clock
	// when the lease was read. Acquire uses it to retry shortly after expiry.
	remaining time.Duration
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("leases: lease %q is held by %q (generation %d) until %s",
		e.Name, e.Holder, e.Generation, e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Is reports whether target is ErrLeaseHeld.
func (e *HeldError) Is(target error) bool { return target == ErrLeaseHeld }

// LostError is returned by Run when the lease was lost while its function was
// running: a renewal found the term no longer current, or renewals could not
// succeed before the lease expired. It matches ErrLeaseNotHeld with
// errors.Is, and unwraps to the cause.
type LostError struct {
	// Name is the lease that was lost.
	Name string

	// Holder is the holder that lost it.
	Holder string

	// Generation is the term that was lost.
	Generation int64

	// Cause says why: an error matching ErrLeaseNotHeld from a renewal, or
	// the last renewal error when the lease ran out before one succeeded.
	Cause error
}

// Error implements error.
func (e *LostError) Error() string {
	return fmt.Sprintf("leases: lost lease %q (holder %q, generation %d): %v",
		e.Name, e.Holder, e.Generation, e.Cause)
}

// Is reports whether target is ErrLeaseNotHeld.
func (e *LostError) Is(target error) bool { return target == ErrLeaseNotHeld }

// Unwrap returns the cause.
func (e *LostError) Unwrap() error { return e.Cause }
