package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/types"
	"github.com/expr-lang/expr/vm"
)

// The limits of the sandbox a When condition runs in. A condition that
// breaks one at compile time does not compile; one that breaks one while it
// runs fails its evaluation, and so its node, with a *ConditionError. Together
// they bound the time and memory of an evaluation, whatever the expression.
const (
	// ConditionMaxLength bounds the source of a condition, in bytes, which
	// keeps parsing shallow however the source nests.
	ConditionMaxLength = 4096
	// ConditionMaxNodes bounds the size of a condition, in syntax nodes
	// (expr's MaxNodes), checked when it is compiled.
	ConditionMaxNodes = 500
	// ConditionMemoryBudget bounds what one evaluation allocates in expr's
	// own unit: an element of a range, array or map the program builds
	// (expr's memory budget). 1..1000000000 exceeds it before it is built.
	ConditionMemoryBudget = 250_000
	// ConditionMaxSteps bounds the work of the predicates of all, any,
	// filter, map and the like in one evaluation: each call of a predicate
	// costs its size in syntax nodes, so nested loops over data stop too.
	ConditionMaxSteps = 250_000
	// ConditionMaxBytes bounds the strings one evaluation builds (with +,
	// upper, lower) and the arrays of keys and values, in bytes, an array
	// element counting 16.
	ConditionMaxBytes = 4 << 20
	// ConditionMaxDuration bounds the time of one evaluation's predicates,
	// checked at each call of a predicate: a predicate's call may do work
	// linear in the data (in, contains, ==, sum), which the step budget
	// does not see.
	ConditionMaxDuration = 500 * time.Millisecond
)

// conditionBuiltins is the allow-list of expr builtins a condition may call.
// Each is bounded by its arguments and the budgets above; none reads the
// clock, the time zone database or anything but its arguments. Left out:
// repeat, replace, join, split and splitAfter, which build strings or arrays
// far larger than their input; reduce, groupBy and sortBy, which accumulate;
// concat, flatten, sort, uniq, reverse, toPairs and fromPairs, which a
// condition does not need; toJSON, fromJSON, toBase64 and fromBase64;
// now, date, duration and timezone, which read the clock or the time zone
// database; and the bit operations. string is replaced by conditionString.
var conditionBuiltins = []string{
	// predicates
	"all", "any", "none", "one", "filter", "map", "count", "sum",
	"find", "findIndex", "findLast", "findLastIndex",
	// collections
	"len", "first", "last", "get", "take", "keys", "values", "indexOf", "lastIndexOf",
	"max", "min", "mean", "median",
	// numbers and types
	"abs", "ceil", "floor", "round", "int", "float", "type",
	// strings
	"trim", "trimPrefix", "trimSuffix", "upper", "lower", "hasPrefix", "hasSuffix",
}

// The names of the environment of a condition.
const (
	condInput  = "input"
	condStatus = "status"
	condEnv    = "$env"
	// condBudgetKey holds the budget of one evaluation. It is no identifier a
	// source can spell, and the validation refuses $env[...] on it.
	condBudgetKey = " budget"
	// The sandbox's own functions, which the compiler inserts; no source
	// can spell their names.
	condStepFn      = " step"
	condChargeFn    = " charge"
	condChargeStrFn = " chargeString"
	// condStringBuiltin is expr's builtin string, replaced by
	// conditionString.
	condStringBuiltin = "string"
)

// ConditionError is a When condition, or an event wait's filter, that does
// not compile, is not boolean, or failed to evaluate. It names the DAG and
// the node (or the topic, for a filter) and the expression, and the
// position in the expression (line and column, 1-based) when known.
type ConditionError struct {
	DAG, Node, Expr string
	// Topic is the topic of the wait, for a filter; DAG and Node are
	// empty then.
	Topic        string
	Line, Column int // 0 when unknown
	Reason       string
}

// conditionQuoteMax is how much of an expression an error message quotes.
const conditionQuoteMax = 120

