package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// QueueNameMaxLength is the longest queue name River accepts.
const QueueNameMaxLength = 64

// queueNameRE is River's rule for queue names.
var queueNameRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)

// ValidateQueueName checks a queue name against River's rule: 1 to
// QueueNameMaxLength lower-case letters and digits, separated by single
// underscores or hyphens. The error names the queue and the rule.
func ValidateQueueName(name string) error {
	if len(name) > QueueNameMaxLength || !queueNameRE.MatchString(name) {
		shown := name
		if len(shown) > 80 {
			shown = shown[:80] + "…"
		}
		return fmt.Errorf("queue %q is invalid: use 1 to %d lower-case letters and digits separated by single underscores or hyphens", shown, QueueNameMaxLength)
	}
	return nil
}

// TimeMin and TimeMax bound the times PostgreSQL's timestamptz stores
// (4713 BC to 294276 AD), a little inside the range. pgx sends a time
// outside it as another time, or PostgreSQL refuses it only at the write:
// braid checks the times it is given (a delay's, a recurring job's next
// run) against these where they are given.
var (
	TimeMin = time.Date(-4712, time.January, 1, 0, 0, 0, 0, time.UTC)
	TimeMax = time.Date(294276, time.December, 30, 0, 0, 0, 0, time.UTC)
)

// InTimeRange reports whether t is from TimeMin to TimeMax, a time that
// PostgreSQL's timestamptz stores as given.
func InTimeRange(t time.Time) bool { return !t.Before(TimeMin) && !t.After(TimeMax) }

// CheckJSONB reports why PostgreSQL's jsonb would refuse the JSON text b,
// or nil when it would store it. encoding/json accepts all of these, and
// PostgreSQL would refuse them only at the insert, with a bare error:
//   - text that is not valid JSON, or not UTF-8;
//   - the escaped NUL character \u0000 (as opposed to the text "\\u0000");
//   - a UTF-16 surrogate escape that is not one of a pair, such as \udc00;
//   - a number outside PostgreSQL's numeric: one whose leading digit is
//     NumericDigitsMax or more places before the point, or that has more
//     than NumericScaleMax digits after it, such as 1e200000 or 1e-20000.
//
// The error says what is wrong; the caller names the payload.
func CheckJSONB(b []byte) error {
	if !json.Valid(b) {
		return errors.New("it is not valid JSON")
	}
	if !utf8.Valid(b) {
		return errors.New("it is not valid UTF-8")
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '"':
			inString = false
		case inString && c == '\\':
			i++
			if b[i] != 'u' {
				continue
			}
			r := hex4(b[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return errors.New(`it holds a NUL character (\u0000), which PostgreSQL's jsonb cannot store`)
			case utf16.IsSurrogate(r) && r < 0xdc00 && i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' &&
				hex4(b[i+3:i+7]) >= 0xdc00 && hex4(b[i+3:i+7]) <= 0xdfff:
				i += 6 // a high surrogate and its low one
			case utf16.IsSurrogate(r):
				return fmt.Errorf(`it holds an unpaired surrogate \u%04x, which PostgreSQL's jsonb cannot store`, r)
			}
		case inString:
		case c == '"':
			inString = true
		case c == '-' || c >= '0' && c <= '9':
			n := numberEnd(b, i)
			if err := checkNumeric(b[i:n]); err != nil {
				return err
			}
			i = n - 1
		}
	}
	return nil
}

// NumericDigitsMax and NumericScaleMax are the bounds of PostgreSQL's
// numeric, in which jsonb keeps a number: at most 131,072 digits before
// the decimal point and 16,383 after it.
const (
	NumericDigitsMax = 131072
	NumericScaleMax  = 16383
)

// numberEnd returns the end of the JSON number that begins at b[i].
func numberEnd(b []byte, i int) int {
	for i < len(b) && strings.IndexByte("+-.eE0123456789", b[i]) >= 0 {
		i++
	}
	return i
}

// checkNumeric refuses a valid JSON number outside PostgreSQL's numeric.
func checkNumeric(num []byte) error {
	s := strings.TrimPrefix(string(num), "-")
	mant, exp := s, 0
	if k := strings.IndexAny(s, "eE"); k >= 0 {
		mant = s[:k]
		e := strings.TrimPrefix(s[k+1:], "+")
		v, err := strconv.Atoi(e)
		if err != nil || v > 1<<30 || v < -(1<<30) {
			v = 1 << 30 // beyond every bound either way
			if strings.HasPrefix(e, "-") {
				v = -v
			}
		}
		exp = v
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	// The scale is the digits after the point once the exponent has moved
	// it; a zero keeps its scale too (0.0e-20000 overflows).
	scale := len(frac) - exp
	if scale > NumericScaleMax {
		return fmt.Errorf("it holds the number %.40s, with more than %d digits after the decimal point, which PostgreSQL's jsonb cannot store", num, NumericScaleMax)
	}
	// The leading digit's place before the point, counting from 1.
	if digits != "" && len(digits)-len(frac)+exp > NumericDigitsMax {
		return fmt.Errorf("it holds the number %.40s, with more than %d digits before the decimal point, which PostgreSQL's jsonb cannot store", num, NumericDigitsMax)
	}
	return nil
}

// hex4 decodes the four hexadecimal digits of a \u escape, which valid
// JSON guarantees.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		default:
			r = r<<4 | rune(c-'A'+10)
		}
	}
	return r
}
