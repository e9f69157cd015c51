package workflow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/braidflow/braid/queue"
)

// MaxAttemptsDefault is how many River attempts a turn of a task gets when
// the definition does not say.
const MaxAttemptsDefault = 25

// Definition is a registered workflow, whatever its input and output types.
// *Workflow[In, Out] implements it.
type Definition interface {
	// Name is the workflow's unique name.
	Name() string
	def() *definition
}

// definition is the untyped core of a Workflow.
type definition struct {
	name        string
	fn          func(t *Task, input json.RawMessage) (json.RawMessage, error)
	retry       *queue.Backoff
	maxAttempts int
	queue       string
	priority    queue.Priority
	timeout     time.Duration
	runTimeout  time.Duration // the deadline of each run, from its start; 0 for none
	dag         *dagSpec      // the graph of a DAG; nil for a function
	err         error         // a problem found by Define or DAG, reported by NewEngine
}

// Workflow is a typed durable function. Create it with Define, register it
// with NewEngine, and start runs with Start or StartTx.
type Workflow[In, Out any] struct {
	d *definition
}

// Name is the workflow's unique name.
func (w *Workflow[In, Out]) Name() string { return w.d.name }

func (w *Workflow[In, Out]) def() *definition { return w.d }

// Option configures a workflow definition.
type Option func(*definition)

// WithRetry sets the backoff between attempts of a turn that returned an
// error. Default: queue.DefaultBackoff.
func WithRetry(b queue.Backoff) Option { return func(d *definition) { d.retry = &b } }

// WithMaxAttempts sets how many attempts a turn gets before the task fails.
// Default MaxAttemptsDefault.
func WithMaxAttempts(n int) Option { return func(d *definition) { d.maxAttempts = n } }

// WithQueue sets the River queue of the workflow's turns. Queues stand for
// worker capabilities: only processes that work the queue run its turns.
// Default "default".
func WithQueue(name string) Option { return func(d *definition) { d.queue = name } }

// WithPriority sets the priority of the workflow's turns. Default
// queue.PriorityNormal.
func WithPriority(p queue.Priority) Option { return func(d *definition) { d.priority = p } }

// WithTimeout bounds one turn. Its context is cancelled when the timeout
// passes, and the attempt fails. Default: River's job timeout.
func WithTimeout(d time.Duration) Option { return func(def *definition) { def.timeout = d } }

// WithRunTimeout gives every run of the workflow a durable deadline: d
// after the run starts, by the database's clock, the run is cancelled
// with everything in it, and Result returns a *TimeoutError. A run's
// StartOpts.Timeout overrides it. It bounds the whole run, delays and
// children included; the turn timeout is WithTimeout. Default 0: no
// deadline. See "Run deadlines" in the package documentation.
func WithRunTimeout(d time.Duration) Option { return func(def *definition) { def.runTimeout = d } }

// Define declares a workflow: a named, typed durable function. Input and
// output travel as JSON. Problems with the definition (an empty name, a nil
// function, a bad option) are reported by NewEngine.
func Define[In, Out any](name string, fn func(t *Task, in In) (Out, error), opts ...Option) *Workflow[In, Out] {
	d := &definition{name: name, maxAttempts: MaxAttemptsDefault, queue: "default", priority: queue.PriorityNormal}
	for _, o := range opts {
		o(d)
	}
	queueErr := queue.ValidateQueueName(d.queue)
	switch {
	case checkDefinitionName(name) != nil:
		d.err = checkDefinitionName(name)
	case fn == nil:
		d.err = &DefinitionError{Workflow: name, Reason: "the function is nil"}
	case d.maxAttempts < 1:
		d.err = &DefinitionError{Workflow: name, Reason: fmt.Sprintf("max attempts %d is below 1", d.maxAttempts)}
	case d.queue == "":
		d.err = &DefinitionError{Workflow: name, Reason: "the queue name is empty"}
	case queueErr != nil:
		d.err = &DefinitionError{Workflow: name, Reason: queueErr.Error()}
	case d.priority < queue.PriorityCritical || d.priority > queue.PriorityLow:
		d.err = &DefinitionError{Workflow: name, Reason: fmt.Sprintf("priority %d is outside %d-%d", d.priority, queue.PriorityCritical, queue.PriorityLow)}
	case d.timeout < 0:
		d.err = &DefinitionError{Workflow: name, Reason: "the timeout is negative"}
	case d.runTimeout < 0:
		d.err = &DefinitionError{Workflow: name, Reason: fmt.Sprintf("the run timeout %s is negative", d.runTimeout)}
	}
	d.fn = func(t *Task, raw json.RawMessage) (json.RawMessage, error) {
		var in In
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, &EncodeError{What: fmt.Sprintf("input of workflow %q", name), Err: err}
		}
		out, err := fn(t, in)
		if err != nil {
			return nil, err
		}
		return t.eng.encode(fmt.Sprintf("output of workflow %q", name), out)
	}
	return &Workflow[In, Out]{d: d}
}

// checkDefinitionName checks a workflow's name: 1 to 200 bytes.
func checkDefinitionName(name string) error {
	switch {
	case name == "":
		return &DefinitionError{Workflow: name, Reason: "the name is empty"}
	case len(name) > 200:
		return &DefinitionError{Workflow: name[:40] + "…", Reason: fmt.Sprintf("the name is %d bytes, over the limit of 200", len(name))}
	case !isText(name):
		return &DefinitionError{Workflow: fmt.Sprintf("%q", name), Reason: "the name is not UTF-8 text without NUL characters"}
	}
	return nil
}