func (e *ConditionError) Error() string {
	src := e.Expr
	if utf8.RuneCountInString(src) > conditionQuoteMax {
		src = string([]rune(src)[:conditionQuoteMax]) + "…"
	}
	var b strings.Builder
	if e.Topic != "" {
		fmt.Fprintf(&b, "workflow: wait on topic %q: filter %q", e.Topic, src)
	} else {
		fmt.Fprintf(&b, "workflow: DAG %q node %q: condition %q", e.DAG, e.Node, src)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " at %d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// condition is a compiled When expression, safe for concurrent evaluations.
type condition struct {
	dag, node, source string
	topic             string // for a filter
	program           *vm.Program
	deps              []string        // the dependencies, in the order given
	used              map[string]bool // the names of the environment the source reads
}

// compileCondition compiles source, the When condition of node in dag.
//
// The environment is the run input, named input; the output of each
// dependency (deps), named by its node name; and status, a map of
// dependency name to its final status ("completed", "failed" or "skipped").
// Values are shaped as JSON decodes them (maps, slices, float64, string,
// bool, nil), so the expression reads them with their JSON field names
// (transform.rows). A dependency whose name is no identifier is read as
// $env["fetch-text"]; $env takes only such a constant name. An identifier
// that is neither input, status nor a dependency, or status.x where x is no
// dependency, is a compile error naming it; so is a dependency named input or
// status, or like one of the sandbox's own names (each begins with a
// space). The result must be boolean.
//
// Only data is visible, in a sandbox:
//   - no method calls (input.String()), no let, and only these builtins:
//     all, any, none, one, filter, map, count, sum, find, findIndex,
//     findLast, findLastIndex; len, first, last, get, take, keys, values,
//     indexOf, lastIndexOf, max, min, mean, median; abs, ceil, floor,
//     round, int, float, type; trim, trimPrefix, trimSuffix, upper, lower,
//     hasPrefix, hasSuffix; and string, of a scalar only. All operators are
//     available (in, contains, startsWith, endsWith, matches, .., ??, ?.);
//   - the source is UTF-8 text without NUL characters, at most
//     ConditionMaxLength bytes and ConditionMaxNodes nodes;
//   - an evaluation allocates at most ConditionMemoryBudget elements,
//     spends at most ConditionMaxSteps in predicates, and builds at most
//     ConditionMaxBytes of strings;
//   - its predicates run for ConditionMaxDuration at most: a predicate's
//     call may do work linear in the data (in, contains, == on arrays,
//     sum), which the step budget does not see, so that steps times data
//     could otherwise run for minutes, in the transaction that decides the
//     node.
//
// So an evaluation ends, with a value or an error, in a time bounded by
// these limits and the size of its data.
//
// A condition that does not compile is a *ConditionError, with the
// position of the fault when it has one.
func compileCondition(dag, node, source string, deps []string) (c *condition, err error) {
	fail := func(reason string, line, column int) error {
		return &ConditionError{DAG: dag, Node: node, Expr: source, Line: line, Column: column, Reason: reason}
	}
	defer func() {
		// The parser, checker and optimizer are expr's: a panic in them is
		// a condition that does not compile, never a crash of the caller.
		if r := recover(); r != nil {
			c, err = nil, fail(fmt.Sprintf("compiler panic: %v", r), 0, 0)
		}
	}()
	if len(source) > ConditionMaxLength {
		return nil, fail(fmt.Sprintf("the expression is %d bytes, over the limit of %d", len(source), ConditionMaxLength), 0, 0)
	}
	if strings.TrimSpace(source) == "" {
		return nil, fail("the expression is empty", 0, 0)
	}
	if !isText(source) {
		// A node's skip reason quotes its condition, and PostgreSQL's
		// text refuses both.
		return nil, fail("the expression holds a NUL character or invalid UTF-8, which braid cannot store", 0, 0)
	}
	depSet := make(map[string]bool, len(deps))
	status := types.Map{}
	env := types.Map{
		condInput:     types.Any,
		condBudgetKey: types.TypeOf((*condBudget)(nil)),
	}
	for _, d := range deps {
		switch d {
		case condInput, condStatus, condBudgetKey, condStepFn, condChargeFn, condChargeStrFn:
			return nil, fail(fmt.Sprintf("dependency %q takes a name the condition reserves for itself", d), 0, 0)
		}
		depSet[d] = true
		status[d] = types.String
		env[d] = types.Any
	}
	env[condStatus] = status

	opts := conditionOptions(env)

	// First pass: parse as expr will, and refuse what the sandbox does not
	// allow, with the position of the offending node.
	cfg := conf.CreateNew()
	for _, o := range opts {
		o(cfg)
	}
	tree, err := parser.ParseWithConfig(source, cfg)
	if err != nil {
		return nil, conditionCompileError(fail, err)
	}
	v := &conditionValidator{deps: depSet, depList: deps, used: map[string]bool{}}
	v.walk(tree.Node)
	if v.err != nil {
		v.err.Bind(tree.Source)
		return nil, fail(v.err.Message, v.err.Line, v.err.Column+1)
	}

	// Second pass: type check as written, so that type errors and a result
	// that is not boolean are reported as the user wrote them.
	if _, err := expr.Compile(source, slices.Concat(opts, []expr.Option{expr.AsBool()})...); err != nil {
		return nil, conditionCompileError(fail, err)
	}

	// expr types input and the outputs as any, so it lets transform.rows + 1
	// through; an operator that never gives a boolean is refused here.
	if op := conditionNeverBool(tree.Node); op != nil {
		fe := &file.Error{Location: op.Location(), Message: "expected bool, but the expression is " + conditionDescribe(op)}
		fe.Bind(tree.Source)
		return nil, fail(fe.Message, fe.Line, fe.Column+1)
	}

	// Third pass: the program that runs, with the budget checks inserted.
	// It returns any, and eval says which value was not boolean rather than
	// expr's failed cast.
	program, err := expr.Compile(source, slices.Concat(opts, []expr.Option{expr.Patch(conditionPatcher{})})...)
	if err != nil {
		return nil, conditionCompileError(fail, err)
	}
	return &condition{dag: dag, node: node, source: source, program: program, deps: slices.Clone(deps), used: v.used}, nil
}

// conditionOptions are the expr options of every condition over env.
func conditionOptions(env types.Map) []expr.Option {
	opts := []expr.Option{
		expr.Env(env),
		expr.MaxNodes(ConditionMaxNodes),
		expr.DisableAllBuiltins(),
		expr.Function(condStringBuiltin, conditionString, new(func(any) string)),
		expr.Function(condStepFn, conditionStep, new(func(*condBudget, int) bool)),
		expr.Function(condChargeFn, conditionCharge, new(func(*condBudget, any) any)),
		expr.Function(condChargeStrFn, conditionCharge, new(func(*condBudget, string) string)),
	}
	for _, name := range conditionBuiltins {
		opts = append(opts, expr.EnableBuiltin(name))
	}
	return opts
}

// conditionCompileError turns an error of expr's compiler into a
// *ConditionError, with the position when expr knows it.
func conditionCompileError(fail func(string, int, int) error, err error) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		if fe.Line > 0 {
			return fail(fe.Message, fe.Line, fe.Column+1)
		}
		return fail(fe.Message, 0, 0)
	}
	return fail(err.Error(), 0, 0)
}

