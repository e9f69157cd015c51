package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// conditionBound is how long any one compilation or evaluation of a
// condition may take in these tests: a safety bound of the sandbox, far
// above what the budgets allow, not a performance target.
const conditionBound = 2 * time.Second

func TestCompileConditionErrors(t *testing.T) {
	t.Parallel()
	deps := []string{"extract", "transform"}
	cases := []struct {
		name, src    string
		deps         []string
		line, column int    // 0: no position expected
		reason       string // a substring of the reason
	}{
		{"syntax", "transform.rows >", deps, 1, 16, "unexpected token EOF"},
		{"syntax on the second line", "transform.rows > 0 &&\n  )", deps, 2, 3, "unexpected token"},
		{"unclosed string", `input.name == "etl`, deps, 1, 19, "literal not terminated"},
		{"empty", "  ", deps, 0, 0, "empty"},
		{"not boolean", "1 + 2", deps, 0, 0, "expected bool"},
		{"not boolean string", `"yes"`, deps, 0, 0, "expected bool"},
		{"arithmetic on data", "transform.rows + 1", deps, 1, 16, "expected bool, but the expression is arithmetic (+)"},
		{"negation of data", "-transform.rows", deps, 1, 1, "expected bool, but the expression is arithmetic (unary -)"},
		{"range of data", "1..transform.rows", deps, 0, 0, "expected bool, but got []interface {}"},
		{"both branches arithmetic", "transform.ok ? transform.rows * 2 : transform.rows / 2", deps, 1, 31, "arithmetic (*)"},
		{"type mismatch", `"a" + 1 == "a1"`, deps, 1, 5, "mismatched types string and int"},
		{"unknown identifier", "rows > 0", deps, 1, 1, "unknown name rows: a condition reads input, status and the dependencies extract, transform"},
		{"unknown identifier deep", "transform.rows > 0 && load.ok", deps, 1, 23, "unknown name load"},
		{"unknown identifier no deps", "extract.ok", nil, 1, 1, "its node has no dependencies"},
		{"status of a non-dependency", `status.load == "completed"`, deps, 1, 8, `status has no dependency "load"`},
		{"status of a non-dependency by index", `status["load"] == "completed"`, deps, 1, 8, `status has no dependency "load"`},
		{"env alone", `$env == nil`, deps, 1, 1, "$env takes a constant name"},
		{"env by a computed name", `$env["trans" + "form"] == nil`, deps, 1, 1, "$env takes a constant name"},
		{"env of an unknown name", `$env["load"] == nil`, deps, 1, 5, "unknown name load"},
		{"method call", "input.String() == \"\"", deps, 1, 7, "method calls are not allowed"},
		{"method call by index", `input["String"]() == ""`, deps, 1, 16, "unexpected token"},
		{"method call on a dependency", "transform.rows.Len() > 0", deps, 1, 16, "method calls are not allowed"},
		{"repeat", `repeat("a", 1000000000) == ""`, deps, 1, 1, "builtin repeat is not allowed"},
		{"replace", `replace(input.s, "", input.s) == ""`, deps, 1, 1, "builtin replace is not allowed"},
		{"join", `join(["a"], ",") == "a"`, deps, 1, 1, "builtin join is not allowed"},
		{"now", `now() != nil`, deps, 1, 1, "builtin now is not allowed"},
		{"date", `date("2024-01-01") != nil`, deps, 1, 1, "builtin date is not allowed"},
		{"toJSON", `toJSON(input) == "{}"`, deps, 1, 1, "builtin toJSON is not allowed"},
		{"reduce", `reduce(1..3, #acc + #) > 0`, deps, 1, 1, "builtin reduce is not allowed"},
		{"groupBy in a pipe", `len(input.items | groupBy(#)) > 0`, deps, 1, 19, "builtin groupBy is not allowed"},
		{"unknown function", `env("HOME") == ""`, deps, 1, 1, "unknown function env"},
		{"calling data", `transform(1) == nil`, deps, 1, 1, "transform is data, not a function"},
		{"dependency named like a builtin", `len(input) > 0`, []string{"len"}, 1, 1, "len is data, not a function"},
		{"let", `let s = "a"; s + s == "aa"`, deps, 1, 5, "let is not allowed"},
		{"too many nodes", strings.Repeat("1 + ", ConditionMaxNodes) + "1 > 0", deps, 1, 0, "exceeds maximum allowed nodes"},
		{"deep negation", strings.Repeat("!", 2*ConditionMaxNodes) + "true", deps, 1, 0, "exceeds maximum allowed nodes"},
		{"deep arrays", strings.Repeat("[", 2*ConditionMaxNodes) + strings.Repeat("]", 2*ConditionMaxNodes) + " != nil", deps, 1, 0, "exceeds maximum allowed nodes"},
		{"too long", "true || " + strings.Repeat(" ", ConditionMaxLength), deps, 0, 0, "over the limit of 4096"},
		{"float range", `len(1..1e9) > 0`, deps, 1, 6, "mismatched types int and float64"},
		{"reserved dependency name", `input.ok`, []string{"input"}, 0, 0, `dependency "input" takes a name the condition reserves for itself`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			c, err := compileCondition("etl", "load", tc.src, tc.deps)
			if d := time.Since(start); d > conditionBound {
				t.Errorf("compiling took %v", d)
			}
			if err == nil {
				t.Fatalf("compiled %q; want an error", tc.src)
			}
			if c != nil {
				t.Errorf("returned a condition with the error %v", err)
			}
			var ce *ConditionError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is no *ConditionError", err, err)
			}
			if ce.DAG != "etl" || ce.Node != "load" || ce.Expr != tc.src {
				t.Errorf("error names DAG %q node %q expr %q", ce.DAG, ce.Node, ce.Expr)
			}
			if !strings.Contains(ce.Reason, tc.reason) {
				t.Errorf("reason %q; want it to contain %q", ce.Reason, tc.reason)
			}
			// A column of 0 in the table means any column on that line.
			if ce.Line != tc.line || (tc.column != 0 && ce.Column != tc.column) {
				t.Errorf("position %d:%d; want %d:%d", ce.Line, ce.Column, tc.line, tc.column)
			}
			if !strings.HasPrefix(err.Error(), `workflow: DAG "etl" node "load": condition `) {
				t.Errorf("message %q", err)
			}
		})
	}
}

func TestConditionErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := compileCondition("etl", "load", "transform.rows >", []string{"transform"})
	want := `workflow: DAG "etl" node "load": condition "transform.rows >" at 1:16: unexpected token EOF`
	if err == nil || err.Error() != want {
		t.Errorf("error %v; want %s", err, want)
	}

	_, err = compileCondition("etl", "load", "1 + 2", nil)
	want = `workflow: DAG "etl" node "load": condition "1 + 2": expected bool, but got int`
	if err == nil || err.Error() != want {
		t.Errorf("error %v; want %s", err, want)
	}

	long := strings.Repeat("a", ConditionMaxLength+1)
	_, err = compileCondition("etl", "load", long, nil)
	if err == nil || len(err.Error()) > 400 || !strings.Contains(err.Error(), "…") {
		t.Errorf("a long expression is not shortened in the message: %.500v", err)
	}
}

func TestConditionEval(t *testing.T) {
	t.Parallel()
	deps := []string{"extract", "transform", "fetch-text"}
	input := json.RawMessage(`{"user": {"name": "Ada", "tags": ["a", "b"], "langs": ["en", "fr"]},
		"items": [{"price": 5}, {"price": 15}], "limit": 10, "empty": null}`)
	outputs := map[string]json.RawMessage{
		"extract":    json.RawMessage(`{"rows": 3, "meta": {"source": {"kind": "csv"}}, "lang": "EN"}`),
		"transform":  nil, // failed: no output
		"fetch-text": json.RawMessage(`"some text"`),
	}
	status := map[string]string{"extract": "completed", "transform": "failed", "fetch-text": "completed"}
	cases := []struct {
		src  string
		want bool
	}{
		{`extract.rows > 0`, true},
		{`extract.rows > 3`, false},
		{`extract.meta.source.kind == "csv"`, true},
		{`extract.meta.source.kind == "json"`, false},
		{`input.user.tags[1] == "b"`, true},
		{`input.user.name startsWith "A" && input.user.name endsWith "a"`, true},
		{`lower(extract.lang) in input.user.langs`, true},
		{`upper(input.user.name) == "ADA" && len(input.user.tags) == 2`, true},
		{`any(input.items, .price > input.limit)`, true},
		{`all(input.items, .price > input.limit)`, false},
		{`count(input.items, .price > 1) == 2 && sum(map(input.items, .price)) == 20`, true},
		{`len(filter(input.items, .price < input.limit)) == 1`, true},
		{`max(map(input.items, .price)) == 15 && abs(-2) == 2`, true},
		{`input.missing == nil && input.empty == nil`, true},
		{`(input.missing?.deeper ?? "none") == "none"`, true},
		{`string(extract.rows) == "3" && int(extract.rows) == 3`, true},
		{`"user" in keys(input) && len(values(input.user)) == 3`, true},
		{`input.user.name matches "^A.a$"`, true},
		{`input.user.name + "!" == "Ada!"`, true},
		{`status.extract == "completed"`, true},
		{`status.transform == "failed" && transform == nil`, true},
		{`status.transform == "completed" && transform.rows > 0`, false}, // short circuit: transform is not read
		{`(transform?.rows ?? 0) == 0`, true},
		{`$env["fetch-text"] contains "text" && status["fetch-text"] == "completed"`, true},
		{`1 in 1..1000000000`, true}, // the optimizer makes it a comparison: no range is built
		{`len(1..1000) == 1000`, true},
		{strings.Repeat("(", 1000) + "true" + strings.Repeat(")", 1000), true},
		{"extract.rows > 0 &&\n\tstatus.extract == \"completed\"", true},
	}
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			t.Parallel()
			c, err := compileCondition("etl", "load", tc.src, deps)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.eval(input, outputs, status)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("= %v; want %v", got, tc.want)
			}
		})
	}
}

