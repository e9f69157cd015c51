package scheduler_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/braidflow/braid/scheduler"
)

// Weekdays at 09:00 in Berlin, across the start of summer time on
// 2026-03-29.
func ExampleParse() {
	e, err := scheduler.Parse("0 9 * * MON-FRI", "Europe/Berlin")
	if err != nil {
		panic(err)
	}
	t := time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC) // a Friday
	for range 3 {
		t = e.Next(t)
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-03-30T09:00:00+02:00
	// 2026-03-31T09:00:00+02:00
	// 2026-04-01T09:00:00+02:00
}

// @every counts from the slot it is given, so successive slots keep a
// fixed grid; the interval accepts days and fractions.
func ExampleParse_every() {
	e, err := scheduler.Parse("@every 1.5d", "")
	if err != nil {
		panic(err)
	}
	fmt.Println(e)
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 2 {
		t = e.Next(t)
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// @every 1d12h
	// 2026-01-02T12:00:00Z
	// 2026-01-04T00:00:00Z
}

// A daily slot at 02:30 in New York on the day clocks spring forward (the
// wall time does not exist) fires at 03:30, 24 hours after the day before;
// a daily slot at 01:30 on the day clocks fall back fires once.
func ExampleParse_daylightSaving() {
	spring := scheduler.MustParse("30 2 * * *", "America/New_York")
	t := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
	for range 3 {
		t = spring.Next(t)
		fmt.Println(t.Format(time.RFC3339))
	}
	fall := scheduler.MustParse("30 1 * * *", "America/New_York")
	t = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for range 2 {
		t = fall.Next(t)
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-03-07T02:30:00-05:00
	// 2026-03-08T03:30:00-04:00
	// 2026-03-09T02:30:00-04:00
	// 2026-11-01T01:30:00-04:00
	// 2026-11-02T01:30:00-05:00
}

// Rejected expressions say what is wrong.
func ExampleParse_errors() {
	for _, expr := range []string{"61 * * * *", "@fortnightly", "@every 0s", "0 0 * * * *"} {
		_, err := scheduler.Parse(expr, "UTC")
		var exprErr *scheduler.ExpressionError
		if errors.As(err, &exprErr) {
			fmt.Println(exprErr.Reason)
		}
	}
	_, err := scheduler.Parse("@daily", "Mars/Olympus_Mons")
	fmt.Println(errors.Is(err, scheduler.ErrInvalidExpression), err)
	// Output:
	// minute field 61 is out of range 0-59
	// unknown descriptor @fortnightly (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)
	// @every needs a positive duration, got 0s
	// expected 5 fields (minute hour day-of-month month day-of-week), got 6
	// true scheduler: invalid expression "@daily": unknown time zone "Mars/Olympus_Mons"
}