// conditionValidator walks a parsed condition and keeps the first node the
// sandbox refuses. It refuses by default: a kind of node it does not know
// is not allowed.
type conditionValidator struct {
	deps    map[string]bool
	depList []string
	used    map[string]bool
	err     *file.Error
}

func (v *conditionValidator) fail(n ast.Node, format string, args ...any) {
	if v.err == nil {
		v.err = &file.Error{Location: n.Location(), Message: fmt.Sprintf(format, args...)}
	}
}

func (v *conditionValidator) name(n ast.Node, name string) {
	switch {
	case name == condInput || name == condStatus || v.deps[name]:
		v.used[name] = true
	case len(v.depList) == 0:
		v.fail(n, "unknown name %s: a condition reads input and status, and its node has no dependencies", name)
	default:
		v.fail(n, "unknown name %s: a condition reads input, status and the dependencies %s", name, strings.Join(v.depList, ", "))
	}
}

func (v *conditionValidator) walk(n ast.Node) {
	if n == nil || v.err != nil {
		return
	}
	switch n := n.(type) {
	case *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.StringNode,
		*ast.BytesNode, *ast.ConstantNode, *ast.PointerNode:
	case *ast.IdentifierNode:
		if n.Value == condEnv {
			v.fail(n, `$env takes a constant name, as in $env["name"]`)
			return
		}
		v.name(n, n.Value)
	case *ast.MemberNode:
		if id, ok := n.Node.(*ast.IdentifierNode); ok {
			key, isConst := n.Property.(*ast.StringNode)
			switch {
			case id.Value == condEnv && isConst:
				v.name(n, key.Value)
				return
			case id.Value == condStatus && isConst && !v.deps[key.Value]:
				v.fail(n.Property, "status has no dependency %q", key.Value)
				return
			}
		}
		v.walk(n.Node)
		v.walk(n.Property)
	case *ast.UnaryNode:
		v.walk(n.Node)
	case *ast.BinaryNode:
		v.walk(n.Left)
		v.walk(n.Right)
	case *ast.ChainNode:
		v.walk(n.Node)
	case *ast.SliceNode:
		v.walk(n.Node)
		v.walk(n.From)
		v.walk(n.To)
	case *ast.CallNode:
		switch callee := n.Callee.(type) {
		case *ast.IdentifierNode:
			switch _, isBuiltin := builtin.Index[callee.Value]; {
			case callee.Value == condStringBuiltin:
			case v.deps[callee.Value] || callee.Value == condInput || callee.Value == condStatus:
				v.fail(n, "%s is data, not a function", callee.Value)
				return
			case isBuiltin:
				v.fail(n, "builtin %s is not allowed in a condition", callee.Value)
				return
			default:
				v.fail(n, "unknown function %s", callee.Value)
				return
			}
		case *ast.MemberNode:
			v.fail(n, "method calls are not allowed in a condition")
			return
		default:
			v.fail(n, "only builtins can be called in a condition")
			return
		}
		for _, a := range n.Arguments {
			v.walk(a)
		}
	case *ast.BuiltinNode:
		if !slices.Contains(conditionBuiltins, n.Name) {
			v.fail(n, "builtin %s is not allowed in a condition", n.Name)
			return
		}
		for _, a := range n.Arguments {
			v.walk(a)
		}
		v.walk(n.Map)
	case *ast.PredicateNode:
		v.walk(n.Node)
	case *ast.SequenceNode:
		for _, s := range n.Nodes {
			v.walk(s)
		}
	case *ast.ConditionalNode:
		v.walk(n.Cond)
		v.walk(n.Exp1)
		v.walk(n.Exp2)
	case *ast.ArrayNode:
		for _, e := range n.Nodes {
			v.walk(e)
		}
	case *ast.MapNode:
		for _, p := range n.Pairs {
			v.walk(p)
		}
	case *ast.PairNode:
		v.walk(n.Key)
		v.walk(n.Value)
	case *ast.VariableDeclaratorNode:
		v.fail(n, "let is not allowed in a condition")
	default:
		v.fail(n, "%T is not allowed in a condition", n)
	}
}

