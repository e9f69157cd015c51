// Package check is `braid check`: it replays the unfinished runs in a
// database against the workflows of the code about to be deployed, and
// reports the runs that would diverge from their recorded history, where
// and why, before the deploy breaks them.
//
// # Why it lives in your binary
//
// A replay runs workflow code: the check must be built with the same
// workflows as the service it guards. Give a service a check command of
// its own, registering the workflows it registers with its engine:
//
//	func main() { check.Main(billing.Workflows()...) }
//
// and run it in CI or in the deploy pipeline, against the production
// database (a read-only role is enough), with the new code:
//
//	billing-check --database-url "$DATABASE_URL"          # a table
//	billing-check --database-url "$DATABASE_URL" --json   # the report as JSON
//
// It exits 0 when no run would diverge, 1 when some would (or could not be
// replayed, or were left unreplayed over --limit), and 2 on a usage or
// connection error. The stock braid binary
// registers no workflows, and its `braid check` says so.
//
// # What a replay does
//
// Each unfinished task of a selected run runs its workflow function from
// the top, each durable call answered from the task's history
// ([workflow.Engine.CheckReplay]): no step body runs and nothing is
// written. The first call that differs from the recorded one at its
// position (a renamed step, reordered calls, a removed delay) is a
// divergence; the task's next turn would fail with a
// *[workflow.NondeterminismError].
package check
