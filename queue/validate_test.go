package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/braidflow/braid/internal/testdb"
)

func TestValidateQueueName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"default", "feeds", "a", "media_2", "high-priority"} {
		if err := ValidateQueueName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Feeds", "a__b", "-a", "a-", "a b", "'; DROP TABLE river_job; --", strings.Repeat("a", QueueNameMaxLength+1)} {
		err := ValidateQueueName(bad)
		if err == nil || !strings.Contains(err.Error(), "is invalid: use 1 to 64") {
			t.Errorf("%q: %v, want an error naming the rule", bad, err)
		}
	}
}

// jsonbCases are JSON texts at each edge of what PostgreSQL's jsonb stores.
var jsonbCases = []string{
	`{"a": "\u0000"}`,
	`{"a": "x\u0000y"}`,
	`{"a": "\\u0000"}`,  // the text \u0000, escaped
	`{"a": "\\\u0000"}`, // a backslash, then NUL
	`{"\u0000": 1}`,
	`{"a": "\u00001"}`,
	`{"a": "\\\\u0000"}`,
	`{"a": "\udc00"}`,
	`{"a": "\ud800"}`,
	`{"a": "\ud800x"}`,
	`{"a": "\ud800\u0041"}`,
	`{"a": "\ud83d\ude00"}`,
	`{"a": "\uD83D\uDE00"}`,
	`{"a": "\\ud800"}`,
	`["\udfff", 1]`,
	"{\"a\": \"x\xffy\"}",
	"\"\xc3\"",
	`"\u00e9 \u4e16"`,
	`{"a": "1e999999"}`, // a string, not a number
	`1e131071`, `1E+131071`, `1e131072`, `123.456e131069`, `123.456e131070`,
	`1e-16383`, `1e-16384`, `0e9999999`, `0e-16383`, `0e-16384`, `-0.0e-16383`, `-0`,
	`1e-2000000000000`, `1e2000000000000`, `0.5e-16382`, `-12.5e3`, `[1.5, -2e-3, 0]`,
	"1." + strings.Repeat("0", 16383), "1." + strings.Repeat("0", 16384),
	"0." + strings.Repeat("0", 16382) + "1e0",
	strings.Repeat("9", 131072), strings.Repeat("9", 131073),
	"0." + strings.Repeat("0", 10) + strings.Repeat("9", 131072),
	`{"a": [1, {"b": "\"\\"}], "c": null, "d": true}`,
	`{"a": 1`, `nul`, ``,
}

// TestCheckJSONBAgreesWithPostgreSQL checks each case against PostgreSQL's
// own jsonb input: CheckJSONB refuses exactly what PostgreSQL refuses.
func TestCheckJSONBAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	ctx := context.Background()
	for _, in := range jsonbCases {
		_, pgErr := pool.Exec(ctx, `SELECT convert_from($1::bytea, 'UTF8')::jsonb`, []byte(in))
		err := CheckJSONB([]byte(in))
		if (err == nil) != (pgErr == nil) {
			t.Errorf("CheckJSONB(%.60q) = %v, but PostgreSQL says %v", in, err, pgErr)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "it ") {
			t.Errorf("CheckJSONB(%.60q) = %q, want a reason the caller can put after the payload's name", in, err)
		}
	}
}

// FuzzCheckJSONB feeds CheckJSONB arbitrary bytes: it never panics, and it
// accepts only valid JSON in UTF-8 that encoding/json can decode.
func FuzzCheckJSONB(f *testing.F) {
	for _, in := range jsonbCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckJSONB(b) != nil {
			return
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber() // a number may be larger than a float64
		if !utf8.Valid(b) || d.Decode(&v) != nil {
			t.Fatalf("CheckJSONB accepted %.200q", b)
		}
	})
}

// FuzzCheckJSONBOfMarshalledText marshals arbitrary Go text, as a payload
// of braid's is marshalled: encoding/json writes valid UTF-8 and pairs every
// surrogate, so CheckJSONB refuses the JSON exactly when the text holds a
// NUL, wherever it stands and however many backslashes precede it.
func FuzzCheckJSONBOfMarshalledText(f *testing.F) {
	for _, s := range []string{"plain", "a\x00b", `text \u0000 written out`, "\\\x00", `\\u0000`, "\xff", "😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, v := range []any{s, map[string]string{s: "v"}, []string{"x", s}} {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.IndexByte(s, 0) >= 0
			if err := CheckJSONB(b); (err != nil) != want {
				t.Fatalf("CheckJSONB(%s) = %v, want an error %t", b, err, want)
			}
		}
	})
}

// TestTimeRangeIsStoredAsGiven: TimeMin and TimeMax go through
// PostgreSQL's timestamptz and come back as they were, and the times just
// outside them are out of range.
func TestTimeRangeIsStoredAsGiven(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	for _, at := range []time.Time{TimeMin, TimeMax} {
		if !InTimeRange(at) {
			t.Errorf("InTimeRange(%s) is false", at)
		}
		var back time.Time
		if err := pool.QueryRow(context.Background(), `SELECT $1::timestamptz`, at).Scan(&back); err != nil {
			t.Fatalf("storing %s: %v", at, err)
		}
		if !back.Equal(at) {
			t.Errorf("%s came back from PostgreSQL as %s", at, back)
		}
	}
	for _, at := range []time.Time{TimeMin.Add(-time.Microsecond), TimeMax.Add(time.Microsecond)} {
		if InTimeRange(at) {
			t.Errorf("InTimeRange(%s) is true", at)
		}
	}
}