// conditionNeverBool returns the node that decides the value of a
// condition when it can never be a boolean, whatever the data: arithmetic,
// a range, an array or map literal; nil when it may be one.
func conditionNeverBool(n ast.Node) ast.Node {
	switch n := n.(type) {
	case *ast.BinaryNode:
		switch n.Operator {
		case "+", "-", "*", "/", "%", "**", "^", "..":
			return n
		}
	case *ast.UnaryNode:
		switch n.Operator {
		case "-", "+":
			return n
		}
	case *ast.ArrayNode, *ast.MapNode:
		return n
	case *ast.ConditionalNode:
		if a := conditionNeverBool(n.Exp1); a != nil && conditionNeverBool(n.Exp2) != nil {
			return a
		}
	case *ast.SequenceNode:
		return conditionNeverBool(n.Nodes[len(n.Nodes)-1])
	}
	return nil
}

// conditionDescribe says what a node that is never boolean is.
func conditionDescribe(n ast.Node) string {
	switch n := n.(type) {
	case *ast.BinaryNode:
		if n.Operator == ".." {
			return "a range (..)"
		}
		return "arithmetic (" + n.Operator + ")"
	case *ast.UnaryNode:
		return "arithmetic (unary " + n.Operator + ")"
	case *ast.ArrayNode:
		return "an array"
	case *ast.MapNode:
		return "a map"
	}
	return fmt.Sprintf("%T", n)
}