func TestConditionEvalErrors(t *testing.T) {
	t.Parallel()
	deps := []string{"transform"}
	good := json.RawMessage(`{"n": 3, "big": 1e9, "lo": -9e18, "hi": 9e18, "s": "` + strings.Repeat("x", 1000) + `",
		"items": [` + strings.TrimSuffix(strings.Repeat("0,", 2000), ",") + `]}`)
	cases := []struct {
		name, src string
		input     json.RawMessage
		output    json.RawMessage
		line      int    // 0: no position expected
		reason    string // a substring of the reason
	}{
		{"nil output", `transform.rows > 0`, good, nil, 1, "cannot fetch rows from <nil>"},
		{"member of a number", `transform.rows.count > 0`, good, json.RawMessage(`{"rows": 3}`), 1, "cannot fetch count from float64"},
		{"index out of range", `input.items[5000] == 0`, good, nil, 1, "out of range"},
		{"not boolean", `input.n`, good, nil, 0, "the value is a number, not a boolean"},
		{"nil is not boolean", `transform`, good, nil, 0, "the value is nil, not a boolean"},
		{"bad input JSON", `input.n > 0`, json.RawMessage(`{"n":`), nil, 0, "the run input does not decode"},
		{"bad output JSON", `transform.rows > 0`, good, json.RawMessage(`{rows: 3}`), 0, `the output of "transform" does not decode`},
		{"division by zero", `int(input.n) % 0 == 0`, good, nil, 1, "integer divide by zero"},
		{"string of a map", `string(input) != ""`, good, nil, 1, "string takes a string, a number, a bool or nil, not a map"},
		{"huge range", `len(1..1000000000) > 0`, good, nil, 1, "memory budget exceeded"},
		{"huge range piped", `1..1000000000 | filter(# % 2 == 0) | len() > 0`, good, nil, 1, "memory budget exceeded"},
		{"huge range from the input", `len(1..int(input.big)) > 0`, good, nil, 1, "memory budget exceeded"},
		{"overflowing range", `len(int(input.lo)..int(input.hi)) == 0`, good, nil, 0, ""},
		{"nested ranges", `all(1..100000, {all(1..100000, true)})`, good, nil, 1, "memory budget exceeded"},
		{"nested loops over data", `all(input.items, {all(input.items, {all(input.items, # == 0)})})`, good, nil, 1, "exceed the budget of 250000 steps"},
		{"string blow-up by +", `len(map(1..100000, input.s + input.s)) > 0`, good, nil, 1, "builds more than 4194304 bytes"},
		{"string blow-up by upper", `len(map(1..100000, upper(input.s))) > 0`, good, nil, 1, "builds more than 4194304 bytes"},
		{"keys blow-up", `len(map(1..100000, keys(input))) > 0`, good, nil, 1, "builds more than 4194304 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := compileCondition("etl", "load", tc.src, deps)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got, err := c.eval(tc.input, map[string]json.RawMessage{"transform": tc.output}, map[string]string{"transform": "completed"})
			if d := time.Since(start); d > conditionBound {
				t.Errorf("evaluation took %v", d)
			}
			if tc.reason == "" { // a range that overflows is empty
				if err != nil || !got {
					t.Errorf("= %v, %v; want true", got, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("= %v; want an error", got)
			}
			var ce *ConditionError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is no *ConditionError", err, err)
			}
			if ce.DAG != "etl" || ce.Node != "load" || ce.Expr != tc.src {
				t.Errorf("error names DAG %q node %q expr %q", ce.DAG, ce.Node, ce.Expr)
			}
			if !strings.Contains(ce.Reason, tc.reason) {
				t.Errorf("reason %q; want it to contain %q", ce.Reason, tc.reason)
			}
			if ce.Line != tc.line || (tc.line > 0 && ce.Column < 1) {
				t.Errorf("position %d:%d; want line %d", ce.Line, ce.Column, tc.line)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf(`node "load": condition %q`, tc.src)) {
				t.Errorf("message %q does not name the node and the expression", err)
			}
		})
	}
}

