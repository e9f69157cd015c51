package scheduler

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	// Every process reads every zone that Create accepted, whatever the
	// zone data of its host (a scratch image has none).
	_ "time/tzdata"
)

// EveryMinimum is the shortest interval that an `@every` expression accepts.
// The scheduler fires slots from a database transaction and sleeps at most
// Config.PollInterval between looks, so a shorter interval could not be kept.
const EveryMinimum = time.Second

// ErrInvalidExpression is matched by every *ExpressionError, so callers can
// test for a rejected expression or time zone with errors.Is.
var ErrInvalidExpression = errors.New("scheduler: invalid expression")

// ExpressionError reports an expression or time zone that Parse rejected. It
// carries the input and a reason that names the offending part and the limit
// it broke, such as "minute field 61 is out of range 0-59".
type ExpressionError struct {
	// Expression is the expression as given to Parse.
	Expression string

	// TimeZone is the time zone as given to Parse.
	TimeZone string

	// Reason says what is wrong.
	Reason string
}

// Error returns the reason together with the rejected expression.
func (e *ExpressionError) Error() string {
	return fmt.Sprintf("scheduler: invalid expression %q: %s", e.Expression, e.Reason)
}

// Is reports whether target is ErrInvalidExpression.
func (e *ExpressionError) Is(target error) bool { return target == ErrInvalidExpression }

// Expression is a parsed schedule expression bound to a time zone. It is
// immutable and safe for concurrent use. Create one with Parse.
type Expression struct {
	text  string
	zone  string
	loc   *time.Location
	every time.Duration

	// Cron fields as bit sets; bit n set means value n matches.
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool
	allHours                      bool
}

// descriptors maps each supported descriptor to its 5-field equivalent.
var descriptors = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse parses a schedule expression and binds it to the named IANA time
// zone (for example "Europe/Berlin"); an empty zone means UTC. The forms are:
//
//   - a descriptor: @yearly (or @annually), @monthly, @weekly, @daily (or
//     @midnight) and @hourly, each at the start of its period in the zone;
//   - @every <duration>: a fixed interval such as "@every 90s", "@every 1h30m"
//     or "@every 7d", with units ns, us (or µs), ms, s, m, h and d (24h) and
//     decimal fractions ("@every 1.5d"); the total must be at least
//     EveryMinimum;
//   - 5-field cron: minute (0-59), hour (0-23), day of month (1-31), month
//     (1-12 or JAN-DEC) and day of week (0-7 or SUN-SAT, where both 0 and 7 are
//     Sunday), each field `*`, a value, a range `a-b`, a step `*/n`, `a-b/n` or
//     `a/n` (a through the maximum), or a comma-separated list of those. `?` is
//     accepted as `*` in the two day fields. Names are case-insensitive.
//
// When both day fields are restricted (neither is `*` or `?`), a day matches if
// either field matches, as in classic cron; otherwise both must match.
// An expression that can never fire, such as "0 0 30 2 *", is rejected.
//
// Every rejection is an *ExpressionError that says what is wrong.
func Parse(expr, timeZone string) (*Expression, error) {
	fail := func(format string, args ...any) (*Expression, error) {
		return nil, &ExpressionError{Expression: expr, TimeZone: timeZone, Reason: fmt.Sprintf(format, args...)}
	}

	zone := strings.TrimSpace(timeZone)
	if zone == "" {
		zone = "UTC"
	}
	if zone == "Local" {
		return fail("time zone Local depends on the machine; name a zone such as UTC or Europe/Berlin")
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return fail("unknown time zone %q", timeZone)
	}

	fields := strings.Fields(expr)
	if len(fields) == 0 {
		return fail("empty expression")
	}

	e := &Expression{zone: zone, loc: loc}

	if strings.HasPrefix(fields[0], "@") {
		name := strings.ToLower(fields[0])
		switch {
		case name == "@every":
			if len(fields) == 1 {
				return fail("@every needs a positive duration, such as @every 1h30m or @every 7d")
			}
			if len(fields) > 2 {
				return fail("@every takes one duration without spaces, got %q", strings.Join(fields[1:], " "))
			}
			d, reason := parseEveryDuration(fields[1])
			if reason != "" {
				return fail("%s", reason)
			}
			e.every = d
			e.text = "@every " + formatEveryDuration(d)
			return e, nil
		case name == "@reboot":
			return fail("@reboot is not supported: a schedule needs a time")
		case descriptors[name] != "":
			if len(fields) > 1 {
				return fail("%s takes no arguments, got %q", name, strings.Join(fields[1:], " "))
			}
			if reason := e.parseCron(strings.Fields(descriptors[name])); reason != "" {
				return fail("%s", reason) // unreachable: descriptors are valid
			}
			e.text = name
			return e, nil
		default:
			return fail("unknown descriptor %s (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)", fields[0])
		}
	}

	if len(fields) != 5 {
		return fail("expected 5 fields (minute hour day-of-month month day-of-week), got %d", len(fields))
	}
	if reason := e.parseCron(fields); reason != "" {
		return fail("%s", reason)
	}
	e.text = strings.Join(fields, " ")
	return e, nil
}

