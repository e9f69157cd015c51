package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/braidflow/braid/queue"
)

// The limits of a DAG's size, checked by NewEngine. A DAG run creates all
// of its nodes in the transaction that starts it, and the settle path of
// each finishing node locks the DAG's blocked nodes. A skip that cascades
// down a chain settles one level at a time, each level reading the DAG's
// nodes again, so its cost grows with the square of the chain's length: a
// chain of 1,000 nodes skipped from its first took 3 s on a 2-core
// machine, inside the transaction that starts the run or that records a
// turn's outcome (Config.OutcomeTimeout). The limits keep that cost within
// the outcome's default timeout. Work that fans out wider than this is a
// Map, whose children cost nothing of the kind.
const (
	// DAGMaxNodes bounds the nodes of a DAG, on-failure nodes included.
	DAGMaxNodes = 2000
	// DAGMaxDependencies bounds the dependencies of a DAG, its edges: the
	// names given to After, summed over its nodes, and, for each
	// on-failure node, one per regular node, whose failure it waits for.
	DAGMaxDependencies = 100_000
)

// dagErrorNamesMax is how many node names an error lists.
const dagErrorNamesMax = 10

// FailurePolicy says what the permanent failure of a DAG node does to the
// rest of its DAG. A node's attempts and backoff are its workflow's own
// (WithMaxAttempts, WithRetry): the policy applies once they are spent.
type FailurePolicy int

const (
	// FailDAG, the default, fails the DAG: the nodes that have not started
	// are skipped, the nodes that run finish, the on-failure nodes run, and
	// the run ends failed with the node's error.
	FailDAG FailurePolicy = iota
	// Continue lets the DAG go on: the node counts as finished for its
	// dependents, which see its status ("failed") and no output, and run
	// or are skipped by their When conditions.
	Continue
)

