package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
)

// It sets environment variables, so it does not run in parallel.
func TestServeRefusesWithoutAuthentication(t *testing.T) {
	t.Setenv("BRAID_ADMIN_TOKEN", "")
	t.Setenv("BRAID_READONLY_TOKEN", "")
	url := testutil.URL(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no token", []string{"serve", "--database-url", url}, "refusing to serve without a token"},
		{"no token on every interface", []string{"serve", "--addr", "0.0.0.0:0", "--database-url", url}, "refusing to serve without a token"},
		{"insecure on a public address", []string{"serve", "--insecure-no-auth", "--addr", "0.0.0.0:8080", "--database-url", url}, "0.0.0.0:8080, which is not a loopback address"},
		{"insecure with a token", []string{"serve", "--insecure-no-auth", "--token", "x", "--database-url", url}, "exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := braid(t, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("code %d, stdout %q, stderr %q; want code 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

// An alert threshold that cannot apply (a failed rate given in percent,
// NaN, a limit of zero or less) is a usage error naming the flag and its
// range, before the database is touched.
func TestServeRefusesAlertThresholdsItCannotApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"--alert-failed-rate", "5", "--alert-failed-rate 5 is out of range; it must be a fraction above 0 and at most 1 (0.1 alerts over 10 %)"},
		{"--alert-failed-rate", "NaN", "--alert-failed-rate NaN is out of range; it must be a fraction above 0 and at most 1"},
		{"--alert-failed-rate", "0", "--alert-failed-rate 0 is out of range; it must be a fraction above 0 and at most 1"},
		{"--alert-queue-depth", "0", "--alert-queue-depth 0 is out of range; it must be at least 1"},
		{"--alert-long-running", "-1m", "--alert-long-running -1m0s is out of range; it must be positive"},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			code, out, errOut := braid(t, "serve", "--token", "t0k3n", tc.flag, tc.value, "--database-url", "postgres://braid@127.0.0.1:1/none")
			if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("code %d, stdout %q, stderr %q; want code 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

func TestServeRefusesAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	if _, err := pool.Exec(context.Background(), `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := braid(t, "serve", "--token", "t0k3n", "--addr", "127.0.0.1:0", "--database-url", url)
	if code != 1 || !strings.Contains(errOut, "run `braid migrate up` first") {
		t.Errorf("code %d, stderr %q; want code 1 and the hint to migrate", code, errOut)
	}
}

func TestServeServesWithATokenAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--token", "s3cret", "--readonly-token", "v1ew", "--database-url", url}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/`)
	var base string
	for deadline := time.Now().Add(30 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := addr.FindStringSubmatch(stdout.String()); m != nil {
			base = "http://" + m[1]
		}
	}
	if base == "" {
		t.Fatalf("serve printed no address; stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	get := func(token string) (int, map[string]any) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/config", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, body := get("s3cret"); code != http.StatusOK || body["role"] != "admin" || body["who"] != "admin" {
		t.Errorf("admin token: %d %v", code, body)
	}
	if code, body := get("v1ew"); code != http.StatusOK || body["role"] != "read-only" {
		t.Errorf("read-only token: %d %v", code, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d after its context ended; stderr %q", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after its context ended")
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
