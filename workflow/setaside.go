package workflow

import (
	"time"

	"github.com/google/uuid"
)

// setAsideMin and setAsideMax bound how long the delay processor leaves
// out a row whose wake or cancel failed on its own, and the reconciler a
// task it failed to settle: the first failure sets it aside for
// setAsideMin, and each failure after that for twice as long as the one
// before, up to setAsideMax.
const (
	setAsideMin = time.Second
	setAsideMax = 5 * time.Minute
)

// setAside are the rows (due delays by task and name, overdue runs by ID)
// whose wake or cancel failed even in a transaction of its own, with a
// fault of the row itself (see rowFault), or, for a moment, whose rows
// another transaction held (busy), and when each may be tried again. Until then the delay processor's statements leave them out, so
// that rows that always fail neither fill its batches, ahead of the due
// rows behind them, nor hold it to a full poll interval. A row tried again
// that fails again is set aside for longer; one that is woken or
// cancelled is forgotten, and so is one that has not failed for
// setAsideMax since it was last due to be tried. The reconciler sets aside
// the tasks it failed to settle the same way (reconcileAside), so that a
// task that keeps failing is neither tried nor logged at every look.
//
// The record belongs to one delay processor, in memory: a process that
// takes the lease over tries each row again once. It is not safe for
// concurrent use.
type setAside[K comparable] struct {
	rows map[K]aside
}

type aside struct {
	until time.Time
	pause time.Duration
	// failures counts the failures since k was last done, or forgotten.
	failures int
}

// fail records that k failed at now, and returns how long it is set
// aside.
func (s *setAside[K]) fail(k K, now time.Time) time.Duration {
	if s.rows == nil {
		s.rows = map[K]aside{}
	}
	a := s.rows[k]
	a.pause = min(max(2*a.pause, setAsideMin), setAsideMax)
	a.until = now.Add(a.pause)
	a.failures++
	s.rows[k] = a
	return a.pause
}

// busy records that k's row was held by another transaction at now: it is
// left out for setAsideMin, so that rows that others hold do not fill the
// next batches ahead of the rows behind them. Unlike fail, it counts no
// failure and does not lengthen the pause of the next failure: the row is
// not at fault, and is tried again as soon as the pause is over.
func (s *setAside[K]) busy(k K, now time.Time) {
	if s.rows == nil {
		s.rows = map[K]aside{}
	}
	a := s.rows[k]
	a.until = later(a.until, now.Add(setAsideMin))
	s.rows[k] = a
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// failures returns how often k failed since it was last done, or
// forgotten.
func (s *setAside[K]) failures(k K) int { return s.rows[k].failures }

// done forgets k, which was woken or cancelled.
func (s *setAside[K]) done(k K) { delete(s.rows, k) }

// held returns the rows set aside at now, and the earliest moment one of
// them may be tried again (zero when there is none). It forgets the rows
// whose last failure is long past.
func (s *setAside[K]) held(now time.Time) (keys []K, next time.Time) {
	for k, a := range s.rows {
		switch {
		case a.until.After(now):
			keys = append(keys, k)
			if next.IsZero() || a.until.Before(next) {
				next = a.until
			}
		case now.Sub(a.until) > setAsideMax:
			delete(s.rows, k)
		}
	}
	return keys, next
}

// stepKeyArrays splits keys into the arrays of task IDs and names that the
// delay processor's statements take.
func stepKeyArrays(keys []stepKey) ([][16]byte, []string) {
	tasks, names := make([]uuid.UUID, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tasks[i], names[i] = k.taskID, k.name
	}
	return pgIDs(tasks), names
}
