package scheduler_test

import (
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// The workflow engine starts the runs of schedules whose target is a
// workflow.
var _ scheduler.WorkflowStarter = (*workflow.Engine)(nil)
