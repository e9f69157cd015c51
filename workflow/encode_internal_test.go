package workflow

import (
	"encoding/json"
	"testing"
)

func TestHasNUL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{"plain", false},
		{"a\x00b", true},
		{`text \u0000 written out`, false},
		{"\\\x00", true},
		{map[string]string{"k\x00": "v"}, true},
		{[]string{`\\u0000`, "x"}, false},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := hasNUL(b); got != tc.want {
			t.Errorf("hasNUL(%s) = %v, want %v", b, got, tc.want)
		}
	}
}

func FuzzHasNUL(f *testing.F) {
	f.Add("a\x00b")
	f.Add(`\u0000`)
	f.Add("\\\x00\\")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(s)
		if err != nil {
			return
		}
		want := false
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				want = true
			}
		}
		if got := hasNUL(b); got != want {
			t.Fatalf("hasNUL(%s) = %v, want %v", b, got, want)
		}
	})
}
