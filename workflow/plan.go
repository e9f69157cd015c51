package workflow

// keyedPlansSQL makes the statements after it, to the end of their
// transaction, run on their generic plans, made with index scans: the
// statements of the outcome batch (pipeTx) and the loads of starting turns
// (loadTasks), which read and write their rows by key, each table by an
// index condition. See "Plans of the turns' statements" in the package
// documentation.
//
// set_config with is_local true is SET LOCAL: the settings end with the
// transaction, or with the implicit transaction of a pipeline of
// statements sent without BEGIN, so nothing else that runs on the
// connection afterwards, braid's or the application's, sees them.
const keyedPlansSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)`
