package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Scenario names, in the order Run drives them.
const (
	ScenarioKill    = "kill"
	ScenarioRestart = "restart"
	ScenarioFreeze  = "freeze"
	ScenarioLease   = "lease"
	ScenarioStorm   = "storm"
	ScenarioTimeout = "timeout"
	ScenarioErrors  = "errors"
)

// Scenarios lists every scenario in the order Run drives them.
var Scenarios = []string{ScenarioKill, ScenarioRestart, ScenarioFreeze, ScenarioLease, ScenarioStorm, ScenarioTimeout, ScenarioErrors}

// Defaults of Config.
const (
	// DurationDefault is the total time of the fault phases of a full run.
	DurationDefault = 5 * time.Minute
	// QuickDurationDefault is the total time of the fault phases of a
	// quick run, the smoke size.
	QuickDurationDefault = 28 * time.Second
	// WorkersDefault is how many worker processes run at once.
	WorkersDefault = 3
	// SettleTimeoutDefault bounds the wait for runs to settle after the
	// last fault of a scenario; what has not settled by then is lost.
	SettleTimeoutDefault = 90 * time.Second
	// QuickSettleTimeoutDefault is SettleTimeoutDefault of a quick run.
	QuickSettleTimeoutDefault = 25 * time.Second
)

// Config configures a chaos run. The zero value runs every scenario at full
// size, but WorkerCommand is required.
type Config struct {
	// WorkerCommand is the program and arguments that start one worker
	// process; Run adds EnvWorker to its environment. The braid command
	// passes its own executable in its hidden worker mode; a test passes
	// its own binary. Required.
	WorkerCommand []string

	// Duration is the total time of the fault phases, shared among the
	// scenarios that run; settling comes on top. Default DurationDefault,
	// or QuickDurationDefault when Quick.
	Duration time.Duration

	// Workers is how many worker processes run at once. Default
	// WorkersDefault.
	Workers int

	// Quick selects the smoke size: fewer and smaller runs, shorter
	// phases and a shorter settle bound.
	Quick bool

	// Scenarios selects the scenarios to run, in the order of Scenarios.
	// Default: all.
	Scenarios []string

	// SettleTimeout bounds the wait for runs to settle after the last
	// fault. Default SettleTimeoutDefault, or QuickSettleTimeoutDefault
	// when Quick.
	SettleTimeout time.Duration

	// Progress receives a line per phase and per fault. Default:
	// discarded.
	Progress io.Writer

	// WorkerOutput receives what the worker processes print on stderr
	// (their warnings). Default: discarded.
	WorkerOutput io.Writer
}

// withDefaults fills the zero fields and checks the others.
func (c Config) withDefaults() (Config, error) {
	if len(c.WorkerCommand) == 0 {
		return c, fmt.Errorf("chaos: Config.WorkerCommand is required")
	}
	if c.Duration == 0 {
		c.Duration = DurationDefault
		if c.Quick {
			c.Duration = QuickDurationDefault
		}
	}
	if c.Duration < 0 {
		return c, fmt.Errorf("chaos: Duration %s is negative", c.Duration)
	}
	if c.Workers == 0 {
		c.Workers = WorkersDefault
	}
	if c.Workers < 2 {
		return c, fmt.Errorf("chaos: Workers %d: at least 2 are needed, so that a fault always leaves a survivor", c.Workers)
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = SettleTimeoutDefault
		if c.Quick {
			c.SettleTimeout = QuickSettleTimeoutDefault
		}
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = Scenarios
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return c, fmt.Errorf("chaos: unknown scenario %q; the scenarios are %s", s, strings.Join(Scenarios, ", "))
		}
	}
	ordered := make([]string, 0, len(c.Scenarios))
	for _, s := range Scenarios {
		if slices.Contains(c.Scenarios, s) {
			ordered = append(ordered, s)
		}
	}
	c.Scenarios = ordered
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.WorkerOutput == nil {
		c.WorkerOutput = io.Discard
	}
	return c, nil
}

// phase is the length of one scenario's fault phase.
func (c Config) phase() time.Duration {
	d := c.Duration / time.Duration(len(c.Scenarios))
	if d < 2*time.Second {
		d = 2 * time.Second
	}
	return d
}

// size is the load of a scenario: how many runs start per second and how
// big each is.
type size struct {
	rate     float64       // chaos_flow runs started per second
	children int           // children of each chaos_flow's Map
	work     time.Duration // the longest a child's step body works
	delay    time.Duration // the longest chaos_flow's delay
	failing  int           // runs made to fail on purpose, per kind
}

func (c Config) size() size {
	if c.Quick {
		return size{rate: 3, children: 2, work: 300 * time.Millisecond, delay: 800 * time.Millisecond, failing: 1}
	}
	return size{rate: 6, children: 4, work: 800 * time.Millisecond, delay: 2 * time.Second, failing: 3}
}
