package queue

import (
	"context"
	"errors"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// KnowsKind reports whether the Queue would insert a job of kind: false
// only when River would refuse the insert with a
// *rivertype.UnknownJobKindError, because the Queue has workers
// (Config.Workers) and none of them works kind.
//
// An insert-only Queue (Config.Workers nil), or one configured with River's
// SkipUnknownJobCheck, inserts jobs of any kind, so KnowsKind returns true
// for every kind: it cannot tell which kinds some other process works.
//
// KnowsKind asks River itself, without touching the database.
func (q *Queue) KnowsKind(kind string) bool {
	// River validates the kind of each job before anything else, then
	// encodes its args. probeArgs cannot be encoded, so the insert always
	// stops there, before the transaction is used.
	_, err := q.client.InsertManyTx(context.Background(), nil, []river.InsertManyParams{{Args: probeArgs{kind: kind}}})
	var unknown *rivertype.UnknownJobKindError
	return !errors.As(err, &unknown)
}

// errProbe stops KnowsKind's insert once River has checked the kind.
var errProbe = errors.New("queue: kind probe")

type probeArgs struct{ kind string }

func (a probeArgs) Kind() string                 { return a.kind }
func (a probeArgs) MarshalJSON() ([]byte, error) { return nil, errProbe }
