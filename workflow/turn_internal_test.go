package workflow

import (
	"testing"

	"github.com/riverqueue/river/rivertype"
)

func TestReadsChildrenOnlySkipsTheFirstAttemptOfAFunctionsFirstTurn(t *testing.T) {
	t.Parallel()
	fn := &definition{name: "fn"}
	dag := &definition{name: "graph", dag: &dagSpec{}}
	first := []string{"feeds", "first_turn"}
	for _, tc := range []struct {
		name    string
		tags    []string
		attempt int
		def     *definition
		want    bool
	}{
		{"first turn, first attempt", first, 1, fn, false},
		{"first turn, a later attempt", first, 2, fn, true},
		{"first turn of a DAG", first, 1, dag, true},
		{"a later turn", []string{"feeds"}, 1, fn, true},
		{"no tags", nil, 1, fn, true},
		{"a tag that only looks like it", []string{"first_turns"}, 1, fn, true},
	} {
		job := &rivertype.JobRow{Attempt: tc.attempt, Tags: tc.tags}
		if got := readsChildren(job, tc.def); got != tc.want {
			t.Errorf("%s: readsChildren = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMayHaveChildrenUnlessAKnownFunctionsFirstTurn(t *testing.T) {
	t.Parallel()
	fn := &definition{name: "fn"}
	dag := &definition{name: "graph", dag: &dagSpec{}}
	for _, tc := range []struct {
		name  string
		first bool
		def   *definition
		want  bool
	}{
		{"first turn of a function", true, fn, false},
		{"later turn of a function", false, fn, true},
		{"first turn of a DAG", true, dag, true},
		{"first turn of a workflow this process does not know", true, nil, true},
	} {
		if got := mayHaveChildren(tc.first, tc.def); got != tc.want {
			t.Errorf("%s: mayHaveChildren = %v, want %v", tc.name, got, tc.want)
		}
	}
}