// conditionPatcher inserts the budget checks into a checked condition:
// each predicate first pays its size from the step budget, and each string
// the program builds (+ of strings, upper, lower) and each array of keys or
// values is charged to the byte budget.
type conditionPatcher struct{}

func (conditionPatcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.PredicateNode:
		cost := 0
		ast.Walk(&n.Node, nodeCounter{&cost})
		step := conditionCall(n.Node, condStepFn, &ast.IntegerNode{Value: cost})
		seq := &ast.SequenceNode{Nodes: []ast.Node{step, n.Node}}
		seq.SetLocation(n.Node.Location())
		n.Node = seq
	case *ast.BinaryNode:
		if n.Operator == "+" && !conditionIsNumber(n.Type()) {
			conditionCharge1(node)
		}
	case *ast.BuiltinNode:
		switch n.Name {
		case "upper", "lower", "keys", "values":
			conditionCharge1(node)
		}
	}
}

// conditionCharge1 wraps the node in a charge of its value to the byte
// budget, keeping its type when it is a string.
func conditionCharge1(node *ast.Node) {
	fn := condChargeFn
	if t := (*node).Type(); t != nil && t.Kind() == reflect.String {
		fn = condChargeStrFn
	}
	*node = conditionCall(*node, fn, *node)
}

// conditionCall is a call of one of the sandbox's functions, with the
// budget as its first argument, placed at the position of at.
func conditionCall(at ast.Node, fn string, args ...ast.Node) ast.Node {
	loc := at.Location()
	callee := &ast.IdentifierNode{Value: fn}
	callee.SetLocation(loc)
	budget := &ast.IdentifierNode{Value: condBudgetKey}
	budget.SetLocation(loc)
	for _, a := range args {
		if a.Location() == (file.Location{}) {
			a.SetLocation(loc)
		}
	}
	call := &ast.CallNode{Callee: callee, Arguments: append([]ast.Node{budget}, args...)}
	call.SetLocation(loc)
	return call
}

