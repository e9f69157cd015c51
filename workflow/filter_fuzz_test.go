package workflow

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzFilter compiles arbitrary event filters and evaluates those that
// compile on an arbitrary payload and task input. The property is the
// sandbox's, as for FuzzCondition: nothing panics, every failure is a
// *ConditionError naming the topic and the filter (and no DAG), and
// compiling and evaluating end within conditionBound.
func FuzzFilter(f *testing.F) {
	for _, seed := range []struct{ src, payload, input string }{
		{`payload.parcel == input`, `{"parcel": "P-1"}`, `"P-1"`},
		{`payload.n > input.min && payload.kind in ["a", "b"]`, `{"n": 3, "kind": "a"}`, `{"min": 1}`},
		{`status.payload == "completed"`, `{}`, `{}`},
		{`payload.items | all(# > 0)`, `{"items": [1, 2]}`, `null`},
		{`len(1..1000000000) > 0`, `{}`, `{}`},
		{`repeat(payload.s, 1000000) != ""`, `{"s": "x"}`, `{}`},
		{`payload.String() == ""`, `{}`, `{}`},
		{`payload`, `true`, `{}`},
		{`payload.a.b.c`, `{"a": 1}`, `{}`},
		{strings.Repeat("(", 300) + "true" + strings.Repeat(")", 300), `{}`, `{}`},
		{`input.x ?? payload.y ?? false`, `{"y": true}`, `{"x": null}`},
		{`payload ==`, `{}`, `{}`},
	} {
		f.Add(seed.src, seed.payload, seed.input)
	}
	f.Fuzz(func(t *testing.T, src, payload, input string) {
		c, err := bounded(t, "compiling", src, func() (*condition, error) { return compileFilter("fuzz-topic", src) })
		if err != nil {
			checkFilterError(t, err, src)
			return
		}
		if c == nil || c.source != src || c.topic != "fuzz-topic" {
			t.Fatalf("compiling %q gave %+v", src, c)
		}
		if _, err := bounded(t, "evaluating", src, func() (bool, error) {
			return c.eval(json.RawMessage(input), map[string]json.RawMessage{filterPayload: json.RawMessage(payload)}, nil)
		}); err != nil {
			checkFilterError(t, err, src)
		}
	})
}

func checkFilterError(t *testing.T, err error, src string) {
	t.Helper()
	ce, ok := err.(*ConditionError)
	if !ok {
		t.Fatalf("%q: error %T %v is no *ConditionError", src, err, err)
	}
	if ce.Topic != "fuzz-topic" || ce.DAG != "" || ce.Node != "" || ce.Expr != src || ce.Reason == "" {
		t.Fatalf("%q: error %#v does not name the topic and the filter", src, ce)
	}
	if !strings.HasPrefix(ce.Error(), `workflow: wait on topic "fuzz-topic": filter `) {
		t.Fatalf("%q: error %q does not begin with the topic and the filter", src, ce.Error())
	}
	if strings.HasPrefix(ce.Reason, "panic: ") || strings.HasPrefix(ce.Reason, "compiler panic: ") {
		t.Fatalf("%q: expr panicked: %v", src, err)
	}
}
