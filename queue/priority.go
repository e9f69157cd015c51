package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// Priority is a named level of River's job priority. River works the jobs of
// a queue in priority order: every available job of a higher level is
// fetched before any job of a lower one, then oldest first.
//
// The levels map one to one onto River's priorities 1 (highest) to 4:
//
//	PriorityCritical = 1
//	PriorityHigh     = 2
//	PriorityNormal   = 3
//	PriorityLow      = 4
//
// # Defaults
//
// braid's own inserts ([Queue.Insert], [Queue.InsertTx], [Queue.InsertMany],
// [Queue.InsertManyTx]) use PriorityNormal when neither the call's options
// nor the job args' InsertOpts set a priority. River's own insert methods,
// called directly on [Queue.River], keep River's default, priority 1, which
// is PriorityCritical. braid never rewrites a priority River was given,
// because River's options cannot tell "unset" apart from an explicit 1. Code
// that inserts through River directly and wants the normal level sets it:
//
//	client.Insert(ctx, args, &river.InsertOpts{Priority: int(queue.PriorityNormal)})
//
// or declares it once on its args with river.JobArgsWithInsertOpts.
type Priority int

// The named priority levels, highest first.
const (
	PriorityCritical Priority = 1
	PriorityHigh     Priority = 2
	PriorityNormal   Priority = 3
	PriorityLow      Priority = 4
)

// PriorityDefault is the level braid's own insert methods use when no
// priority is set.
const PriorityDefault = PriorityNormal

// String returns the level's name: "critical", "high", "normal" or "low".
func (p Priority) String() string {
	switch p {
	case PriorityCritical:
		return "critical"
	case PriorityHigh:
		return "high"
	case PriorityNormal:
		return "normal"
	case PriorityLow:
		return "low"
	}
	return fmt.Sprintf("Priority(%d)", int(p))
}

// Validate returns an error unless p is one of the four levels.
func (p Priority) Validate() error {
	if p < PriorityCritical || p > PriorityLow {
		return fmt.Errorf("queue: priority %d is out of range; it must be 1 (critical) to 4 (low)", int(p))
	}
	return nil
}

// ParsePriority reads a level by name ("critical", "high", "normal", "low",
// in any case) or by River's number ("1" to "4").
func ParsePriority(s string) (Priority, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "critical":
		return PriorityCritical, nil
	case "high":
		return PriorityHigh, nil
	case "normal":
		return PriorityNormal, nil
	case "low":
		return PriorityLow, nil
	}
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
		p := Priority(n)
		if p.Validate() == nil {
			return p, nil
		}
	}
	return 0, fmt.Errorf("queue: unknown priority %q; use critical, high, normal, low or 1 to 4", s)
}
