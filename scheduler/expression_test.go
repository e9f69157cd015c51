package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// utc parses an RFC 3339 time for test tables.
func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v
}

// nextTimes returns the n slots after start, each computed from the one
// before, as RFC 3339 strings in UTC.
func nextTimes(e *Expression, start time.Time, n int) []string {
	var out []string
	t := start
	for range n {
		t = e.Next(t)
		out = append(out, t.UTC().Format(time.RFC3339Nano))
	}
	return out
}

func TestParseNext(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		expr  string
		zone  string
		after string
		want  []string // successive slots, in UTC
	}{
		// Descriptors. 2026-05-15 is a Friday.
		{"yearly", "@yearly", "", "2026-05-15T10:00:00Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"annually", "@annually", "UTC", "2026-05-15T10:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"monthly", "@monthly", "", "2026-05-15T10:00:00Z", []string{"2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z"}},
		{"weekly is Sunday midnight", "@weekly", "", "2026-05-15T10:00:00Z", []string{"2026-05-17T00:00:00Z", "2026-05-24T00:00:00Z"}},
		{"daily", "@daily", "", "2026-05-15T10:00:00Z", []string{"2026-05-16T00:00:00Z", "2026-05-17T00:00:00Z"}},
		{"midnight", "@midnight", "", "2026-05-15T10:00:00Z", []string{"2026-05-16T00:00:00Z"}},
		{"hourly", "@hourly", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T11:00:00Z", "2026-05-15T12:00:00Z"}},
		{"hourly from mid-hour", "@hourly", "", "2026-05-15T10:59:59.999Z", []string{"2026-05-15T11:00:00Z"}},
		{"descriptor case", "@DAILY", "", "2026-05-15T10:00:00Z", []string{"2026-05-16T00:00:00Z"}},
		{"daily in Berlin", "@daily", "Europe/Berlin", "2026-05-15T10:00:00Z", []string{"2026-05-15T22:00:00Z", "2026-05-16T22:00:00Z"}},
		{"daily in Kolkata", "@daily", "Asia/Kolkata", "2026-05-15T20:00:00Z", []string{"2026-05-16T18:30:00Z"}},

		// @every is anchored on its argument.
		{"every 1s", "@every 1s", "", "2026-05-15T10:00:00.25Z", []string{"2026-05-15T10:00:01.25Z", "2026-05-15T10:00:02.25Z"}},
		{"every 90s", "@every 90s", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T10:01:30Z", "2026-05-15T10:03:00Z"}},
		{"every 1h30m", "@every 1h30m", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T11:30:00Z", "2026-05-15T13:00:00Z"}},
		{"every 7d", "@every 7d", "", "2026-05-15T10:00:00Z", []string{"2026-05-22T10:00:00Z", "2026-05-29T10:00:00Z"}},
		{"every 1.5d", "@every 1.5d", "", "2026-05-15T10:00:00Z", []string{"2026-05-16T22:00:00Z"}},
		{"every 1d12h", "@every 1d12h", "", "2026-05-15T10:00:00Z", []string{"2026-05-16T22:00:00Z"}},
		{"every ms", "@every 1500ms", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T10:00:01.5Z"}},
		{"every us", "@every 2000000us", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T10:00:02Z"}},
		{"every µs", "@every 2000000µs", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T10:00:02Z"}},
		{"every ns", "@every 3000000000ns", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T10:00:03Z"}},
		{"every mixed", "@every 1s1ms1us1ns", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T10:00:01.001001001Z"}},

		// 5-field cron.
		{"every minute", "* * * * *", "", "2026-05-15T10:00:30Z", []string{"2026-05-15T10:01:00Z", "2026-05-15T10:02:00Z"}},
		{"step", "*/15 * * * *", "", "2026-05-15T10:07:00Z", []string{"2026-05-15T10:15:00Z", "2026-05-15T10:30:00Z", "2026-05-15T10:45:00Z", "2026-05-15T11:00:00Z"}},
		{"start with step", "5/20 * * * *", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T10:05:00Z", "2026-05-15T10:25:00Z", "2026-05-15T10:45:00Z", "2026-05-15T11:05:00Z"}},
		{"range with step", "0 8-18/5 * * *", "", "2026-05-15T10:00:00Z", []string{"2026-05-15T13:00:00Z", "2026-05-15T18:00:00Z", "2026-05-16T08:00:00Z"}},
		{"weekdays by name", "0 9 * * MON-FRI", "", "2026-05-15T10:00:00Z", []string{"2026-05-18T09:00:00Z", "2026-05-19T09:00:00Z"}},
		{"weekday names lower case", "0 9 * * sat,sun", "", "2026-05-15T10:00:00Z", []string{"2026-05-16T09:00:00Z", "2026-05-17T09:00:00Z", "2026-05-23T09:00:00Z"}},
		{"Sunday as 7", "0 12 * * 7", "", "2026-05-15T10:00:00Z", []string{"2026-05-17T12:00:00Z"}},
		{"range to 7", "0 12 * * 5-7", "", "2026-05-15T13:00:00Z", []string{"2026-05-16T12:00:00Z", "2026-05-17T12:00:00Z", "2026-05-22T12:00:00Z"}},
		{"list of days", "30 4 1,15 * *", "", "2026-05-15T10:00:00Z", []string{"2026-06-01T04:30:00Z", "2026-06-15T04:30:00Z"}},
		{"month names", "0 0 1 JAN,jul *", "", "2026-05-15T10:00:00Z", []string{"2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"day fields ORed when both restricted", "0 0 13 * FRI", "", "2026-05-15T10:00:00Z", []string{"2026-05-22T00:00:00Z", "2026-05-29T00:00:00Z", "2026-06-05T00:00:00Z", "2026-06-12T00:00:00Z", "2026-06-13T00:00:00Z"}},
		{"question mark", "0 0 ? * MON", "", "2026-05-15T10:00:00Z", []string{"2026-05-18T00:00:00Z"}},
		{"restricted step ORs", "0 0 */10 * SUN", "", "2026-05-15T10:00:00Z", []string{"2026-05-17T00:00:00Z", "2026-05-21T00:00:00Z", "2026-05-24T00:00:00Z"}},
		{"leap day", "0 0 29 2 *", "", "2026-05-15T10:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"leap day across 2100", "0 0 29 2 *", "", "2097-01-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}},
		{"31st skips short months", "0 0 31 * *", "", "2026-05-15T10:00:00Z", []string{"2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z"}},
		{"extra spaces", "  0   9 * *   *  ", "", "2026-05-15T10:00:00Z", []string{"2026-05-16T09:00:00Z"}},
		{"cron in Berlin", "0 9 * * *", "Europe/Berlin", "2026-05-15T10:00:00Z", []string{"2026-05-16T07:00:00Z"}},
		{"cron in Kolkata", "15 10 * * *", "Asia/Kolkata", "2026-05-15T00:00:00Z", []string{"2026-05-15T04:45:00Z", "2026-05-16T04:45:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := Parse(tt.expr, tt.zone)
			if err != nil {
				t.Fatalf("Parse(%q, %q): %v", tt.expr, tt.zone, err)
			}
			got := nextTimes(e, utc(t, tt.after), len(tt.want))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Next of %q in %q after %s (-want +got):\n%s", tt.expr, tt.zone, tt.after, diff)
			}
		})
	}
}

// TestNextDaylightSaving checks the documented daylight-saving rules:
// missing wall times fire one gap later (or are skipped when every hour
// matches), repeated wall times fire once (or on both passes when every hour
// matches), and @every counts elapsed time.
func TestNextDaylightSaving(t *testing.T) {
	t.Parallel()

	// America/New_York: 2026-03-08 02:00 EST (07:00Z) jumps to 03:00 EDT;
	// 2026-11-01 02:00 EDT (06:00Z) falls back to 01:00 EST.
	tests := []struct {
		name  string
		expr  string
		zone  string
		after string
		want  []string
	}{
		{"spring forward: 02:30 fires at 03:30 EDT, 24h after the day before", "30 2 * * *", "America/New_York", "2026-03-07T07:30:00Z",
			[]string{"2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"}},
		{"spring forward: 02:00 and 03:00 share one slot", "0,30 2-3 * * *", "America/New_York", "2026-03-08T06:59:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:00:00Z"}},
		{"spring forward: hourly skips the missing hour", "@hourly", "America/New_York", "2026-03-08T05:00:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"spring forward: every 30 minutes", "*/30 * * * *", "America/New_York", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		{"spring forward: daily keeps local midnight", "@daily", "America/New_York", "2026-03-07T05:00:00Z",
			[]string{"2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"}},
		{"spring forward: from inside the shifted window", "30 2 * * *", "America/New_York", "2026-03-08T07:10:00Z",
			[]string{"2026-03-08T07:30:00Z"}},
		{"spring forward: every 1d counts elapsed time", "@every 1d", "America/New_York", "2026-03-07T05:00:00Z",
			[]string{"2026-03-08T05:00:00Z", "2026-03-09T05:00:00Z"}},

		{"fall back: 01:30 fires once", "30 1 * * *", "America/New_York", "2026-10-31T05:30:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"fall back: from between the two 01:30s", "30 1 * * *", "America/New_York", "2026-11-01T05:45:00Z",
			[]string{"2026-11-02T06:30:00Z"}},
		{"fall back: hourly fires on both passes", "@hourly", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"fall back: every 20 minutes from the first pass", "*/20 * * * *", "America/New_York", "2026-11-01T05:40:00Z",
			[]string{"2026-11-01T06:00:00Z", "2026-11-01T06:20:00Z"}},
		{"fall back: daily", "@daily", "America/New_York", "2026-10-31T04:00:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"}},

		{"London spring forward", "30 1 * * *", "Europe/London", "2026-03-28T01:30:00Z",
			[]string{"2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"}},
		{"Lord Howe half-hour gap", "15 2 * * *", "Australia/Lord_Howe", "2026-10-02T16:00:00Z",
			[]string{"2026-10-03T15:45:00Z", "2026-10-04T15:15:00Z"}},
		{"Santiago midnight gap", "@daily", "America/Santiago", "2026-09-05T03:00:00Z",
			[]string{"2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := MustParse(tt.expr, tt.zone)
			got := nextTimes(e, utc(t, tt.after), len(tt.want))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Next of %q in %q after %s (-want +got):\n%s", tt.expr, tt.zone, tt.after, diff)
			}
		})
	}
}

// TestNextMatchesMinuteScan compares Next with a plain scan over every
// minute, in weeks without an offset change, where every wall time exists
// exactly once.
func TestNextMatchesMinuteScan(t *testing.T) {
	t.Parallel()

	exprs := []string{"* * * * *", "*/7 * * * *", "0 9 * * MON-FRI", "15,45 */3 * * *", "0 0 13 * FRI", "0 0 */10 * SUN", "59 23 31 12 *", "@hourly", "@weekly"}
	zones := []string{"UTC", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"}
	start := utc(t, "2026-06-10T00:00:00Z")
	end := start.Add(9 * 24 * time.Hour)

	for _, expr := range exprs {
		for _, zone := range zones {
			e := MustParse(expr, zone)
			matches := func(u time.Time) bool {
				l := u.In(e.loc)
				day := time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, time.UTC)
				return e.minute&(1<<l.Minute()) != 0 && e.hour&(1<<l.Hour()) != 0 &&
					e.month&(1<<uint(l.Month())) != 0 && e.dayMatches(day)
			}
			var want, got []string
			for u := start.Add(time.Minute); u.Before(end); u = u.Add(time.Minute) {
				if matches(u) {
					want = append(want, u.Format(time.RFC3339))
				}
			}
			for u := e.Next(start); u.Before(end); u = e.Next(u) {
				got = append(got, u.UTC().Format(time.RFC3339))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%q in %s (-scan +Next):\n%s", expr, zone, diff)
			}
		}
	}
}

func TestParseString(t *testing.T) {
	t.Parallel()

	tests := []struct{ expr, want string }{
		{"@Yearly", "@yearly"},
		{"@annually", "@annually"},
		{"@every 7d", "@every 7d"},
		{"@every 168h", "@every 7d"},
		{"@every 1.5d", "@every 1d12h"},
		{"@every 90m", "@every 1h30m"},
		{"@every 1500ms", "@every 1s500ms"},
		{"@every +2s", "@every 2s"},
		{"@every 1000000µs", "@every 1s"},
		{" 0  9 * *  MON-FRI ", "0 9 * * MON-FRI"},
	}
	for _, tt := range tests {
		e, err := Parse(tt.expr, "Europe/Paris")
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.expr, err)
		}
		if got := e.String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.expr, got, tt.want)
		}
		if got := e.TimeZone(); got != "Europe/Paris" {
			t.Errorf("Parse(%q).TimeZone() = %q, want Europe/Paris", tt.expr, got)
		}
	}

	e := MustParse("@every 36h", "")
	if d, ok := e.Every(); !ok || d != 36*time.Hour {
		t.Errorf("Every() = %v, %v; want 36h, true", d, ok)
	}
	if e.TimeZone() != "UTC" || e.Location() != time.UTC {
		t.Errorf("empty zone gave %q / %v, want UTC", e.TimeZone(), e.Location())
	}
	if _, ok := MustParse("@daily", "").Every(); ok {
		t.Error("Every() of @daily reported an interval")
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		expr, zone, reason string
	}{
		{"", "", "empty expression"},
		{"   ", "", "empty expression"},
		{"@fortnightly", "", "unknown descriptor @fortnightly (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)"},
		{"@reboot", "", "@reboot is not supported: a schedule needs a time"},
		{"@daily 5", "", `@daily takes no arguments, got "5"`},
		{"@every", "", "@every needs a positive duration, such as @every 1h30m or @every 7d"},
		{"@every 0", "", "@every needs a positive duration, got 0"},
		{"@every 0s", "", "@every needs a positive duration, got 0s"},
		{"@every -1h", "", "@every needs a positive duration, got -1h"},
		{"@every 500ms", "", "@every 500ms is shorter than the minimum interval 1s"},
		{"@every 999999999ns", "", "@every 999999999ns is shorter than the minimum interval 1s"},
		{"@every 1h 30m", "", `@every takes one duration without spaces, got "1h 30m"`},
		{"@every 5", "", `@every duration "5": missing unit after 5 (use ns, us, µs, ms, s, m, h or d)`},
		{"@every 2w", "", `@every duration "2w": unknown unit "w" (use ns, us, µs, ms, s, m, h or d)`},
		{"@every h", "", `@every duration "h": expected a number at "h"`},
		{"@every 1.2.3s", "", `@every duration "1.2.3s": expected a number at "1.2.3s"`},
		{"@every 300000d", "", `@every duration "300000d" is too long (the longest is 106751d23h47m16s854ms775us807ns)`},
		{"* * * *", "", "expected 5 fields (minute hour day-of-month month day-of-week), got 4"},
		{"0 * * * * *", "", "expected 5 fields (minute hour day-of-month month day-of-week), got 6"},
		{"61 * * * *", "", "minute field 61 is out of range 0-59"},
		{"* 24 * * *", "", "hour field 24 is out of range 0-23"},
		{"* * 0 * *", "", "day-of-month field 0 is out of range 1-31"},
		{"* * * 13 *", "", "month field 13 is out of range 1-12"},
		{"* * * * 8", "", "day-of-week field 8 is out of range 0-7"},
		{"x * * * *", "", `minute field value "x" is not a number 0-59`},
		{"-1 * * * *", "", `minute field item "-1" is missing a value`},
		{"* * * FOO *", "", `month field value "FOO" is neither a number 1-12 nor a name JAN-DEC`},
		{"* * * * FUNDAY", "", `day-of-week field value "FUNDAY" is neither a number 0-7 nor a name SUN-SAT`},
		{"* 5-2 * * *", "", "hour field range 5-2 runs backwards (5 is after 2)"},
		{"*/0 * * * *", "", "minute field step 0 is out of range 1-59"},
		{"*/90 * * * *", "", "minute field step 90 is out of range 1-59"},
		{"*/x * * * *", "", `minute field step "x" is not a number`},
		{"1/2/3 * * * *", "", `minute field item "1/2/3" has more than one step`},
		{"1,,2 * * * *", "", `minute field "1,,2" has an empty list item`},
		{"? * * * *", "", `minute field value "?" is not a number 0-59`},
		{"0 0 L * *", "", `day-of-month field "L": L, W and # are not supported`},
		{"0 0 * * 5#3", "", `day-of-week field "5#3": L, W and # are not supported`},
		{"0 0 30 2 *", "", "the expression never fires: no listed day of month occurs in FEB"},
		{"0 0 31 4,6,9,11 *", "", "the expression never fires: no listed day of month occurs in APR,JUN,SEP,NOV"},
		{"@daily", "Mars/Olympus_Mons", `unknown time zone "Mars/Olympus_Mons"`},
		{"@daily", "Local", "time zone Local depends on the machine; name a zone such as UTC or Europe/Berlin"},
	}
	for _, tt := range tests {
		t.Run(tt.expr+"|"+tt.zone, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.expr, tt.zone)
			if err == nil {
				t.Fatalf("Parse(%q, %q) succeeded, want error %q", tt.expr, tt.zone, tt.reason)
			}
			var exprErr *ExpressionError
			if !errors.As(err, &exprErr) {
				t.Fatalf("Parse(%q) error %T is not an *ExpressionError", tt.expr, err)
			}
			want := &ExpressionError{Expression: tt.expr, TimeZone: tt.zone, Reason: tt.reason}
			if diff := cmp.Diff(want, exprErr); diff != "" {
				t.Errorf("Parse(%q, %q) error (-want +got):\n%s", tt.expr, tt.zone, diff)
			}
			if !errors.Is(err, ErrInvalidExpression) {
				t.Errorf("errors.Is(%v, ErrInvalidExpression) = false", err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("Error() = %q does not contain the reason", err.Error())
			}
		})
	}
}

func TestMustParsePanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r == nil {
			t.Error("MustParse of a bad expression did not panic")
		}
	}()
	MustParse("@never", "")
}

// fuzzTimes are the instants FuzzParse evaluates expressions after: ordinary
// days and both sides of daylight-saving changes in several zones.
var fuzzTimes = []string{
	"2026-05-15T10:00:00Z",
	"2026-03-08T06:59:59.5Z",
	"2026-11-01T05:30:00Z",
	"2026-03-29T00:59:00Z",
	"2026-10-03T15:20:00Z",
	"2026-09-05T23:00:00Z",
	"2027-12-31T23:59:59Z",
}

var fuzzZones = []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata"}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
		"@every 1s", "@every 1h30m", "@every 7d", "@every 1.5d", "@every 2000ms", "@every -1h",
		"* * * * *", "*/15 * * * *", "0 9 * * MON-FRI", "30 2 * * *", "30 1 * * *", "0 0 29 2 *",
		"5/20 8-18/2 1,15 JAN-JUN ?", "0 0 13 * FRI", "61 * * * *", "@fortnightly", "",
	} {
		for i := range fuzzZones {
			f.Add(s, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, expr string, zoneIndex uint8) {
		zone := fuzzZones[int(zoneIndex)%len(fuzzZones)]
		e, err := Parse(expr, zone)
		if err != nil {
			var exprErr *ExpressionError
			if !errors.As(err, &exprErr) || exprErr.Reason == "" {
				t.Fatalf("Parse(%q) error %v is not an *ExpressionError with a reason", expr, err)
			}
			return
		}
		again, err := Parse(e.String(), zone)
		if err != nil {
			t.Fatalf("Parse(%q) of String() of %q: %v", e.String(), expr, err)
		}
		if again.String() != e.String() {
			t.Fatalf("String() of %q does not round-trip: %q then %q", expr, e.String(), again.String())
		}
		for _, s := range fuzzTimes {
			after, _ := time.Parse(time.RFC3339, s)
			next := e.Next(after)
			if !next.After(after) {
				t.Fatalf("%q in %s: Next(%s) = %s is not after it", expr, zone, after, next)
			}
			if n2 := again.Next(after); !n2.Equal(next) {
				t.Fatalf("%q in %s: reparsed Next(%s) = %s, want %s", expr, zone, after, n2, next)
			}
			if n2 := e.Next(next); !n2.After(next) {
				t.Fatalf("%q in %s: Next(%s) = %s is not after it", expr, zone, next, n2)
			}
		}
	})
}

