package workflow

import "github.com/riverqueue/river/rivertype"

// SetHookBeforeContinuation sets a function that runs after a batch that
// claimed a continuation committed, before the continuation's turn starts.
func SetHookBeforeContinuation(f func(row *rivertype.JobRow)) { testHookBeforeContinuation = f }

// TopicWaitsSQL is the query by which a publish finds the waits on its
// topic.
const TopicWaitsSQL = topicWaitsSQL

// StepsQueued is how many step records wait for a statement to carry
// them.
func StepsQueued(e *Engine) int { return len(e.recorder.in) }
