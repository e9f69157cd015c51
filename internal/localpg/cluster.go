package localpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StartTimeoutDefault is how long Start waits for the server to accept
// connections when Config.StartTimeout is zero.
const StartTimeoutDefault = 60 * time.Second

// MaxConnectionsDefault is the server's max_connections when
// Config.MaxConnections is zero. It is higher than PostgreSQL's own default
// because parallel tests each open pools.
const MaxConnectionsDefault = 300

// ErrNotFound is returned when no PostgreSQL server binaries can be found.
// The error returned by Find wraps it and names what to install.
var ErrNotFound = errors.New("localpg: PostgreSQL server binaries not found")

// InstallHint says what to install when the server binaries are missing.
const InstallHint = "install the PostgreSQL server (Debian/Ubuntu: apt-get install -y postgresql; " +
	"macOS: brew install postgresql@15), or put initdb, pg_ctl and postgres on PATH"

// Config describes a private cluster.
type Config struct {
	// Dir is the directory that holds the cluster: its data directory and
	// its unix socket. It is created if missing. Required. Keep it short:
	// unix socket paths are limited to about 100 bytes.
	Dir string

	// Port, when non-zero, makes the server listen on 127.0.0.1:Port in
	// addition to the unix socket. Zero (the default) listens on the unix
	// socket only, which never collides with another cluster.
	Port int

	// DisableFsync turns fsync, synchronous_commit and full_page_writes off.
	// It makes the server fast and unsafe on power loss. Default false: only
	// tests should set it.
	DisableFsync bool

	// MaxConnections sets max_connections. Default MaxConnectionsDefault.
	MaxConnections int

	// StartTimeout bounds how long Start waits for the server to accept
	// connections. Default StartTimeoutDefault.
	StartTimeout time.Duration

	// BinDir is the directory holding initdb and postgres. Default: found
	// by Find.
	BinDir string

	// Settings are extra server settings passed as -c name=value.
	Settings map[string]string
}

// Cluster is a private PostgreSQL cluster. Create it with New, then Start
// and Stop it.
type Cluster struct {
	cfg    Config
	binDir string
	cred   *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs logBuffer
}

// logBuffer keeps the first MiB of what the server prints.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 1<<20 {
		l.buf.Write(p)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Reset()
}

// Find returns the directory of the newest PostgreSQL server binaries on
// PATH or under /usr/lib/postgresql/*/bin. The error wraps ErrNotFound and
// says what to install.
func Find() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrNotFound, InstallHint)
}

func versionOf(initdbPath string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(initdbPath))), 64)
	return v
}

// New validates cfg and finds the server binaries. It does not start
// anything.
func New(cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("localpg: Config.Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("localpg: resolving Dir: %w", err)
	}
	cfg.Dir = dir
	if n := len(filepath.Join(dir, ".s.PGSQL.65535.lock")); n > 100 {
		return nil, fmt.Errorf("localpg: Dir %q is too long for a unix socket path (%d bytes, limit about 100)", dir, n)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("localpg: Port %d is out of range 0-65535", cfg.Port)
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = MaxConnectionsDefault
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = StartTimeoutDefault
	}
	binDir := cfg.BinDir
	if binDir == "" {
		if binDir, err = Find(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{cfg: cfg, binDir: binDir}
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			return nil, err
		}
		c.cred = cred
	}
	return c, nil
}

// unprivileged returns the credential of the postgres account, which the
// server runs as when the caller is root.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("localpg: running as root needs a \"postgres\" or \"nobody\" account to run the server as")
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.cfg.Dir, "data") }

// SocketDir is the directory holding the server's unix socket.
func (c *Cluster) SocketDir() string { return c.cfg.Dir }

func (c *Cluster) port() int {
	if c.cfg.Port != 0 {
		return c.cfg.Port
	}
	return 5432
}

// URL returns a connection string for database dbname as the superuser
// "postgres".
func (c *Cluster) URL(dbname string) string {
	if c.cfg.Port != 0 {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.cfg.Port, dbname)
	}
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", dbname, c.cfg.Dir, c.port())
}