// MustParse is like Parse but panics on error. It is meant for expressions
// fixed in source code, such as package-level variables and tests.
func MustParse(expr, timeZone string) *Expression {
	e, err := Parse(expr, timeZone)
	if err != nil {
		panic(err)
	}
	return e
}

// String returns the expression in canonical form: descriptors in lower
// case, @every with a normalized duration ("@every 1d12h"), and cron fields
// separated by single spaces. Parsing it again with the same time zone gives
// an equal expression.
func (e *Expression) String() string { return e.text }

// TimeZone returns the name of the zone the expression is evaluated in.
func (e *Expression) TimeZone() string { return e.zone }

// Location returns the zone the expression is evaluated in.
func (e *Expression) Location() *time.Location { return e.loc }

// Every returns the interval of an @every expression, and false for the
// calendar forms.
func (e *Expression) Every() (time.Duration, bool) { return e.every, e.every > 0 }

// Next returns the first slot strictly after the given time, in the
// expression's zone.
//
// For @every the slots are anchored on the time passed in: Next(t) is exactly
// t plus the interval, so a scheduler that computes each slot from the
// previous slot (not from the clock) keeps a fixed grid. The interval is
// elapsed time, so "@every 1d" drifts by an hour against the wall clock across
// a daylight-saving change; use @daily or cron for wall-clock days.
//
// Calendar forms (descriptors and cron) fire on wall-clock minutes in the
// zone. Daylight-saving changes are handled as follows:
//
//   - Spring forward: a wall time that does not exist that day fires at the
//     instant it would have had without the jump, that is one gap later on the
//     new clock. In America/New_York on 2026-03-08 a 02:30 daily slot fires at
//     03:30 EDT, 24 hours after the 02:30 EST slot of the day before. Schedules
//     whose hour field matches every hour (such as @hourly or "*/15 * * * *")
//     instead skip the missing wall times, since the hour they would fill
//     never happened.
//   - Fall back: a wall time that occurs twice fires once, at its first
//     occurrence. In America/New_York on 2026-11-01 a 01:30 daily slot fires
//     at 01:30 EDT and not again at 01:30 EST. Schedules whose hour field
//     matches every hour fire on both passes, so @hourly keeps firing every
//     hour of elapsed time.
//
// Next returns the zero time only if no slot exists within ten years of the
// argument, which Parse rules out for every expression it accepts.
func (e *Expression) Next(after time.Time) time.Time {
	after = after.Round(0)
	if e.every > 0 {
		return after.Add(e.every).In(e.loc)
	}
	u, ok := e.nextCron(after)
	if !ok {
		return time.Time{}
	}
	return time.Unix(u, 0).In(e.loc)
}

const (
	fieldMinute = iota
	fieldHour
	fieldDom
	fieldMonth
	fieldDow
)

type fieldSpec struct {
	name     string
	min, max int
	names    map[string]int
	question bool // `?` allowed
}

var fieldSpecs = [5]fieldSpec{
	fieldMinute: {name: "minute", min: 0, max: 59},
	fieldHour:   {name: "hour", min: 0, max: 23},
	fieldDom:    {name: "day-of-month", min: 1, max: 31, question: true},
	fieldMonth: {name: "month", min: 1, max: 12, names: map[string]int{
		"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6,
		"JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12,
	}},
	fieldDow: {name: "day-of-week", min: 0, max: 7, question: true, names: map[string]int{
		"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6,
	}},
}

var monthNames = [13]string{"", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}