func conditionIsNumber(t reflect.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// nodeCounter counts the nodes it visits.
type nodeCounter struct{ n *int }

func (c nodeCounter) Visit(*ast.Node) { *c.n++ }

// condBudget is what one evaluation has spent of its step and byte budgets.
type condBudget struct {
	steps, bytes int
	deadline     time.Time
}

// conditionStep pays a predicate's cost from the step budget.
func conditionStep(args ...any) (any, error) {
	b, cost := args[0].(*condBudget), args[1].(int)
	b.steps += cost
	if b.steps > ConditionMaxSteps {
		return nil, fmt.Errorf("the predicates exceed the budget of %d steps (ConditionMaxSteps)", ConditionMaxSteps)
	}
	if !b.deadline.IsZero() && time.Now().After(b.deadline) {
		return nil, fmt.Errorf("the predicates exceed the time budget of %v (ConditionMaxDuration)", ConditionMaxDuration)
	}
	return true, nil
}

// conditionCharge charges a value the program built to the byte budget and
// returns it.
func conditionCharge(args ...any) (any, error) {
	b, v := args[0].(*condBudget), args[1]
	switch v := v.(type) {
	case string:
		b.bytes += len(v)
	case []any:
		b.bytes += 16 * len(v)
	}
	if b.bytes > ConditionMaxBytes {
		return nil, fmt.Errorf("the expression builds more than %d bytes of strings and arrays (ConditionMaxBytes)", ConditionMaxBytes)
	}
	return v, nil
}

// conditionString is the builtin string of a condition, for scalars only:
// formatting a whole map or array could build a string far larger than the
// data (an array holding the same large map many times).
func conditionString(args ...any) (any, error) {
	switch v := args[0].(type) {
	case nil:
		return "nil", nil
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return fmt.Sprintf("%v", v), nil
	case int:
		return strconv.Itoa(v), nil
	default:
		return nil, fmt.Errorf("string takes a string, a number, a bool or nil, not %s", conditionTypeName(v))
	}
}

// conditionTypeName names the JSON kind of a value.
func conditionTypeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a map"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

// eval runs the condition on the run input and the dependencies' outputs
// (raw JSON, nil for a dependency without output) and statuses, within the
// budgets of the sandbox, and returns its value. Only the names the
// expression reads are decoded. Any failure (JSON that does not decode, a
// runtime error such as a member of nil, a budget exceeded, a result that
// is not boolean, a panic in expr) is a *ConditionError naming the node and
// the expression; eval never panics.
func (c *condition) eval(input json.RawMessage, outputs map[string]json.RawMessage, status map[string]string) (ok bool, err error) {
	fail := func(reason string, line, column int) error {
		return &ConditionError{DAG: c.dag, Node: c.node, Topic: c.topic, Expr: c.source, Line: line, Column: column, Reason: reason}
	}
	defer func() {
		if r := recover(); r != nil {
			ok, err = false, fail(fmt.Sprintf("panic: %v", r), 0, 0)
		}
	}()
	env := make(map[string]any, len(c.used)+2)
	if c.used[condInput] {
		v, err := decodeConditionValue(input)
		if err != nil {
			return false, fail(fmt.Sprintf("the run input does not decode: %v", err), 0, 0)
		}
		env[condInput] = v
	}
	st := make(map[string]any, len(c.deps))
	for _, d := range c.deps {
		if s, ok := status[d]; ok {
			st[d] = s
		}
		if !c.used[d] {
			continue
		}
		v, err := decodeConditionValue(outputs[d])
		if err != nil {
			return false, fail(fmt.Sprintf("the output of %q does not decode: %v", d, err), 0, 0)
		}
		env[d] = v
	}
	env[condStatus] = st
	env[condBudgetKey] = &condBudget{deadline: time.Now().Add(ConditionMaxDuration)}

	machine := vm.VM{MemoryBudget: ConditionMemoryBudget}
	out, err := machine.Run(c.program, env)
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			if fe.Line > 0 {
				return false, fail(fe.Message, fe.Line, fe.Column+1)
			}
			return false, fail(fe.Message, 0, 0)
		}
		return false, fail(err.Error(), 0, 0)
	}
	b, isBool := out.(bool)
	if !isBool {
		return false, fail(fmt.Sprintf("the value is %s, not a boolean", conditionValueName(out)), 0, 0)
	}
	return b, nil
}

// conditionValueName names a value in an error, without printing it whole.
func conditionValueName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case string:
		return "a string"
	case float64, int:
		return "a number"
	}
	return conditionTypeName(v)
}

// decodeConditionValue decodes raw JSON into the shape a condition reads:
// nil for no output.
func decodeConditionValue(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}