// Start initializes the data directory if needed and starts the server. It
// returns once the server accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return errors.New("localpg: cluster already started")
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("localpg: creating %s: %w", c.cfg.Dir, err)
	}
	if err := c.chown(c.cfg.Dir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION")); err != nil {
		if err := c.initdb(ctx); err != nil {
			return err
		}
	}
	// A postmaster.pid left by a killed server would block startup; the
	// server itself checks whether that pid is alive, so only remove a
	// stale one whose process is gone.
	c.removeStalePID()

	args := []string{
		"-D", c.DataDir(),
		"-k", c.cfg.Dir,
		"-p", strconv.Itoa(c.port()),
		"-c", "max_connections=" + strconv.Itoa(c.cfg.MaxConnections),
		"-c", "unix_socket_permissions=0777",
		"-c", "logging_collector=off",
	}
	if c.cfg.Port != 0 {
		args = append(args, "-c", "listen_addresses=127.0.0.1")
	} else {
		args = append(args, "-c", "listen_addresses=")
	}
	if c.cfg.DisableFsync {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	keys := make([]string, 0, len(c.cfg.Settings))
	for k := range c.cfg.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+c.cfg.Settings[k])
	}

	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), args...)
	c.logs.Reset()
	cmd.Stdout = &c.logs
	cmd.Stderr = &c.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.cred,
		// Immediate shutdown if this process dies, so no server outlives it.
		Pdeathsig: syscall.SIGQUIT,
		Setpgid:   true,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("localpg: starting postgres: %w", err)
	}
	done := make(chan struct{})
	c.cmd, c.done = cmd, done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	c.mu.Unlock()
	err := c.waitReady(ctx, done)
	c.mu.Lock()
	if err != nil {
		c.stopLocked()
		return err
	}
	return nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	if err := os.MkdirAll(c.DataDir(), 0o700); err != nil {
		return fmt.Errorf("localpg: creating data directory: %w", err)
	}
	if err := c.chown(c.DataDir()); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "initdb"),
		"-D", c.DataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("localpg: initdb failed: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("localpg: giving %s to the server account: %w", path, err)
	}
	return nil
}

func (c *Cluster) removeStalePID() {
	pidFile := filepath.Join(c.DataDir(), "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return
	}
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		_ = os.Remove(pidFile)
	}
}

func (c *Cluster) waitReady(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	sock := filepath.Join(c.cfg.Dir, fmt.Sprintf(".s.PGSQL.%d", c.port()))
	for {
		select {
		case <-done:
			return fmt.Errorf("localpg: postgres exited during startup: %s", c.Logs())
		case <-ctx.Done():
			return fmt.Errorf("localpg: postgres did not accept connections within %s: %s", c.cfg.StartTimeout, c.Logs())
		case <-time.After(20 * time.Millisecond):
		}
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			continue
		}
		ready := startupAccepted(conn)
		_ = conn.Close()
		if ready {
			return nil
		}
	}
}

// startupAccepted sends a startup message and reports whether the server
// answered with something other than "the database system is starting up".
func startupAccepted(conn net.Conn) bool {
	params := "user\x00postgres\x00database\x00postgres\x00\x00"
	msg := make([]byte, 8+len(params))
	putUint32(msg[0:], uint32(len(msg)))
	putUint32(msg[4:], 196608) // protocol 3.0
	copy(msg[8:], params)
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write(msg); err != nil {
		return false
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil || n == 0 {
		return false
	}
	// 'R' is an authentication request: the server is up. 'E' is an
	// error, which during startup is "the database system is starting up".
	return buf[0] == 'R'
}

func putUint32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// Logs returns what the server printed, for diagnosing a failed start.
func (c *Cluster) Logs() string {
	return strings.TrimSpace(c.logs.String())
}

// Stop shuts the server down (fast shutdown: open sessions are ended) and
// waits for every server process to exit. Stopping a cluster that is not
// running does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked()
}

func (c *Cluster) stopLocked() error {
	if c.cmd == nil {
		return nil
	}
	cmd, done := c.cmd, c.done
	c.cmd, c.done = nil, nil
	_ = cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		// Immediate shutdown, then kill the whole process group.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	// Backends exit with the postmaster; make sure none is left in the
	// process group.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

// Running reports whether the server process is alive.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Remove stops the cluster and deletes its directory.
func (c *Cluster) Remove() error {
	if err := c.Stop(); err != nil {
		return err
	}
	return os.RemoveAll(c.cfg.Dir)
}