// parseCron fills the cron fields of e from five field texts and returns a
// reason when one is invalid.
func (e *Expression) parseCron(fields []string) string {
	var bits [5]uint64
	var stars [5]bool
	for i, text := range fields {
		b, star, reason := parseField(fieldSpecs[i], text)
		if reason != "" {
			return reason
		}
		bits[i], stars[i] = b, star
	}
	// Day of week 7 is Sunday.
	if bits[fieldDow]&(1<<7) != 0 {
		bits[fieldDow] = bits[fieldDow]&^(1<<7) | 1
	}
	e.minute, e.hour, e.dom, e.month, e.dow = bits[0], bits[1], bits[2], bits[3], bits[4]
	e.domStar, e.dowStar = stars[fieldDom], stars[fieldDow]
	e.allHours = e.hour == 1<<24-1

	// With AND semantics for the day fields (one of them unrestricted) and a
	// restricted day of month, some listed month must have a listed day.
	if !e.domStar && e.dowStar {
		maxDays := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
		fires := false
		for m := 1; m <= 12 && !fires; m++ {
			if e.month&(1<<m) == 0 {
				continue
			}
			for d := 1; d <= maxDays[m]; d++ {
				if e.dom&(1<<d) != 0 {
					fires = true
					break
				}
			}
		}
		if !fires {
			var months []string
			for m := 1; m <= 12; m++ {
				if e.month&(1<<m) != 0 {
					months = append(months, monthNames[m])
				}
			}
			return fmt.Sprintf("the expression never fires: no listed day of month occurs in %s", strings.Join(months, ","))
		}
	}
	return ""
}

// parseField parses one cron field into a bit set. star reports an
// unrestricted field written as `*` or `?`.
func parseField(spec fieldSpec, text string) (bits uint64, star bool, reason string) {
	if strings.Contains(text, "#") || spec.name == "day-of-month" && strings.ContainsAny(text, "LWlw") {
		return 0, false, fmt.Sprintf("%s field %q: L, W and # are not supported", spec.name, text)
	}
	if text == "*" || (spec.question && text == "?") {
		star = true
	}
	for _, item := range strings.Split(text, ",") {
		if item == "" {
			return 0, false, fmt.Sprintf("%s field %q has an empty list item", spec.name, text)
		}
		rangeText, stepText, hasStep := strings.Cut(item, "/")
		if strings.Contains(stepText, "/") {
			return 0, false, fmt.Sprintf("%s field item %q has more than one step", spec.name, item)
		}
		var lo, hi int
		switch {
		case rangeText == "*" || (spec.question && rangeText == "?"):
			lo, hi = spec.min, spec.max
			if spec.name == "day-of-week" {
				hi = 6
			}
		default:
			loText, hiText, isRange := strings.Cut(rangeText, "-")
			var reason string
			if lo, reason = parseValue(spec, loText, item); reason != "" {
				return 0, false, reason
			}
			hi = lo
			if isRange {
				if hi, reason = parseValue(spec, hiText, item); reason != "" {
					return 0, false, reason
				}
				if lo > hi {
					return 0, false, fmt.Sprintf("%s field range %s runs backwards (%d is after %d)", spec.name, rangeText, lo, hi)
				}
			} else if hasStep {
				hi = spec.max
				if spec.name == "day-of-week" {
					hi = 6
				}
			}
		}
		step := 1
		if hasStep {
			maxStep := spec.max - spec.min
			if spec.name == "day-of-week" {
				maxStep = 6
			}
			n, err := strconv.Atoi(stepText)
			if err != nil {
				return 0, false, fmt.Sprintf("%s field step %q is not a number", spec.name, stepText)
			}
			if n < 1 || n > maxStep {
				return 0, false, fmt.Sprintf("%s field step %d is out of range 1-%d", spec.name, n, maxStep)
			}
			step = n
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, star, ""
}

// parseValue parses a number or name of a cron field.
func parseValue(spec fieldSpec, text, item string) (int, string) {
	if text == "" {
		return 0, fmt.Sprintf("%s field item %q is missing a value", spec.name, item)
	}
	if spec.names != nil {
		if v, ok := spec.names[strings.ToUpper(text)]; ok {
			return v, ""
		}
	}
	v, err := strconv.Atoi(text)
	if err != nil || strings.HasPrefix(text, "+") {
		if spec.names != nil {
			first, last := "JAN", "DEC"
			if spec.name == "day-of-week" {
				first, last = "SUN", "SAT"
			}
			return 0, fmt.Sprintf("%s field value %q is neither a number %d-%d nor a name %s-%s", spec.name, text, spec.min, spec.max, first, last)
		}
		return 0, fmt.Sprintf("%s field value %q is not a number %d-%d", spec.name, text, spec.min, spec.max)
	}
	if v < spec.min || v > spec.max {
		return 0, fmt.Sprintf("%s field %d is out of range %d-%d", spec.name, v, spec.min, spec.max)
	}
	return v, ""
}

// everyUnits are the units of @every durations in nanoseconds.
var everyUnits = map[string]int64{
	"ns": int64(time.Nanosecond),
	"us": int64(time.Microsecond),
	"µs": int64(time.Microsecond), // U+00B5 micro sign
	"μs": int64(time.Microsecond), // U+03BC Greek mu
	"ms": int64(time.Millisecond),
	"s":  int64(time.Second),
	"m":  int64(time.Minute),
	"h":  int64(time.Hour),
	"d":  int64(24 * time.Hour),
}

// parseEveryDuration parses the duration of an @every expression: a
// sequence of decimal numbers each followed by a unit. It returns a reason
// when the text is invalid, not positive or below EveryMinimum.
func parseEveryDuration(text string) (time.Duration, string) {
	s := text
	negative := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		negative = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, fmt.Sprintf("@every needs a positive duration, got %s", text)
	}
	if s == "" {
		return 0, fmt.Sprintf("@every duration %q has no value", text)
	}
	total := new(big.Rat)
	for s != "" {
		i := 0
		digits := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			if s[i] != '.' {
				digits++
			}
			i++
		}
		number := s[:i]
		if digits == 0 || strings.Count(number, ".") > 1 {
			return 0, fmt.Sprintf("@every duration %q: expected a number at %q", text, s)
		}
		s = s[i:]
		j := 0
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		unit := s[:j]
		s = s[j:]
		if unit == "" {
			return 0, fmt.Sprintf("@every duration %q: missing unit after %s (use ns, us, µs, ms, s, m, h or d)", text, number)
		}
		scale, ok := everyUnits[unit]
		if !ok {
			return 0, fmt.Sprintf("@every duration %q: unknown unit %q (use ns, us, µs, ms, s, m, h or d)", text, unit)
		}
		v, ok := new(big.Rat).SetString(number)
		if !ok {
			return 0, fmt.Sprintf("@every duration %q: cannot read number %q", text, number)
		}
		total.Add(total, v.Mul(v, new(big.Rat).SetInt64(scale)))
		if total.Cmp(new(big.Rat).SetInt64(math.MaxInt64)) > 0 {
			return 0, fmt.Sprintf("@every duration %q is too long (the longest is %s)", text, formatEveryDuration(time.Duration(math.MaxInt64)))
		}
	}
	// Whole nanoseconds; a fraction of a nanosecond is dropped.
	ns := new(big.Int).Quo(total.Num(), total.Denom()).Int64()
	d := time.Duration(ns)
	if negative && d > 0 || d == 0 {
		return 0, fmt.Sprintf("@every needs a positive duration, got %s", text)
	}
	if d < EveryMinimum {
		return 0, fmt.Sprintf("@every %s is shorter than the minimum interval %s", text, EveryMinimum)
	}
	return d, ""
}

