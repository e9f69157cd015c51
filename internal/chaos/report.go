package chaos

import "maps"

// Report is what a chaos run observed. It encodes to the JSON that
// `braid chaos` prints.
type Report struct {
	Machine   Machine          `json:"machine"`
	Config    ReportConfig     `json:"config"`
	Scenarios []ScenarioReport `json:"scenarios"`
	Total     Figures          `json:"total"`
	// OK is true when every scenario ran and shows no lost run, no step
	// recorded twice, no side effect duplicated and no deadlock.
	OK       bool     `json:"ok"`
	Seconds  float64  `json:"seconds"`
	Problems []string `json:"problems,omitempty"`
}

// Machine describes where the figures were taken.
type Machine struct {
	CPUs     int    `json:"cpus"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
	Fsync    string `json:"fsync"`
}

// ReportConfig is the configuration the run used.
type ReportConfig struct {
	Quick          bool     `json:"quick"`
	Workers        int      `json:"workers"`
	DurationS      float64  `json:"duration_s"`
	PhaseS         float64  `json:"phase_s"`
	SettleTimeoutS float64  `json:"settle_timeout_s"`
	Scenarios      []string `json:"scenarios"`
}

// ScenarioReport is one scenario's figures.
type ScenarioReport struct {
	Name string `json:"name"`
	Figures
	// Error is set when the scenario could not be driven to its end (a
	// failure of the harness or of the cluster, not a finding).
	Error string `json:"error,omitempty"`
	// LostRuns describes up to a few lost runs, for diagnosis.
	LostRuns []LostRun `json:"lost_runs,omitempty"`
}

// Figures are the counts of one scenario, or their total.
type Figures struct {
	// Started is how many runs the scenario started.
	Started int `json:"started"`
	// Completed is how many of them ended completed, with the right output.
	Completed int `json:"completed"`
	// Failed is how many runs failed on purpose, as the scenario meant.
	Failed int `json:"failed"`
	// Lost is how many runs did not settle within the bound, or settled
	// with the wrong outcome.
	Lost int `json:"lost"`
	// StepsRecordedTwice counts steps whose recorded result is not the one
	// every consumer saw.
	StepsRecordedTwice int `json:"steps_recorded_twice"`
	// SideEffectsDuplicated counts logical steps whose external side
	// effect was applied more than once.
	SideEffectsDuplicated int `json:"side_effects_duplicated"`
	// Deadlocks is the growth of pg_stat_database.deadlocks.
	Deadlocks int64 `json:"deadlocks"`
	// SettleSeconds is the time from the last fault until every run had
	// settled (the bound when they did not).
	SettleSeconds float64 `json:"settle_seconds"`
	// Settled is false when the settle bound passed first.
	Settled bool `json:"settled"`
	// RetrySettleSeconds is the time from retrying the runs that failed on
	// purpose until they had all settled again.
	RetrySettleSeconds float64 `json:"retry_settle_seconds,omitempty"`
	// Faults counts injected faults, FaultKinds by kind.
	Faults     int            `json:"faults"`
	FaultKinds map[string]int `json:"fault_kinds,omitempty"`
	// StepReruns counts step bodies that ran again after their first run
	// (allowed: steps run at least once).
	StepReruns int `json:"step_reruns"`
	// EffectsRefused counts repeated side effects that the idempotency key
	// turned away.
	EffectsRefused int `json:"effects_refused"`
	// Retried counts runs retried by the coordinator (after failing on
	// purpose, or after a Cancel).
	Retried int `json:"retried"`
	// Cancels and Retries count the storm's calls that took effect.
	Cancels int `json:"cancels,omitempty"`
	Retries int `json:"retries,omitempty"`
	// OpErrors counts unexpected errors of coordinator calls (Cancel,
	// Retry, Start) by kind.
	OpErrors map[string]int `json:"op_errors,omitempty"`
	// WorkerExits counts worker processes that exited by themselves; the
	// coordinator starts a replacement, as a supervisor would.
	WorkerExits int `json:"worker_exits"`
	// LeaseTakeoverSeconds is the longest time from killing the delay
	// lease's holder until another process held it.
	LeaseTakeoverSeconds float64 `json:"lease_takeover_seconds,omitempty"`
}

// LostRun describes a lost run: what was expected and where it stands.
type LostRun struct {
	ID       string   `json:"id"`
	Workflow string   `json:"workflow"`
	Expected string   `json:"expected"`
	Status   string   `json:"status"`
	Why      string   `json:"why"`
	Error    string   `json:"error,omitempty"`
	Tasks    []string `json:"tasks,omitempty"`
	Turns    []string `json:"turns,omitempty"`
}

// clean reports whether f shows none of the four defects.
func (f *Figures) clean() bool {
	return f.Lost == 0 && f.StepsRecordedTwice == 0 && f.SideEffectsDuplicated == 0 && f.Deadlocks == 0
}

// add adds g's counts to f; SettleSeconds and LeaseTakeoverSeconds keep the
// largest.
func (f *Figures) add(g *Figures) {
	f.Started += g.Started
	f.Completed += g.Completed
	f.Failed += g.Failed
	f.Lost += g.Lost
	f.StepsRecordedTwice += g.StepsRecordedTwice
	f.SideEffectsDuplicated += g.SideEffectsDuplicated
	f.Deadlocks += g.Deadlocks
	f.SettleSeconds = max(f.SettleSeconds, g.SettleSeconds)
	f.RetrySettleSeconds = max(f.RetrySettleSeconds, g.RetrySettleSeconds)
	f.Faults += g.Faults
	f.FaultKinds = addCounts(f.FaultKinds, g.FaultKinds)
	f.StepReruns += g.StepReruns
	f.EffectsRefused += g.EffectsRefused
	f.Retried += g.Retried
	f.Cancels += g.Cancels
	f.Retries += g.Retries
	f.OpErrors = addCounts(f.OpErrors, g.OpErrors)
	f.WorkerExits += g.WorkerExits
	f.LeaseTakeoverSeconds = max(f.LeaseTakeoverSeconds, g.LeaseTakeoverSeconds)
}

func addCounts(a, b map[string]int) map[string]int {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = map[string]int{}
	}
	for k, v := range maps.All(b) {
		a[k] += v
	}
	return a
}
