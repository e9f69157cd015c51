package workflow

import (
	"testing"

	"github.com/riverqueue/river/rivertype"
)

func TestReadsChildrenOnlySkipsTheFirstAttemptOfAFunctionsFirstTurn(t *testing.T) {
	t.Parallel()
	fn := &definition{name: "fn"}
	dag := &definition{name: "graph", dag: &dagSpec{}}
	first := []byte(`{"braid_first": true, "braid_link": {"kind": "spawning turn", "traceparent": "x"}}`)
	for _, tc := range []struct {
		name     string
		metadata []byte
		attempt  int
		def      *definition
		want     bool
	}{
		{"first turn, first attempt", first, 1, fn, false},
		{"first turn, a later attempt", first, 2, fn, true},
		{"first turn of a DAG", first, 1, dag, true},
		{"a later turn", []byte(`{"braid_link": {"kind": "releasing child", "traceparent": "x"}}`), 1, fn, true},
		{"no metadata", nil, 1, fn, true},
		{"marker false", []byte(`{"braid_first": false}`), 1, fn, true},
		{"marker not a boolean", []byte(`{"braid_first": "yes"}`), 1, fn, true},
	} {
		job := &rivertype.JobRow{Attempt: tc.attempt, Metadata: tc.metadata}
		if got := readsChildren(job, tc.def); got != tc.want {
			t.Errorf("%s: readsChildren = %v, want %v", tc.name, got, tc.want)
		}
	}
}