// TestSlotArithmetic checks how the scheduler walks slots: the latest slot
// at or before now, and the first slot after now on the same grid.
func TestSlotArithmetic(t *testing.T) {
	t.Parallel()
	now := utc(t, "2026-11-21T19:52:46.5Z")
	tests := []struct {
		expr, first, wantLast, wantAfter string
	}{
		{"@every 10s", "2026-11-21T19:50:00.25Z", "2026-11-21T19:52:40.25Z", "2026-11-21T19:52:50.25Z"},
		{"@every 1h", "2026-11-21T19:52:46.5Z", "2026-11-21T19:52:46.5Z", "2026-11-21T20:52:46.5Z"},
		{"* * * * *", "2026-11-11T00:00:00Z", "2026-11-21T19:52:00Z", "2026-11-21T19:53:00Z"},
		{"0 0 1 1 *", "2000-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"*/5 9-17 * * MON-FRI", "2020-01-01T09:00:00Z", "2026-11-20T17:55:00Z", "2026-11-23T09:00:00Z"},
	}
	for _, tt := range tests {
		e := MustParse(tt.expr, "")
		first := utc(t, tt.first)
		if got := lastSlot(e, first, now).UTC().Format(time.RFC3339Nano); got != tt.wantLast {
			t.Errorf("lastSlot(%q, %s) = %s, want %s", tt.expr, tt.first, got, tt.wantLast)
		}
		if got := slotAfter(e, first, now).UTC().Format(time.RFC3339Nano); got != tt.wantAfter {
			t.Errorf("slotAfter(%q, %s) = %s, want %s", tt.expr, tt.first, got, tt.wantAfter)
		}
	}
}
