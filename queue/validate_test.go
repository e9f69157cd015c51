package queue

import (
	"strings"
	"testing"
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

func TestHasNUL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		`{"a": "\u0000"}`:    true,
		`{"a": "x\u0000y"}`:  true,
		`{"a": "\\u0000"}`:   false, // the text \u0000, escaped
		`{"a": "\\\u0000"}`:  true,  // a backslash, then NUL
		`{"a": "u0000"}`:     false,
		`{"\u0000": 1}`:      true,
		`{"a": "\u00001"}`:   true,
		`{"a": "\\\\u0000"}`: false,
	} {
		if got := HasNUL([]byte(in)); got != want {
			t.Errorf("HasNUL(%s) = %t, want %t", in, got, want)
		}
	}
}
