package workflow

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// FuzzCondition compiles arbitrary When expressions and evaluates those that
// compile on an arbitrary JSON input, which is also the output of the
// dependency a. The property is the sandbox's: nothing panics, every failure
// is a *ConditionError, and every compilation and evaluation ends, with a
// value or an error, within conditionBound. The seeds are the known ways to
// blow a naive sandbox up: huge ranges, nested loops, repeat, long strings,
// deep nesting and method calls.
func FuzzCondition(f *testing.F) {
	long := strings.Repeat("x", 200)
	inputs := []string{
		`{"n": 3, "s": "abc", "items": [1, 2, 3], "user": {"name": "Ada", "tags": ["a", "b"]}}`,
		`{"big": 1e9, "lo": -9e18, "hi": 9e18, "neg": -1, "zero": 0, "nan": "NaN"}`,
		`{"s": "` + long + `", "items": [` + strings.TrimSuffix(strings.Repeat(`"`+long[:20]+`",`, 8), ",") + `]}`,
		strings.Repeat("[", 100) + strings.Repeat("]", 100),
		`null`, `[]`, `"text"`, `1e308`, `{"a":`,
	}
	sources := []string{
		`a.n > 0 && status.a == "completed"`,
		`input.user.tags[1] == "b" && b == nil`,
		`any(input.items, # > 2)`,
		// huge ranges
		`len(1..1000000000) > 0`,
		`1..1000000000 | filter(# % 2 == 0) | len() > 0`,
		`len(filter(1..1000000000, # > 0)) > 0`,
		`sum(1..1000000000) > 0`,
		`1000000000 in 1..1000000000`,
		`len(int(input.lo)..int(input.hi)) == 0`,
		`len(1..int(input.big)) > 0`,
		`-9223372036854775807..9223372036854775807 | len() > 0`,
		`all(1..100000, {all(1..100000, {all(1..100000, true)})})`,
		`len(map(1..999999, 1..999999)) > 0`,
		// nested loops over data
		`all(input.items, {all(input.items, {all(input.items, {all(input.items, # == #)})})})`,
		`count(input.items, {count(input.items, {count(input.items, true) > 0}) > 0}) > 0`,
		// string blow-ups
		`repeat("x", 1000000000) == ""`,
		`repeat(repeat("x", 100000), 100000) != ""`,
		`replace(input.s, "", input.s) != ""`,
		`join(map(1..100000, input.s), "") != ""`,
		`len(map(1..100000, input.s + input.s)) > 0`,
		`len(map(1..100000, upper(input.s))) > 0`,
		`len(map(1..100000, keys(input))) > 0`,
		`string(map(1..100000, input)) != ""`,
		`let s = input.s; let t = s + s; let u = t + t; u + u != ""`,
		`reduce(1..100000, #acc + input.s, "") != ""`,
		`"` + strings.Repeat("long string ", 30) + `" != ""`,
		`toJSON(input) != "" && fromJSON("[1]") != nil`,
		// method calls and escapes from the data
		`input.String() == ""`,
		`input["String"]() == ""`,
		`a.Len() > 0`,
		`$env == nil`,
		`$env[" budget"] != nil`,
		`now() > date("2020-01-01")`,
		`env("HOME") != ""`,
		// deep nesting
		strings.Repeat("(", 300) + "true" + strings.Repeat(")", 300),
		strings.Repeat("!", 600) + "true",
		strings.Repeat("[", 300) + strings.Repeat("]", 300) + " == nil",
		strings.Repeat("a.b.", 150) + "c == 1",
		strings.Repeat("-", 600) + "1 > 0",
		strings.Repeat("all(input.items, {", 20) + "true" + strings.Repeat("})", 20),
		// runtime errors
		`int(input.n) % 0 == 0`,
		`input.items[1000000] == 0`,
		`a.b.c.d > 0`,
		`input.s matches input.s`,
		`input`,
	}
	for i, src := range sources {
		f.Add(src, inputs[i%len(inputs)])
	}
	for _, in := range inputs {
		f.Add(`a == input`, in)
	}
	deps := []string{"a", "b"}
	f.Fuzz(func(t *testing.T, src, input string) {
		c, err := bounded(t, "compiling", src, func() (*condition, error) {
			return compileCondition("fuzz", "node", src, deps)
		})
		if err != nil {
			checkConditionError(t, err, src)
			return
		}
		if c == nil || c.source != src || c.node != "node" || c.dag != "fuzz" {
			t.Fatalf("compiling %q gave %+v", src, c)
		}
		outputs := map[string]json.RawMessage{"a": json.RawMessage(input), "b": nil}
		status := map[string]string{"a": "completed", "b": "skipped"}
		if _, err := bounded(t, "evaluating", src, func() (bool, error) {
			return c.eval(json.RawMessage(input), outputs, status)
		}); err != nil {
			checkConditionError(t, err, src)
		}
	})
}

// bounded runs fn and fails the test if it panics or does not return
// within conditionBound.
func bounded[T any](t *testing.T, what, src string, fn func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v     T
		err   error
		panic any
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var r result
		defer func() {
			r.panic = recover()
			done <- r
		}()
		r.v, r.err = fn()
	}()
	timer := time.NewTimer(conditionBound)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.panic != nil {
			t.Fatalf("%s %q panicked: %v", what, src, r.panic)
		}
		if d := time.Since(start); d > conditionBound {
			t.Fatalf("%s %q took %v", what, src, d)
		}
		return r.v, r.err
	case <-timer.C:
		t.Fatalf("%s %q did not end within %v", what, src, conditionBound)
		panic("unreachable")
	}
}

func checkConditionError(t *testing.T, err error, src string) {
	t.Helper()
	ce, ok := err.(*ConditionError)
	if !ok {
		t.Fatalf("%q: error %T %v is no *ConditionError", src, err, err)
	}
	if ce.DAG != "fuzz" || ce.Node != "node" || ce.Expr != src || ce.Reason == "" {
		t.Fatalf("%q: error %#v does not name the node and the expression", src, ce)
	}
	if ce.Line < 0 || ce.Column < 0 || (ce.Line > 0) != (ce.Column > 0) {
		t.Fatalf("%q: error %v has position %d:%d", src, err, ce.Line, ce.Column)
	}
	if strings.HasPrefix(ce.Reason, "panic: ") || strings.HasPrefix(ce.Reason, "compiler panic: ") {
		t.Fatalf("%q: expr panicked: %v", src, err)
	}
}
