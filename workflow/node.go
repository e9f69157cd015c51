package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/queue"
)

// A DAG run is its root task and one task per node, the root's children,
// all created in the transaction that creates the root (Start, or the
// batch that spawns the DAG as a child, or that records the first turn of
// a root created without them, see dagSpec.result). The root waits from
// the start, counting its nodes (the join of invariant 5), and so does its
// run when the root is a run's; a node without dependencies gets its
// first turn at once, unless its condition is false (it is skipped at
// once, see createNodesTx); the others are blocked, with remaining set to
// their number of dependencies. When a node is final, the
// settle path (settleNodes) counts it off each of its dependents, in the
// same transaction; a dependent whose count reaches zero is released (its
// condition holds: it gets its first turn) or skipped, and a skip settles
// like a finish, so skips cascade. The root's one turn, once every node is
// final, reads the sinks' outputs (dagSpec.result).

// dagRoot is a DAG root task whose nodes are to be created.
type dagRoot struct {
	spec   *dagSpec
	runID  uuid.UUID
	rootID uuid.UUID
	input  string
	// by is the outcome whose batch spawns the DAG as a child, if any.
	by *outcome
	// link is the link of its first nodes' first turns, if any: to the
	// turn that started a detached DAG, whose turns go to River's fetch.
	link *turnLink
}

