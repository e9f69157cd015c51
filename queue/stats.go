package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Stats counts jobs by state and by queue at one moment.
type Stats struct {
	// Total is the number of jobs in the table.
	Total int64
	// ByState counts jobs in each state; every state is present, zero
	// included.
	ByState map[rivertype.JobState]int64
	// ByQueue counts, for each queue that has jobs, its jobs in each state;
	// every state is present, zero included.
	ByQueue map[string]map[rivertype.JobState]int64
}

// Stats counts jobs by state and by queue. Dead letters are the discarded
// count.
func (q *Queue) Stats(ctx context.Context) (*Stats, error) {
	rows, err := q.pool.Query(ctx, `SELECT queue, state::text, count(*) FROM river_job GROUP BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("queue: counting jobs: %w", err)
	}
	s := &Stats{ByState: zeroStates(), ByQueue: map[string]map[rivertype.JobState]int64{}}
	var (
		queue, state string
		n            int64
	)
	_, err = pgx.ForEachRow(rows, []any{&queue, &state, &n}, func() error {
		byState, ok := s.ByQueue[queue]
		if !ok {
			byState = zeroStates()
			s.ByQueue[queue] = byState
		}
		byState[rivertype.JobState(state)] += n
		s.ByState[rivertype.JobState(state)] += n
		s.Total += n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: counting jobs: %w", err)
	}
	return s, nil
}

func zeroStates() map[rivertype.JobState]int64 {
	m := make(map[rivertype.JobState]int64, 8)
	for _, s := range rivertype.JobStates() {
		m[s] = 0
	}
	return m
}
