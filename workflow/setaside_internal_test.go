package workflow

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A row set aside is left out for setAsideMin after its first failure,
// twice as long after each failure that follows, up to setAsideMax; it is
// forgotten once woken, or once it has not failed for setAsideMax since it
// was last due to be tried.
func TestSetAsideBacksOff(t *testing.T) {
	t.Parallel()
	var s setAside[string]
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	want := setAsideMin
	for i := range 12 {
		s.fail("bad", now)
		keys, next := s.held(now)
		if len(keys) != 1 || !next.Equal(now.Add(want)) {
			t.Fatalf("failure %d: held %v until %v; want [bad] until %v", i+1, keys, next, now.Add(want))
		}
		if keys, _ := s.held(now.Add(want)); len(keys) != 0 {
			t.Fatalf("failure %d: still held once its pause of %v has passed", i+1, want)
		}
		now = now.Add(want)
		want = min(2*want, setAsideMax)
	}
	s.fail("other", now)
	s.done("other")
	if _, ok := s.rows["other"]; ok {
		t.Fatal("a row woken is still set aside")
	}
	if keys, _ := s.held(now.Add(2*setAsideMax + time.Second)); len(keys) != 0 || len(s.rows) != 0 {
		t.Fatalf("rows %v kept long after their last failure; want them forgotten", s.rows)
	}
}

// Only a fault of the row itself sets it aside: an error raised by a
// trigger or a constraint does, a lost connection, a deadlock, a held lock,
// a full disk or a cancelled statement does not.
func TestRowFault(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"P0001": true, "23505": true, "23514": true, "22P02": true, "42883": true, "XX000": true,
		"08006": false, "40001": false, "40P01": false, "55P03": false, "53100": false, "57014": false, "58030": false,
	} {
		err := fmt.Errorf("waking: %w", &pgconn.PgError{Code: code})
		if got := rowFault(err); got != want {
			t.Errorf("rowFault(%s) = %t; want %t", code, got, want)
		}
	}
	for _, err := range []error{errors.New("connection reset"), context.DeadlineExceeded, nil} {
		if rowFault(err) {
			t.Errorf("rowFault(%v) = true; want false", err)
		}
	}
}