// createNodesTx creates the nodes of DAG roots created in tx, and returns
// the first turns of the nodes that depend on nothing, to insert with the
// transaction's other turns. Each node's dependents include the DAG's
// on-failure nodes, which wait for every other node.
//
// A node that depends on nothing but has a When condition is decided here,
// on the run's input, as the settle path decides a node whose dependencies
// are final: it gets its first turn when the condition holds, and is
// created skipped when it does not (failed, when the condition cannot be
// evaluated). What it settles goes through the settle path in tx, so the
// skip cascades to its dependents and its root counts it off; the turns
// that gives (nodes released, or a root all of whose nodes are final) are
// returned with the others. The nodes are tx's own, unseen by any other
// transaction until it commits, and tx holds their roots (new in tx as
// well, or, for a root whose turn creates its nodes, locked by that turn's
// batch), so settling them takes no locks.
func (e *Engine) createNodesTx(ctx context.Context, tx pgx.Tx, roots []dagRoot, fin *txCounts) ([]turn, error) {
	var (
		ids, runIDs, parents            []uuid.UUID
		keys, workflows, inputs, queues []string
		statuses, dependents            []string
		reasons                         []string
		errs                            [][]byte
		onFailures                      []bool
		maxAttempts, remaining          []int32
		prios                           []int16
		turns                           []turn
		settled                         []settlement
		// byTask is the outcome whose batch spawns the DAG, by the
		// tasks of that DAG: the turns the settle path gives go to its
		// worker, as the nodes' first turns do.
		byTask = map[uuid.UUID]*outcome{}
	)
	for _, r := range roots {
		spec := r.spec
		regular := 0
		var onFailure []uuid.UUID
		nodeIDs := make([]uuid.UUID, len(spec.nodes))
		for i, n := range spec.nodes {
			nodeIDs[i] = mustID()
			if n.onFailure {
				onFailure = append(onFailure, nodeIDs[i])
			} else {
				regular++
			}
		}
		for i, n := range spec.nodes {
			nd := n.def.def()
			deps := make([]string, 0, len(spec.dependents[n.name])+len(onFailure))
			for _, name := range spec.dependents[n.name] {
				deps = append(deps, nodeIDs[spec.index[name]].String())
			}
			count := len(n.after)
			if n.onFailure {
				count = regular
			} else {
				for _, id := range onFailure {
					deps = append(deps, id.String())
				}
			}
			status, reason, errJSON := "blocked", "", []byte(nil)
			if count == 0 {
				status = "pending"
				if n.cond != nil {
					status, reason, errJSON = e.nodeDecision(n.decide(spec, nil, json.RawMessage(r.input)))
				}
				if status == "pending" {
					turns = append(turns, turn{taskID: nodeIDs[i], workflow: nd.name, queue: nd.queue, priority: nd.priority,
						maxAttempts: nd.maxAttempts, by: r.by, link: r.link})
				} else {
					settled = append(settled, settlement{taskID: nodeIDs[i], runID: r.runID, parentID: &r.rootID,
						status: status, errJSON: errJSON, key: n.name, dag: spec.name})
				}
			}
			byTask[nodeIDs[i]] = r.by
			ids = append(ids, nodeIDs[i])
			runIDs = append(runIDs, r.runID)
			parents = append(parents, r.rootID)
			keys = append(keys, n.name)
			workflows = append(workflows, nd.name)
			inputs = append(inputs, r.input)
			statuses = append(statuses, status)
			reasons, errs = append(reasons, reason), append(errs, errJSON)
			dependents = append(dependents, "{"+strings.Join(deps, ",")+"}")
			onFailures = append(onFailures, n.onFailure)
			maxAttempts = append(maxAttempts, int32(nd.maxAttempts))
			remaining = append(remaining, int32(count))
			queues = append(queues, nd.queue)
			prios = append(prios, int16(nd.priority))
		}
		byTask[r.rootID] = r.by
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO braid_tasks (id, run_id, parent_task_id, key, workflow, status, input, max_attempts, remaining, queue, priority, dependents, on_failure,
		                         skip_reason, error, finished_at)
		SELECT u.id, u.run_id, u.parent, u.key, u.workflow, u.status, u.input::jsonb, u.max_attempts, u.remaining, u.queue, u.prio, u.dependents::uuid[], u.on_failure,
		       nullif(u.reason, ''), u.error, CASE WHEN u.status IN ('skipped', 'failed') THEN braid_now() END
		  FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::int[], $10::text[], $11::smallint[], $12::text[], $13::bool[],
		              $14::text[], $15::jsonb[])
		       AS u(id, run_id, parent, key, workflow, status, input, max_attempts, remaining, queue, prio, dependents, on_failure, reason, error)`,
		pgIDs(ids), pgIDs(runIDs), pgIDs(parents), keys, workflows, statuses, inputs, maxAttempts, remaining, queues, prios, dependents, onFailures,
		reasons, errs); err != nil {
		return nil, fmt.Errorf("workflow: creating the %d nodes of %d DAG runs: %w", len(ids), len(roots), err)
	}
	if len(settled) == 0 {
		return turns, nil
	}
	for _, s := range settled {
		if s.status == "skipped" {
			fin.skipped++
		}
	}
	// The nodes decided at creation settle as any other: their dependents
	// count them off, and their roots too.
	wake, err := e.settleTx(ctx, tx, settled, true, nil, fin)
	if err != nil {
		return nil, fmt.Errorf("workflow: settling the nodes of %d DAG runs decided at their start: %w", len(roots), err)
	}
	for _, tr := range wake {
		tr.by, tr.releasedBy = byTask[tr.taskID], uuid.Nil
		turns = append(turns, tr)
	}
	return turns, nil
}

// nodeDAGSQL is, in a statement over braid_tasks t, the name of t's DAG
// when t is a DAG node, else NULL.
const nodeDAGSQL = `CASE WHEN t.dependents IS NOT NULL THEN (SELECT p.workflow FROM braid_tasks p WHERE p.id = t.parent_task_id) END`

// lockNodesSQL selects, for the finishing tasks given by param, the
// blocked nodes of the DAGs of those that are DAG nodes: the rows the
// settle path may change besides the finishing tasks and their parents.
// The batch locks them in its one ordered lock statement, so that its
// locks keep the lock order (invariant 9).
func lockNodesSQL(param string) string {
	return `SELECT s.id FROM braid_tasks s
	 WHERE s.parent_task_id = ANY(ARRAY(SELECT f.parent_task_id FROM braid_tasks f WHERE f.id = ANY(` + param + `) AND f.dependents IS NOT NULL))
	   AND s.status = 'blocked'`
}

// lockSettling locks, in the lock order, the parents of settled and the
// blocked nodes of the DAGs of those that are nodes, for a settle whose
// caller holds only the settled tasks (the reconciler). A blocked node
// may come before a settled task in the lock order, so it never waits
// (NOWAIT): when another transaction holds one of these rows, the
// reconciler gives up and looks again a second later.
func (e *Engine) lockSettling(ctx context.Context, tx pgx.Tx, settled []settlement) error {
	ids := make([]uuid.UUID, len(settled))
	for i, s := range settled {
		ids[i] = s.taskID
	}
	if _, err := tx.Exec(ctx, `
		SELECT 1 FROM braid_tasks
		 WHERE id = ANY(ARRAY(SELECT parent_task_id FROM braid_tasks WHERE id = ANY($1) UNION `+lockNodesSQL("$1")+`))
		 ORDER BY created_at DESC, id DESC FOR UPDATE NOWAIT`, ids); err != nil {
		return fmt.Errorf("workflow: locking the parents and DAG nodes of %d settled tasks: %w", len(ids), err)
	}
	return nil
}

// releaseCandidate is a blocked node whose dependencies are all final.
type releaseCandidate struct {
	tr     turn
	runID  uuid.UUID
	rootID uuid.UUID
	key    string
	dag    string
	// by is the node whose settling brought the count to zero.
	by uuid.UUID
}

// settleNodes is the DAG part of the settle path: for the DAG nodes among
// settled (finished by their turn, failed by the reconciler), it counts
// each off its dependents, releases or skips the dependents that reach
// zero, and goes on with the nodes it skipped, so that skips cascade. A
// node that fails under FailDAG skips every blocked node of its DAG that
// does not run on failure. It returns the nodes it skipped or failed, to
// settle with the others (their root counts them off), and the turns of
// the nodes it released. tx holds the blocked nodes of the DAGs locked
// (see lockNodesSQL), and the roots.
func (e *Engine) settleNodes(ctx context.Context, tx pgx.Tx, settled []settlement, fin *txCounts) (more []settlement, wake []turn, err error) {
	var frontier []settlement
	for _, s := range settled {
		if s.dag != "" {
			frontier = append(frontier, s)
		}
	}
	for level := 0; len(frontier) > 0; level++ {
		// The first level reads the DAGs' failed nodes, which another
		// process may have recorded; a later level can add only the
		// failures that decide recorded, which are in its frontier.
		var skipped []settlement
		if level == 0 || slices.ContainsFunc(frontier, func(s settlement) bool { return s.status == "failed" }) {
			if skipped, err = e.failDAGs(ctx, tx, frontier, fin); err != nil {
				return nil, nil, err
			}
		}
		cands, err := e.countOffDependents(ctx, tx, frontier)
		if err != nil {
			return nil, nil, err
		}
		released, final, err := e.decide(ctx, tx, cands, fin)
		if err != nil {
			return nil, nil, err
		}
		wake = append(wake, released...)
		next := append(skipped, final...)
		more = append(more, next...)
		frontier = next
	}
	return more, wake, nil
}

// failDAGs applies FailDAG to the DAGs of the nodes of frontier (see
// failDAGsOf), and returns the nodes it skipped as settled.
func (e *Engine) failDAGs(ctx context.Context, tx pgx.Tx, frontier []settlement, fin *txCounts) ([]settlement, error) {
	dags := map[uuid.UUID]string{}
	for _, s := range frontier {
		if s.dag != "" && s.parentID != nil {
			dags[*s.parentID] = s.dag
		}
	}
	return e.failDAGsOf(ctx, tx, dags, fin)
}

// failDAGsOf skips, in each DAG of dags (root task → DAG name) that this
// process knows and one of whose nodes is recorded failed under FailDAG,
// the blocked nodes that do not run on failure, and returns them as
// settled. The failure is read from the nodes' rows, not taken from the
// nodes settling now: the node may have failed in a process that does not
// know the DAG, which could not apply its policy, and left its dependents
// to a process that does. So the policy holds wherever the node failed:
// the first settle or decision of the DAG in a process that knows it
// applies it before releasing anything. tx holds the DAGs' blocked nodes
// locked.
func (e *Engine) failDAGsOf(ctx context.Context, tx pgx.Tx, dags map[uuid.UUID]string, fin *txCounts) ([]settlement, error) {
	if len(dags) == 0 {
		return nil, nil
	}
	known := make([]uuid.UUID, 0, len(dags))
	for root, dag := range dags {
		if e.dagSpecOf(dag) != nil {
			known = append(known, root)
		}
	}
	if len(known) == 0 {
		return nil, nil
	}
	// The failed regular nodes of the DAGs. (Once their blocked nodes
	// are skipped, the skip below finds none left: it changes nothing.)
	rows, err := tx.Query(ctx, `
		SELECT parent_task_id, id, key FROM braid_tasks
		 WHERE parent_task_id = ANY($1) AND status = 'failed' AND dependents IS NOT NULL AND NOT on_failure`, pgIDs(known))
	if err != nil {
		return nil, fmt.Errorf("workflow: reading the failed nodes of %d DAGs: %w", len(known), err)
	}
	type failedNode struct {
		id  uuid.UUID
		key string
	}
	failedBy := map[uuid.UUID][]failedNode{}
	var (
		root uuid.UUID
		fn   failedNode
	)
	if _, err := pgx.ForEachRow(rows, []any{&root, &fn.id, &fn.key}, func() error {
		failedBy[root] = append(failedBy[root], fn)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("workflow: reading the failed nodes of %d DAGs: %w", len(known), err)
	}
	var (
		roots, causes []uuid.UUID
		reasons       []string
	)
	for _, root := range known {
		failed := failedBy[root]
		if len(failed) == 0 {
			continue
		}
		spec := e.dagSpecOf(dags[root])
		// The cause is the first failed node under FailDAG in the DAG's
		// order, as the run's error names it.
		for _, n := range spec.nodes {
			if n.onFailure || n.policy != FailDAG {
				continue
			}
			if i := slices.IndexFunc(failed, func(f failedNode) bool { return f.key == n.name }); i >= 0 {
				roots = append(roots, root)
				causes = append(causes, failed[i].id)
				reasons = append(reasons, fmt.Sprintf("the DAG failed: node %q failed", n.name))
				break
			}
		}
	}
	if len(roots) == 0 {
		return nil, nil
	}
	rows, err = tx.Query(ctx, `
		UPDATE braid_tasks t
		   SET status = 'skipped', skip_reason = u.reason, remaining = 0, finished_at = braid_now(), updated_at = braid_now()
		  FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS u(root, reason, cause)
		 WHERE t.parent_task_id = u.root AND t.status = 'blocked' AND NOT t.on_failure
		RETURNING t.id, t.run_id, t.parent_task_id, t.key, u.cause`, pgIDs(roots), reasons, pgIDs(causes))
	if err != nil {
		return nil, fmt.Errorf("workflow: skipping the blocked nodes of %d failed DAGs: %w", len(roots), err)
	}
	skipped, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (settlement, error) {
		s := settlement{status: "skipped"}
		err := row.Scan(&s.taskID, &s.runID, &s.parentID, &s.key, &s.by)
		s.dag = dags[*s.parentID]
		return s, err
	})
	if err != nil {
		return nil, err
	}
	fin.skipped += int64(len(skipped))
	return skipped, nil
}

// countOffDependents subtracts each node of frontier from the count of
// each of its blocked dependents, in one statement, and returns the
// dependents whose count reached zero.
func (e *Engine) countOffDependents(ctx context.Context, tx pgx.Tx, frontier []settlement) ([]releaseCandidate, error) {
	ids := make([]uuid.UUID, len(frontier))
	origin := make([]uuid.UUID, len(frontier))
	for i, s := range frontier {
		ids[i], origin[i] = s.taskID, s.origin()
	}
	rows, err := tx.Query(ctx, `
		WITH f AS (
		    SELECT u.origin, unnest(t.dependents) AS dep
		      FROM unnest($1::uuid[], $2::uuid[]) AS u(id, origin) JOIN braid_tasks t ON t.id = u.id
		), c AS (
		    SELECT dep, count(*)::int AS n, (array_agg(origin))[1] AS origin FROM f GROUP BY dep
		)
		UPDATE braid_tasks d SET remaining = greatest(d.remaining - c.n, 0), updated_at = braid_now()
		  FROM c
		 WHERE d.id = ANY(ARRAY(SELECT dep FROM c)) AND d.id = c.dep AND d.status = 'blocked'
		RETURNING d.id, d.workflow, d.queue, d.priority, d.max_attempts, d.run_id, d.parent_task_id, d.key, c.origin,
		          CASE WHEN d.remaining = 0 THEN (SELECT p.workflow FROM braid_tasks p WHERE p.id = d.parent_task_id) END`, pgIDs(ids), pgIDs(origin))
	if err != nil {
		return nil, fmt.Errorf("workflow: counting %d finished nodes off their dependents: %w", len(ids), err)
	}
	defer rows.Close()
	var cands []releaseCandidate
	for rows.Next() {
		var c releaseCandidate
		var prio int16
		var dag *string
		if err := rows.Scan(&c.tr.taskID, &c.tr.workflow, &c.tr.queue, &prio, &c.tr.maxAttempts, &c.runID, &c.rootID, &c.key, &c.by, &dag); err != nil {
			return nil, fmt.Errorf("workflow: counting finished nodes off their dependents: %w", err)
		}
		c.tr.priority = queue.Priority(prio)
		if dag != nil {
			c.dag = *dag
			cands = append(cands, c)
		}
	}
	return cands, rows.Err()
}

// dependency is a final dependency of a release candidate.
type dependency struct {
	key    string
	status string
	output json.RawMessage
}

// decide releases or skips the candidates whose dependencies are all
// final, and fails those whose condition cannot be evaluated. An
// on-failure node runs when a node of its DAG failed under FailDAG, and is
// skipped otherwise. A node with a When condition runs when it holds. A
// node without one is skipped when every dependency was skipped, and runs
// otherwise. It returns the turns of the released nodes, and the skipped
// and failed ones as settled.
func (e *Engine) decide(ctx context.Context, tx pgx.Tx, cands []releaseCandidate, fin *txCounts) (released []turn, final []settlement, err error) {
	if len(cands) == 0 {
		return nil, nil, nil
	}
	var ids, withOutput, roots, inputRoots []uuid.UUID
	for _, c := range cands {
		ids = append(ids, c.tr.taskID)
		if !slices.Contains(roots, c.rootID) {
			roots = append(roots, c.rootID)
		}
		spec := e.dagSpecOf(c.dag)
		if spec == nil {
			continue
		}
		if n := spec.node(c.key); n != nil && n.cond != nil {
			withOutput = append(withOutput, c.tr.taskID)
			if !slices.Contains(inputRoots, c.rootID) {
				inputRoots = append(inputRoots, c.rootID)
			}
		}
	}
	// The dependencies of the candidates: the nodes of their DAGs that
	// name them among their dependents, in one pass over those nodes.
	b := &pgx.Batch{}
	b.Queue(`
		SELECT d.dep, s.key, s.status, CASE WHEN d.dep = ANY($3) THEN s.output END
		  FROM braid_tasks s CROSS JOIN LATERAL unnest(s.dependents) AS d(dep)
		 WHERE s.parent_task_id = ANY($1) AND d.dep = ANY($2)`, roots, ids, withOutput)
	b.Queue(`SELECT id, input FROM braid_tasks WHERE id = ANY($1)`, inputRoots)
	br := tx.SendBatch(ctx, b)
	deps := map[uuid.UUID][]dependency{}
	inputs := map[uuid.UUID]json.RawMessage{}
	readErr := func() error {
		defer func() { _ = br.Close() }()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var id uuid.UUID
			var d dependency
			if err := rows.Scan(&id, &d.key, &d.status, &d.output); err != nil {
				rows.Close()
				return err
			}
			deps[id] = append(deps[id], d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var id uuid.UUID
			var in json.RawMessage
			if err := rows.Scan(&id, &in); err != nil {
				rows.Close()
				return err
			}
			inputs[id] = in
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	}()
	if readErr != nil {
		return nil, nil, fmt.Errorf("workflow: reading the dependencies of %d released nodes: %w", len(cands), readErr)
	}

	var (
		relIDs               []uuid.UUID
		finIDs               []uuid.UUID
		finStatus, finReason []string
		finErr               [][]byte
		byCand               = map[uuid.UUID]releaseCandidate{}
	)
	for _, c := range cands {
		byCand[c.tr.taskID] = c
		spec := e.dagSpecOf(c.dag)
		var n *dagNode
		if spec != nil {
			n = spec.node(c.key)
		}
		if n == nil {
			// This process does not know the DAG (a rolling deploy, or
			// another service's DAG): the node stays blocked with nothing
			// left to wait for, and a process that knows the DAG decides
			// it (decideUndecidedNodes). Logged once per node of a DAG;
			// a process that knows the DAG but not the node (another
			// version of it) leaves it to a process that declares it.
			if _, logged := e.unknownLogged.LoadOrStore("dag node\x00"+c.dag+"\x00"+c.key, true); !logged {
				e.logger.WarnContext(ctx, "workflow: a DAG node's dependencies are final, but this process does not know its DAG or the node; leaving it to a process that does",
					"dag", c.dag, "node", c.key, "task.id", c.tr.taskID)
			}
			continue
		}
		status, reason, errJSON := e.nodeDecision(n.decide(spec, deps[c.tr.taskID], inputs[c.rootID]))
		if status == "pending" {
			relIDs = append(relIDs, c.tr.taskID)
			tr := c.tr
			tr.releasedBy = c.by
			released = append(released, tr)
			continue
		}
		finIDs, finStatus, finReason, finErr = append(finIDs, c.tr.taskID), append(finStatus, status), append(finReason, reason), append(finErr, errJSON)
	}
	if len(relIDs) > 0 {
		if _, err := tx.Exec(ctx, `
			UPDATE braid_tasks SET status = 'pending', updated_at = braid_now() WHERE id = ANY($1) AND status = 'blocked'`, relIDs); err != nil {
			return nil, nil, fmt.Errorf("workflow: releasing %d nodes: %w", len(relIDs), err)
		}
	}
	if len(finIDs) > 0 {
		rows, err := tx.Query(ctx, `
			UPDATE braid_tasks t
			   SET status = u.status, skip_reason = nullif(u.reason, ''), error = u.error, remaining = 0,
			       finished_at = braid_now(), updated_at = braid_now()
			  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[]) AS u(id, status, reason, error)
			 WHERE t.id = u.id AND t.status = 'blocked'
			RETURNING t.id, t.run_id, t.parent_task_id, t.key, u.status, u.error`, pgIDs(finIDs), finStatus, finReason, finErr)
		if err != nil {
			return nil, nil, fmt.Errorf("workflow: skipping %d nodes: %w", len(finIDs), err)
		}
		final, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (settlement, error) {
			var s settlement
			err := row.Scan(&s.taskID, &s.runID, &s.parentID, &s.key, &s.status, &s.errJSON)
			c := byCand[s.taskID]
			s.dag, s.by = c.dag, c.by
			return s, err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("workflow: skipping nodes: %w", err)
		}
		for _, s := range final {
			if s.status == "skipped" {
				fin.skipped++
			}
		}
	}
	return released, final, nil
}

// nodeDecision is the status a node takes by its decision (dagNode.decide):
// pending, to run; failed, with its stored error, when its condition could
// not be evaluated; or skipped, with the reason, which may quote the
// condition and is stored as error text is, safe for PostgreSQL's text.
// A node decided at its DAG's start and one released later take it alike.
func (e *Engine) nodeDecision(run bool, why string, evalErr error) (status, reason string, errJSON []byte) {
	switch {
	case evalErr != nil:
		errJSON, _ = json.Marshal(e.storedError(evalErr, 0))
		return "failed", "", errJSON
	case run:
		return "pending", "", nil
	default:
		return "skipped", queue.SanitizeErrorText(why, e.cfg.MaxErrorBytes), nil
	}
}

// decide says whether the node runs, now that its dependencies (deps) are
// final, and if not, why; input is its DAG's input. An error is a
// condition that could not be evaluated: it fails the node.
func (n *dagNode) decide(spec *dagSpec, deps []dependency, input json.RawMessage) (run bool, reason string, err error) {
	if n.onFailure {
		for _, d := range deps {
			if o := spec.node(d.key); d.status == "failed" && o != nil && o.policy == FailDAG {
				return true, "", nil
			}
		}
		return false, "the DAG did not fail", nil
	}
	if n.cond != nil {
		outputs := make(map[string]json.RawMessage, len(deps))
		status := make(map[string]string, len(deps))
		for _, d := range deps {
			if d.status == "completed" {
				outputs[d.key] = d.output
			}
			status[d.key] = d.status
		}
		ok, err := n.cond.eval(input, outputs, status)
		if err != nil {
			return false, "", err
		}
		if !ok {
			return false, "condition false: " + n.when, nil
		}
		return true, "", nil
	}
	if len(deps) == 0 {
		// A node without dependencies (decided by Retry) runs.
		return true, "", nil
	}
	var skipped []string
	for _, d := range deps {
		if d.status != "skipped" {
			return true, "", nil
		}
		skipped = append(skipped, d.key)
	}
	slices.Sort(skipped)
	return false, "every dependency was skipped: " + strings.Join(skipped, ", "), nil
}

// dagSpecOf returns the DAG registered under name, or nil.
func (e *Engine) dagSpecOf(name string) *dagSpec {
	if d, ok := e.registry[name]; ok {
		return d.dag
	}
	return nil
}

// node returns the node named name, or nil.
func (s *dagSpec) node(name string) *dagNode {
	if i, ok := s.index[name]; ok {
		return s.nodes[i]
	}
	return nil
}

// result is the work of a DAG's root task, in its one turn once every node
// is final: the run fails with the first node (in topological order) that
// failed under FailDAG, and otherwise completes with its sinks' outputs.
// A run keeps the nodes it was started with: a node declared since (a
// deploy that added it) is none of its nodes. A root whose nodes are not all final (a Retry that reset some) waits for
// them. A root that has no nodes at all is a node of another DAG, or was
// started by a process that does not know the DAG (StartByName): its turn
// creates them, as the start of a run does (createNodesTx, in the turn's
// outcome), and waits for them.
func (s *dagSpec) result(t *Task) (json.RawMessage, error) {
	if len(t.children) == 0 {
		t.nodes, t.waitChildren = s, true
		return nil, t.suspend()
	}
	var failed *NodeError
	for _, n := range s.nodes {
		c := t.children[n.name]
		if c == nil {
			// A node declared after the run started is not one of its
			// nodes: a run keeps the nodes it was started with.
			continue
		}
		if !finished(c.status) {
			t.waitChildren = true
			return nil, t.suspend()
		}
		if failed == nil && !n.onFailure && n.policy == FailDAG && (c.status == "failed" || c.status == "cancelled") {
			failed = &NodeError{DAG: s.name, Node: n.name, Workflow: c.workflow, Status: c.status, Message: c.err.Message}
		}
	}
	if failed != nil {
		return nil, failed
	}
	res := DAGResult{}
	for _, name := range s.runSinks(t.children) {
		if c := t.children[name]; c.status == "completed" {
			res[name] = c.output
		}
	}
	return t.eng.encode(fmt.Sprintf("output of DAG %q", s.name), res)
}

// runSinks are the sinks of a run whose nodes are nodes: the DAG's sinks
// when the run has every node it declares, and otherwise (a run started
// before nodes were added to the DAG) the declared nodes of the run that
// no other declared node of the run depends on.
func (s *dagSpec) runSinks(nodes map[string]*childRecord) []string {
	complete := true
	for _, n := range s.nodes {
		if nodes[n.name] == nil {
			complete = false
			break
		}
	}
	if complete {
		return s.sinks
	}
	var sinks []string
	for _, n := range s.nodes {
		if n.onFailure || nodes[n.name] == nil {
			continue
		}
		if !slices.ContainsFunc(s.dependents[n.name], func(d string) bool { return nodes[d] != nil }) {
			sinks = append(sinks, n.name)
		}
	}
	return sinks
}

// Output reads the output of this node from inside one of its dependents'
// turns, typed. A dependency that did not complete (it was skipped, or
// failed under Continue) has no output: Output returns an error that
// matches ErrNoOutput. Reading a node that is not a dependency of the
// running node is an error too.
func (r *NodeRef[Out]) Output(t *Task) (Out, error) {
	var out Out
	if t.parentID == nil {
		return out, fmt.Errorf("workflow: task %s is not a DAG node, so it has no node %q to read", t.id, r.n.name)
	}
	var (
		status string
		raw    json.RawMessage
		errRaw []byte
	)
	err := t.eng.pool.QueryRow(t.ctx, `
		SELECT status, output, error FROM braid_tasks
		 WHERE parent_task_id = $1 AND key = $2 AND $3 = ANY(dependents)`, *t.parentID, r.n.name, t.id).Scan(&status, &raw, &errRaw)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, fmt.Errorf("workflow: node %q is not a dependency of node %q", r.n.name, t.key)
	}
	if err != nil {
		return out, fmt.Errorf("workflow: reading the output of node %q: %w", r.n.name, err)
	}
	if status != "completed" {
		var se storedError
		_ = json.Unmarshal(errRaw, &se)
		if se.Message != "" {
			return out, fmt.Errorf("%w: node %q %s: %s", ErrNoOutput, r.n.name, status, se.Message)
		}
		return out, fmt.Errorf("%w: node %q is %s", ErrNoOutput, r.n.name, status)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, &EncodeError{What: fmt.Sprintf("output of node %q", r.n.name), Err: err}
	}
	return out, nil
}

// retryNodesTx resets the nodes of a failed or cancelled run's DAGs
// (those that did not complete) for Retry: every node that did not complete (failed, cancelled, skipped)
// and every on-failure node is blocked again, counting its dependencies
// among the reset ones; completed nodes keep their output. The reset
// nodes with nothing to wait for are decided at once, as the settle path
// decides them, and what that skips settles on. It returns the turns of
// the nodes it released, and the nodes it reset but did not release,
// whose descendants Retry leaves as they are.
//
// A reset node that waits for a dependency that runs again starts afresh
// once it is released: what it recorded (its steps, its children with
// their descendants) is forgotten now. Its dependencies' outputs may
// change, and it may be skipped when it is decided: nothing it started
// must run meanwhile, out of the DAG's order, or for a node that does not
// run. A node decided at once has the same dependencies as before, and a
// released one resumes where it stopped. tx holds the run's tasks locked.
func (e *Engine) retryNodesTx(ctx context.Context, tx pgx.Tx, runID uuid.UUID, fin *txCounts) ([]turn, []uuid.UUID, error) {
	rows, err := tx.Query(ctx, openTasksSQL+`
		SELECT t.id, t.parent_task_id, t.key, t.status, t.workflow, t.queue, t.priority, t.max_attempts, p.workflow
		  FROM braid_tasks t JOIN braid_tasks p ON p.id = t.parent_task_id
		 WHERE t.run_id = $1 AND t.dependents IS NOT NULL AND p.id IN (SELECT id FROM open)`, runID)
	if err != nil {
		return nil, nil, fmt.Errorf("workflow: reading the DAG nodes of run %s: %w", runID, err)
	}
	type nodeRow struct {
		c      releaseCandidate
		status string
	}
	byRoot := map[uuid.UUID][]nodeRow{}
	var roots []uuid.UUID
	for rows.Next() {
		var r nodeRow
		var prio int16
		if err := rows.Scan(&r.c.tr.taskID, &r.c.rootID, &r.c.key, &r.status, &r.c.tr.workflow, &r.c.tr.queue, &prio, &r.c.tr.maxAttempts, &r.c.dag); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("workflow: reading the DAG nodes of run %s: %w", runID, err)
		}
		r.c.tr.priority, r.c.runID = queue.Priority(prio), runID
		if byRoot[r.c.rootID] == nil {
			roots = append(roots, r.c.rootID)
		}
		byRoot[r.c.rootID] = append(byRoot[r.c.rootID], r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("workflow: reading the DAG nodes of run %s: %w", runID, err)
	}
	var (
		ids, fresh []uuid.UUID
		remaining  []int32
		cands      []releaseCandidate
	)
	for _, root := range roots {
		nodes := byRoot[root]
		spec := e.dagSpecOf(nodes[0].c.dag)
		if spec == nil {
			return nil, nil, fmt.Errorf("workflow: run %s has nodes of DAG %q, which is not registered with this engine; retry it from a process that registers it", runID, nodes[0].c.dag)
		}
		again := map[string]bool{}
		regular := 0
		for _, r := range nodes {
			n := spec.node(r.c.key)
			if n == nil {
				return nil, nil, fmt.Errorf("workflow: run %s has a node %q that DAG %q does not declare", runID, r.c.key, spec.name)
			}
			if r.status != "completed" || n.onFailure {
				again[r.c.key] = true
				if !n.onFailure {
					regular++
				}
			}
		}
		for _, r := range nodes {
			if !again[r.c.key] {
				continue
			}
			n := spec.node(r.c.key)
			count := 0
			if n.onFailure {
				count = regular
			} else {
				for _, dep := range n.after {
					if again[dep] {
						count++
					}
				}
			}
			ids, remaining = append(ids, r.c.tr.taskID), append(remaining, int32(count))
			if count == 0 {
				cands = append(cands, r.c)
			} else {
				fresh = append(fresh, r.c.tr.taskID)
			}
		}
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	if _, err := tx.Exec(ctx, `
		UPDATE braid_tasks t
		   SET status = 'blocked', remaining = u.remaining, output = NULL, error = NULL, skip_reason = NULL,
		       attempt = 0, finished_at = NULL, updated_at = braid_now()
		  FROM unnest($1::uuid[], $2::int[]) AS u(id, remaining)
		 WHERE t.id = u.id`, pgIDs(ids), remaining); err != nil {
		return nil, nil, fmt.Errorf("workflow: resetting %d DAG nodes of run %s: %w", len(ids), runID, err)
	}
	if len(fresh) > 0 {
		var all forgottenEnds
		for _, id := range fresh {
			all.add(id, -1, nil)
		}
		if err := forgetAfterTx(ctx, tx, all); err != nil {
			return nil, nil, fmt.Errorf("workflow: forgetting what %d DAG nodes of run %s recorded: %w", len(fresh), runID, err)
		}
		// The nodes of a DAG that a forgotten record ran (a node that is
		// a DAG, or a DAG child of a node, that starts afresh) went with
		// it: none is decided, and none gets a turn. The node's next
		// turn creates its DAG's nodes anew.
		if len(cands) > 0 {
			candIDs := make([]uuid.UUID, len(cands))
			for i, c := range cands {
				candIDs[i] = c.tr.taskID
			}
			rows, err := tx.Query(ctx, `SELECT id FROM braid_tasks WHERE id = ANY($1)`, pgIDs(candIDs))
			if err != nil {
				return nil, nil, fmt.Errorf("workflow: reading the DAG nodes of run %s still to decide: %w", runID, err)
			}
			kept, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return nil, nil, fmt.Errorf("workflow: reading the DAG nodes of run %s still to decide: %w", runID, err)
			}
			exists := make(map[uuid.UUID]bool, len(kept))
			for _, id := range kept {
				exists[id] = true
			}
			cands = slices.DeleteFunc(cands, func(c releaseCandidate) bool { return !exists[c.tr.taskID] })
		}
	}
	wake, final, err := e.decide(ctx, tx, cands, fin)
	if err != nil {
		return nil, nil, err
	}
	// What the decisions skipped settles on among the nodes; the roots
	// count their unfinished nodes afresh (retryTx).
	_, released, err := e.settleNodes(ctx, tx, final, fin)
	if err != nil {
		return nil, nil, err
	}
	wake = append(wake, released...)
	running := make(map[uuid.UUID]bool, len(wake))
	for _, tr := range wake {
		running[tr.taskID] = true
	}
	frozen := slices.DeleteFunc(ids, func(id uuid.UUID) bool { return running[id] })
	return wake, frozen, nil
}

// decideNodesEvery runs decideUndecidedNodes every interval until ctx
// ends. Every process that knows a DAG runs it, not only the maintenance
// lease's holder: services that share a database each know their own
// DAGs, and the holder may know none of another's.
func (e *Engine) decideNodesEvery(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		if err := e.decideUndecidedNodes(ctx); err != nil && ctx.Err() == nil {
			e.logger.ErrorContext(ctx, "workflow: deciding undecided DAG nodes failed", "error", err)
		}
	})
}

// every runs fn once every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// decideUndecidedNodes is the look for DAG nodes left blocked with no
// dependency left to wait for: the process that settled their last
// dependency did not know their DAG (during a rolling deploy, or in a
// service that shares the database), so it left the decision to a process
// that does. This one decides the nodes of the DAGs it knows, as the
// settle path would have, each DAG under its locks (its blocked nodes,
// then its root, in the lock order), so that processes that look at the
// same time decide each node once.
//
// It asks only for the roots of the DAGs it knows, those whose nodes have
// waited longest first, up to reconcileBatch of them: the nodes of a DAG
// that this process does not know (services sharing a database) wait for
// a process that knows it, and however many they are, they hide none of
// the DAGs this one knows. An engine that knows no DAG does not look.
func (e *Engine) decideUndecidedNodes(ctx context.Context) error {
	if len(e.dagNames) == 0 {
		return nil
	}
	// Only the nodes this process declares: a node that another version
	// of a known DAG declares (a rolling deploy that added or removed it)
	// is left to a process of that version, and, however many of them
	// wait, they hide none of the nodes this one can decide.
	var dags, keys []string
	for _, name := range e.dagNames {
		for _, n := range e.dagSpecOf(name).nodes {
			dags, keys = append(dags, name), append(keys, n.name)
		}
	}
	rows, err := e.pool.Query(ctx, `
		SELECT t.parent_task_id, p.workflow FROM braid_tasks t JOIN braid_tasks p ON p.id = t.parent_task_id
		 WHERE t.status = 'blocked' AND t.remaining = 0 AND t.dependents IS NOT NULL
		   AND p.workflow = ANY($1::text[])
		   AND (p.workflow, t.key) IN (SELECT * FROM unnest($3::text[], $4::text[]))
		 GROUP BY t.parent_task_id, p.workflow
		 ORDER BY min(t.updated_at), t.parent_task_id
		 LIMIT $2`, e.dagNames, reconcileBatch, dags, keys)
	if err != nil {
		return fmt.Errorf("workflow: finding undecided DAG nodes: %w", err)
	}
	type dagRef struct {
		root uuid.UUID
		dag  string
	}
	refs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dagRef, error) {
		var r dagRef
		return r, row.Scan(&r.root, &r.dag)
	})
	if err != nil {
		return fmt.Errorf("workflow: finding undecided DAG nodes: %w", err)
	}
	var errs []error
	for _, r := range refs {
		if ctx.Err() != nil {
			return errors.Join(append(errs, ctx.Err())...)
		}
		if e.dagSpecOf(r.dag) == nil {
			continue
		}
		if err := e.decideDAG(ctx, r.root, r.dag); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// decideDAG decides the undecided nodes of the DAG dag whose root task is
// root, in one transaction. As the reconciler's, it runs to its end even
// when ctx ends meanwhile, bounded by OutcomeTimeout (see reconcileTask).
func (e *Engine) decideDAG(ctx context.Context, root uuid.UUID, dag string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.OutcomeTimeout)
	defer cancel()
	var fin txCounts
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		fin = txCounts{}
		if _, err := tx.Exec(ctx, `
			SELECT 1 FROM braid_tasks WHERE id = $1 OR (parent_task_id = $1 AND status = 'blocked')
			 ORDER BY created_at DESC, id DESC FOR UPDATE`, root); err != nil {
			return err
		}
		// A node that failed under FailDAG in a process that did not
		// know the DAG skips the DAG's blocked nodes now, before any is
		// released.
		skipped, err := e.failDAGsOf(ctx, tx, map[uuid.UUID]string{root: dag}, &fin)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT id, workflow, queue, priority, max_attempts, run_id, key FROM braid_tasks
			 WHERE parent_task_id = $1 AND status = 'blocked' AND remaining = 0 AND dependents IS NOT NULL`, root)
		if err != nil {
			return err
		}
		cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (releaseCandidate, error) {
			c := releaseCandidate{rootID: root, dag: dag}
			var prio int16
			err := row.Scan(&c.tr.taskID, &c.tr.workflow, &c.tr.queue, &prio, &c.tr.maxAttempts, &c.runID, &c.key)
			c.tr.priority = queue.Priority(prio)
			c.by = c.tr.taskID
			return c, err
		})
		if err != nil {
			return err
		}
		released, final, err := e.decide(ctx, tx, cands, &fin)
		if err != nil {
			return err
		}
		wake, err := e.settleTx(ctx, tx, append(skipped, final...), true, nil, &fin)
		if err != nil {
			return err
		}
		return e.wakeTurns(ctx, tx, append(released, wake...))
	})
	if err != nil {
		return fmt.Errorf("workflow: deciding the nodes of DAG %q (root task %s): %w", dag, root, err)
	}
	fin.record(ctx, e.metrics)
	return nil
}
