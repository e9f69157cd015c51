package bench

import (
	"fmt"
	"slices"
	"time"
)

// trials are the phases that the trials of one scenario measured on each
// side, in the order they ran.
type trials struct {
	river, braid []phase
}

// measureTrials measures a scenario's two sides Sizes.Trials times,
// alternately and River first (River, braid, River, braid, …), so that
// each side meets its share of a shared machine's busy and quiet moments.
func (b *bench) measureTrials(scenario string, river, braid func() (phase, error)) (trials, error) {
	var t trials
	for i := range b.sizes.Trials {
		r, err := river()
		if err != nil {
			return trials{}, err
		}
		br, err := braid()
		if err != nil {
			return trials{}, err
		}
		t.river, t.braid = append(t.river, r), append(t.braid, br)
		if b.sizes.Trials > 1 {
			b.say("%s: trial %d of %d: river %s, braid %s", scenario, i+1, b.sizes.Trials,
				r.elapsed.Round(time.Millisecond), br.elapsed.Round(time.Millisecond))
		}
	}
	return t, nil
}

// median returns the phase whose elapsed time and commits are the medians
// of those of ps, each taken on its own: for an even number of phases, the
// mean of the middle two. ps must not be empty.
func median(ps []phase) phase {
	elapsed := make([]time.Duration, len(ps))
	commits := make([]int64, len(ps))
	for i, p := range ps {
		elapsed[i], commits[i] = p.elapsed, p.commits
	}
	return phase{elapsed: middle(elapsed), commits: middle(commits)}
}

// middle is the median of xs, which must not be empty.
func middle[T time.Duration | int64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// times are the trials' times, for a result.
func (t trials) times() TrialTimes {
	return TrialTimes{Trials: len(t.braid), BraidTrialsS: seconds(t.braid), RiverTrialsS: seconds(t.river)}
}

// seconds lists the elapsed times of ps in seconds, to the millisecond.
func seconds(ps []phase) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = round(p.elapsed.Seconds(), 3)
	}
	return out
}

// medianOf says, for a progress line, that a figure is a median of n
// trials; it says nothing of a single trial.
func medianOf(n int) string {
	if n < 2 {
		return ""
	}
	return fmt.Sprintf(" (median of %d trials)", n)
}
