package queue

import (
	"bytes"
	"fmt"
	"regexp"
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

// HasNUL reports whether the JSON text b holds an escaped NUL character,
// \u0000 (as opposed to the text "\\u0000"), which PostgreSQL's jsonb
// cannot store.
func HasNUL(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		j += i
		k := j
		for k > 0 && b[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return true
		}
		i = j + 1
	}
}