func (p FailurePolicy) String() string {
	switch p {
	case FailDAG:
		return "fail DAG"
	case Continue:
		return "continue"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// NodeOption configures a node of a DAG.
type NodeOption interface{ applyNode(*dagNode) }

type nodeOption func(*dagNode)

func (o nodeOption) applyNode(n *dagNode) { o(n) }

// After makes the node depend on the nodes named: it runs once each of
// them is final (completed, or skipped; or failed under Continue). A node
// without dependencies is a root and starts with the run; its When
// condition, if any, reads the input and is decided when the run starts.
func After(names ...string) NodeOption {
	return nodeOption(func(n *dagNode) { n.after = append(n.after, names...) })
}

// When makes the node conditional: once its dependencies are final, the
// expr-lang/expr program expr decides whether it runs (true) or is skipped
// (false). The program sees the run input as input, each dependency's
// output under the dependency's name, and status, a map of dependency
// name to final status. It is compiled when the DAG is defined and must be
// boolean; see compileCondition for the sandbox it runs in.
func When(expr string) NodeOption {
	return nodeOption(func(n *dagNode) { n.when = expr; n.hasWhen = true })
}

// OnFailure sets the node's failure policy. Default FailDAG.
func OnFailure(p FailurePolicy) NodeOption {
	return nodeOption(func(n *dagNode) { n.policy = p })
}

// IfDAGFails makes the node an on-failure node: it runs only when the DAG
// fails, after the failing node, and never otherwise (as Hatchet's and
// Oban's on-failure steps). It takes no dependencies and no condition, and
// its own failure does not change the run's error.
func IfDAGFails() NodeOption {
	return nodeOption(func(n *dagNode) { n.onFailure = true })
}

// dagNode is a node as declared.
type dagNode struct {
	name      string
	def       Definition
	after     []string
	when      string
	hasWhen   bool
	policy    FailurePolicy
	onFailure bool
	cond      *condition // compiled When, nil without one
}

// DAGNode is a declared node of a DAG, whatever its types. *NodeRef
// implements it.
type DAGNode interface{ node() *dagNode }

// NodeRef is a typed handle on a DAG node: the node's dependents read its
// output with Output, and the DAG's result gives a sink's output with
// From, typed, with no string key to misspell.
type NodeRef[Out any] struct{ n *dagNode }

func (r *NodeRef[Out]) node() *dagNode { return r.n }

// Name is the node's name in its DAG.
func (r *NodeRef[Out]) Name() string { return r.n.name }

// From reads the node's output from a DAG's result. A node that is not a
// sink, or did not complete (it was skipped, or failed under Continue), has
// no output there: From returns ErrNoOutput.
func (r *NodeRef[Out]) From(res DAGResult) (Out, error) {
	var out Out
	raw, ok := res[r.n.name]
	if !ok {
		return out, fmt.Errorf("%w: node %q", ErrNoOutput, r.n.name)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, &EncodeError{What: fmt.Sprintf("output of node %q", r.n.name), Err: err}
	}
	return out, nil
}

// ErrNoOutput is returned when a node's output is asked for and the node
// has none: it was skipped, failed, or is not a sink of the DAG's result.
var ErrNoOutput = fmt.Errorf("workflow: the node has no output")

// Node declares a node of a DAG: the workflow w, run as one task of the
// DAG's run with the run's input decoded as w's input. It may use Step,
// Delay, Map and Go like any task. Pass the result to DAG, and to the
// nodes that read its output.
func Node[In, Out any](name string, w *Workflow[In, Out], opts ...NodeOption) *NodeRef[Out] {
	n := &dagNode{name: name}
	if w != nil {
		n.def = w
	}
	for _, o := range opts {
		if o != nil {
			o.applyNode(n)
		}
	}
	return &NodeRef[Out]{n: n}
}

// DAGResult is the output of a DAG run: the outputs of its sink nodes (the
// nodes no other node depends on) that completed, by node name. Read one
// typed with its NodeRef's From.
type DAGResult map[string]json.RawMessage

// dagSpec is a validated DAG: its nodes in a topological order, each
// node's dependents, and its sinks.
type dagSpec struct {
	name       string
	nodes      []*dagNode          // topological order; on-failure nodes last
	index      map[string]int      // node name → position in nodes
	dependents map[string][]string // node name → the nodes that depend on it
	sinks      []string
}

// DAG declares a workflow that is a graph of nodes: each node a task of
// the run, started once its dependencies are final and its When condition
// holds, one queue hop per edge. The DAG is a Workflow: start it, wait for
// its result, cancel and retry it as any other, start it as a child with
// Go or Map, or run it as a node of another DAG. Its output is the outputs
// of its sink nodes.
//
// A DAG that is a node of another runs as that node's task: its own nodes
// are created by the node's first turn, once the node is released, and
// the node finishes with the inner DAG's result, or fails as the inner
// DAG fails, like any node.
//
// A bad DAG is reported by NewEngine, with an error naming the culprit: no
// nodes, more than DAGMaxNodes nodes or DAGMaxDependencies dependencies,
// two nodes of one name, a dependency on an unknown node, a cycle (naming
// the nodes on it), a condition that does not compile or is not boolean
// (with its position), a bad option. NewEngine also rejects a DAG
// whose node's workflow is not registered.
func DAG[In any](name string, nodes ...DAGNode) *Workflow[In, DAGResult] {
	d := &definition{name: name, maxAttempts: MaxAttemptsDefault, queue: "default", priority: queue.PriorityNormal}
	spec, err := buildDAG(name, nodes)
	d.dag, d.err = spec, err
	if spec != nil {
		d.fn = func(t *Task, _ json.RawMessage) (json.RawMessage, error) { return spec.result(t) }
	}
	if d.err == nil {
		d.err = checkDefinitionName(name)
	}
	return &Workflow[In, DAGResult]{d: d}
}

// buildDAG validates the declared nodes and orders them.
func buildDAG(name string, decl []DAGNode) (*dagSpec, error) {
	bad := func(format string, args ...any) error {
		return &DefinitionError{Workflow: name, Reason: fmt.Sprintf(format, args...)}
	}
	if len(decl) == 0 {
		return nil, bad("the DAG has no nodes")
	}
	if len(decl) > DAGMaxNodes {
		return nil, bad("the DAG has %d nodes, over the limit of %d (DAGMaxNodes)", len(decl), DAGMaxNodes)
	}
	// Each on-failure node waits for every regular node, and is stored
	// as its dependent: those count as dependencies too.
	edges, regular, onFailure := 0, 0, 0
	for _, dn := range decl {
		if dn != nil && dn.node() != nil {
			edges += len(dn.node().after)
			if dn.node().onFailure {
				onFailure++
			} else {
				regular++
			}
		}
	}
	edges += regular * onFailure
	if edges > DAGMaxDependencies {
		return nil, bad("the DAG's nodes have %d dependencies, over the limit of %d (DAGMaxDependencies)", edges, DAGMaxDependencies)
	}
	spec := &dagSpec{name: name, index: map[string]int{}, dependents: map[string][]string{}}
	byName := map[string]*dagNode{}
	var order []string
	for i, dn := range decl {
		if dn == nil || dn.node() == nil {
			return nil, bad("node %d is nil", i)
		}
		// The DAG's own copy of the node: a NodeRef may be declared in
		// several DAGs, and each compiles the node's condition under its
		// own name.
		c := *dn.node()
		n := &c
		if err := checkName("node", n.name); err != nil {
			return nil, bad("node %d: %s", i, strings.TrimPrefix(err.Error(), "workflow: "))
		}
		if _, dup := byName[n.name]; dup {
			return nil, bad("node %q is declared twice", n.name)
		}
		if n.def == nil {
			return nil, bad("node %q has a nil workflow", n.name)
		}
		if n.policy != FailDAG && n.policy != Continue {
			return nil, bad("node %q has an unknown failure policy %d", n.name, int(n.policy))
		}
		if n.onFailure && (len(n.after) > 0 || n.hasWhen) {
			return nil, bad("node %q runs if the DAG fails, so it takes neither After nor When", n.name)
		}
		byName[n.name] = n
		order = append(order, n.name)
	}
	for _, nm := range order {
		n := byName[nm]
		seen := map[string]bool{}
		for _, dep := range n.after {
			switch {
			case dep == nm:
				return nil, bad("node %q depends on itself", nm)
			case byName[dep] == nil:
				return nil, bad("node %q depends on %q, which is not a node of the DAG (its nodes: %s)", nm, dep, nameList(order, dagErrorNamesMax))
			case byName[dep].onFailure:
				return nil, bad("node %q depends on %q, which runs only if the DAG fails", nm, dep)
			case seen[dep]:
				return nil, bad("node %q names its dependency %q twice", nm, dep)
			}
			seen[dep] = true
			spec.dependents[dep] = append(spec.dependents[dep], nm)
		}
	}
	if !slices.ContainsFunc(order, func(nm string) bool { return !byName[nm].onFailure }) {
		return nil, bad("every node runs only if the DAG fails, so none would ever run")
	}
	if cycle := findCycle(order, byName); cycle != nil {
		return nil, bad("the nodes form a cycle: %s", strings.Join(cycle, " → "))
	}
	// Topological order, declaration order among peers; on-failure nodes
	// last.
	done := map[string]bool{}
	var visit func(string)
	visit = func(nm string) {
		if done[nm] {
			return
		}
		done[nm] = true
		for _, dep := range byName[nm].after {
			visit(dep)
		}
		spec.index[nm] = len(spec.nodes)
		spec.nodes = append(spec.nodes, byName[nm])
	}
	for _, nm := range order {
		if !byName[nm].onFailure {
			visit(nm)
		}
	}
	for _, nm := range order {
		if byName[nm].onFailure {
			visit(nm)
		}
	}
	for _, n := range spec.nodes {
		if !n.onFailure && len(spec.dependents[n.name]) == 0 {
			spec.sinks = append(spec.sinks, n.name)
		}
		if n.hasWhen {
			c, err := compileCondition(name, n.name, n.when, n.after)
			if err != nil {
				return nil, err
			}
			n.cond = c
		}
	}
	return spec, nil
}

// nameList joins names for an error, the first limit of them, saying how
// many more there are.
func nameList(names []string, limit int) string {
	if len(names) <= limit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, and %d more", strings.Join(names[:limit], ", "), len(names)-limit)
}

// findCycle returns the nodes of a cycle, first node repeated last, or nil.
func findCycle(order []string, byName map[string]*dagNode) []string {
	const (
		unseen = iota
		onPath
		finished
	)
	state := map[string]int{}
	var path []string
	var cycle []string
	var walk func(string) bool
	walk = func(nm string) bool {
		state[nm] = onPath
		path = append(path, nm)
		for _, dep := range byName[nm].after {
			switch state[dep] {
			case onPath:
				start := slices.Index(path, dep)
				cycle = append(append([]string(nil), path[start:]...), dep)
				return true
			case unseen:
				if walk(dep) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[nm] = finished
		return false
	}
	for _, nm := range order {
		if state[nm] == unseen && walk(nm) {
			// The walk follows dependencies backwards; print the cycle in
			// the direction work flows.
			slices.Reverse(cycle)
			return cycle
		}
	}
	return nil
}

// checkDAGWorkflows reports a node of a registered DAG whose workflow the
// engine does not register, or registers under that name as another
// definition. A node may run another DAG: a DAG is built from nodes that
// exist before it, so DAGs cannot nest in a cycle.
func checkDAGWorkflows(registry map[string]*definition) error {
	for _, d := range registry {
		if d.dag == nil {
			continue
		}
		for _, n := range d.dag.nodes {
			nd := n.def.def()
			got, ok := registry[nd.name]
			switch {
			case !ok:
				return &DefinitionError{Workflow: d.name, Reason: fmt.Sprintf("node %q runs workflow %q, which is not registered with this engine", n.name, nd.name)}
			case got != nd:
				return &DefinitionError{Workflow: d.name, Reason: fmt.Sprintf("node %q runs a workflow named %q, but another definition is registered under that name", n.name, nd.name)}
			case got == d:
				return &DefinitionError{Workflow: d.name, Reason: fmt.Sprintf("node %q runs the DAG itself", n.name)}
			}
		}
	}
	return nil
}