// TestConditionConcurrentEval evaluates one condition from many goroutines,
// as the engine does for the nodes of concurrent runs: each evaluation has
// its own budget, so none pays for another.
func TestConditionConcurrentEval(t *testing.T) {
	t.Parallel()
	c, err := compileCondition("etl", "load", `all(1..5000, # > 0) && input.n == 1`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 10 {
				got, err := c.eval(json.RawMessage(fmt.Sprintf(`{"n": %d}`, (i+j)%2)), nil, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if want := (i+j)%2 == 1; got != want {
					t.Errorf("= %v; want %v", got, want)
				}
			}
		})
	}
	wg.Wait()
}

// A predicate whose each call does work linear in the data (in, contains,
// ==) runs ConditionMaxSteps calls at most, which on an input within the
// payload cap took minutes; the evaluation now ends with an error naming
// the time budget, within conditionBound.
func TestConditionLinearPredicateOverLargeDataEndsInTime(t *testing.T) {
	t.Parallel()
	n := 300_000 // "0," × n is 600 KB, under MaxPayloadBytesDefault
	in := json.RawMessage(`{"x": 1, "arr": [` + strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}`)
	c, err := compileCondition("dag", "node", `any(input.arr, input.x in input.arr)`, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.eval(in, nil, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if d := time.Since(start); d > conditionBound {
			t.Errorf("one evaluation took %v, over conditionBound %v", d, conditionBound)
		}
		if err == nil || !strings.Contains(err.Error(), "ConditionMaxDuration") {
			t.Errorf("the evaluation's error: %v; want one naming ConditionMaxDuration", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("one evaluation of a %d-byte input still runs after 30s", len(in))
	}
}