// formatEveryDuration writes a positive duration with the units d, h, m, s,
// ms, us and ns, largest first, omitting zero parts: 36h is "1d12h".
func formatEveryDuration(d time.Duration) string {
	var b strings.Builder
	n := int64(d)
	for _, u := range []struct {
		name  string
		scale int64
	}{
		{"d", int64(24 * time.Hour)},
		{"h", int64(time.Hour)},
		{"m", int64(time.Minute)},
		{"s", int64(time.Second)},
		{"ms", int64(time.Millisecond)},
		{"us", int64(time.Microsecond)},
		{"ns", 1},
	} {
		if q := n / u.scale; q > 0 {
			b.WriteString(strconv.FormatInt(q, 10))
			b.WriteString(u.name)
			n -= q * u.scale
		}
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}

// nextCronSearchYears bounds the search for the next slot. Every accepted
// expression fires at least once in any nine years (February 29 can be eight
// years apart, as around 2100).
const nextCronSearchYears = 10

// nextCron returns the Unix second of the first calendar slot strictly after
// the given time.
func (e *Expression) nextCron(after time.Time) (int64, bool) {
	a := after.Unix() // a slot u is after `after` exactly when u > a
	y, m, d := after.In(e.loc).Date()
	// Start a day early: a slot of the previous day shifted by a
	// spring-forward gap may still be ahead.
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).AddDate(0, 0, -1)
	limit := day.AddDate(nextCronSearchYears, 0, 0)

	for day.Before(limit) {
		if e.month&(1<<uint(day.Month())) == 0 {
			day = time.Date(day.Year(), day.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !e.dayMatches(day) {
			day = day.AddDate(0, 0, 1)
			continue
		}
		u, found, exact := e.nextOnDay(day, a)
		if found {
			if !exact {
				// A transition day: the following day may hold an earlier
				// slot only if a shifted slot crossed midnight.
				next := day.AddDate(0, 0, 1)
				if e.month&(1<<uint(next.Month())) != 0 && e.dayMatches(next) {
					if u2, ok, _ := e.nextOnDay(next, a); ok && u2 < u {
						u = u2
					}
				}
			}
			return u, true
		}
		day = day.AddDate(0, 0, 1)
	}
	return 0, false
}

// dayMatches reports whether a civil date (a UTC midnight) matches the day
// fields.
func (e *Expression) dayMatches(day time.Time) bool {
	domOK := e.dom&(1<<uint(day.Day())) != 0
	dowOK := e.dow&(1<<uint(day.Weekday())) != 0
	if e.domStar || e.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// nextOnDay returns the earliest slot of a civil date strictly after Unix
// second a. exact is false on days near an offset change, where slots were
// computed one by one.
func (e *Expression) nextOnDay(day time.Time, a int64) (u int64, found, exact bool) {
	w0 := day.Unix() // the day's midnight as a wall clock read as UTC
	const margin = 16 * 3600
	periods := zonePeriods(e.loc, w0-margin, w0+86400+margin)

	if len(periods) == 1 {
		off := periods[0].offset
		if w0+86400-off <= a {
			return 0, false, true
		}
		for h := 0; h < 24; h++ {
			if e.hour&(1<<h) == 0 {
				continue
			}
			base := w0 + int64(h)*3600 - off
			if base+3599 <= a {
				continue
			}
			for mi := 0; mi < 60; mi++ {
				if e.minute&(1<<mi) != 0 && base+int64(mi)*60 > a {
					return base + int64(mi)*60, true, true
				}
			}
		}
		return 0, false, true
	}

	for h := 0; h < 24; h++ {
		if e.hour&(1<<h) == 0 {
			continue
		}
		for mi := 0; mi < 60; mi++ {
			if e.minute&(1<<mi) == 0 {
				continue
			}
			for _, c := range e.wallInstants(w0+int64(h)*3600+int64(mi)*60, periods) {
				if c > a && (!found || c < u) {
					u, found = c, true
				}
			}
		}
	}
	return u, found, false
}

// wallInstants returns the instants at which a wall time (as Unix seconds
// read as UTC) fires, following the daylight-saving rules documented on Next.
func (e *Expression) wallInstants(w int64, periods []zonePeriod) []int64 {
	var valid []int64
	for _, p := range periods {
		if u := w - p.offset; u >= p.start && u < p.end {
			valid = append(valid, u)
		}
	}
	slices.Sort(valid)
	switch len(valid) {
	case 0:
		if e.allHours {
			return nil
		}
		for i := 0; i+1 < len(periods); i++ {
			t, o1, o2 := periods[i].end, periods[i].offset, periods[i+1].offset
			if o2 > o1 && w >= t+o1 && w < t+o2 {
				return []int64{w - o1}
			}
		}
		return nil
	case 1:
		return valid
	default:
		if e.allHours {
			return valid
		}
		return valid[:1]
	}
}

// zonePeriod is a span of Unix seconds [start, end) with one UTC offset.
type zonePeriod struct {
	start, end int64
	offset     int64
}

// zonePeriods returns the spans of constant UTC offset that cover the Unix
// seconds [from, to], merging neighbours with the same offset.
func zonePeriods(loc *time.Location, from, to int64) []zonePeriod {
	var periods []zonePeriod
	t := from
	for range 16 {
		tt := time.Unix(t, 0).In(loc)
		_, off := tt.Zone()
		start, end := tt.ZoneBounds()
		p := zonePeriod{start: math.MinInt64, end: math.MaxInt64, offset: int64(off)}
		if !start.IsZero() {
			p.start = start.Unix()
		}
		if !end.IsZero() {
			p.end = end.Unix()
		}
		if n := len(periods); n > 0 && periods[n-1].offset == p.offset {
			periods[n-1].end = p.end
		} else {
			periods = append(periods, p)
		}
		if p.end > to || p.end <= t {
			break
		}
		t = p.end
	}
	return periods
}
