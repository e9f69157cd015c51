package localpg

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "localpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func TestClusterStartQueryStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := New(Config{Dir: shortDir(t), DisableFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var fsync string
	if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil {
		t.Fatal(err)
	}
	if fsync != "off" {
		t.Errorf("fsync = %q with DisableFsync, want off", fsync)
	}
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	postmaster := c.cmd.Process.Pid
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c.Running() {
		t.Fatal("Running() after Stop")
	}
	for _, p := range []int{postmaster, pid} {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (kill 0: %v)", p, err)
		}
	}
	// Stop twice is harmless; the cluster restarts on its existing data.
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
}

func TestFsyncStaysOnByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := New(Config{Dir: shortDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var fsync string
	if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" {
		t.Errorf("fsync = %q by default, want on", fsync)
	}
}

func TestConcurrentClusters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var clusters []*Cluster
	for range 2 {
		c, err := New(Config{Dir: shortDir(t), DisableFsync: true})
		if err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c)
	}
	errs := make(chan error, len(clusters))
	for _, c := range clusters {
		go func() { errs <- c.Start(ctx) }()
	}
	for range clusters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clusters {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close(ctx)
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTCPPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	port := 20000 + os.Getpid()%20000
	c, err := New(Config{Dir: shortDir(t), DisableFsync: true, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		if strings.Contains(err.Error(), "in use") {
			t.Fatalf("port %d was taken: %v", port, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if !strings.Contains(c.URL("postgres"), "127.0.0.1:"+strconv.Itoa(port)) {
		t.Fatalf("URL %q does not name the TCP port", c.URL("postgres"))
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Dir is required") {
		t.Errorf("empty Dir: err = %v", err)
	}
	long := "/" + strings.Repeat("d", 120)
	if _, err := New(Config{Dir: long}); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("long Dir: err = %v", err)
	}
	if _, err := New(Config{Dir: "x", Port: 70000}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("bad port: err = %v", err)
	}
}

func TestFindNamesWhatToInstall(t *testing.T) {
	// Not parallel: it changes PATH. With no initdb anywhere, the error
	// must name what to install; with the machine's binaries, Find works.
	if _, err := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); err != nil {
		t.Fatal(err)
	}
	dir, err := Find()
	if err != nil {
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "apt-get install") {
			t.Fatalf("Find error %q does not name what to install", err)
		}
		return
	}
	if _, err := exec.LookPath(filepath.Join(dir, "initdb")); err != nil {
		t.Fatalf("Find returned %s without an initdb: %v", dir, err)
	}
	// A bogus BinDir fails at Start with the missing binary named.
	c, err := New(Config{Dir: shortDir(t), BinDir: shortDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err == nil || !strings.Contains(err.Error(), "initdb") {
		t.Fatalf("Start with empty BinDir: err = %v", err)
	}
}
