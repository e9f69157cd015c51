package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// fleet is the set of worker processes. It keeps Config.Workers of them
// alive: a worker killed by a fault is replaced at once, and one that
// exits by itself is counted and replaced, as a supervisor would.
type fleet struct {
	command []string
	env     string
	out     io.Writer
	say     func(format string, args ...any)

	mu     sync.Mutex
	procs  map[int]*proc
	exits  int // workers that exited by themselves
	closed bool
	wg     sync.WaitGroup
}

// proc is one worker process.
type proc struct {
	cmd      *exec.Cmd
	ready    chan struct{}
	done     chan struct{}
	expected bool // the coordinator ended it: not counted as an exit
	frozen   bool
}

func newFleet(command []string, s workerSettings, out io.Writer, say func(string, ...any)) *fleet {
	b, _ := json.Marshal(s)
	return &fleet{command: command, env: EnvWorker + "=" + string(b), out: &lockedWriter{w: out}, say: say, procs: map[int]*proc{}}
}

// start starts n workers and waits until each has started its engine.
func (f *fleet) start(ctx context.Context, n int) error {
	var started []*proc
	for range n {
		p, err := f.spawn()
		if err != nil {
			return err
		}
		started = append(started, p)
	}
	for _, p := range started {
		if err := p.waitReady(ctx, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// spawn starts one worker and a goroutine that supervises it.
func (f *fleet) spawn() (*proc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("chaos: the fleet is closed")
	}
	cmd := exec.Command(f.command[0], f.command[1:]...)
	cmd.Env = append(os.Environ(), f.env)
	p := &proc{cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	cmd.Stdout = &readyWriter{ready: p.ready}
	cmd.Stderr = f.out
	// Its own process group, so that a terminal's Ctrl-C reaches the
	// coordinator only, which stops the workers itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: starting a worker: %w", err)
	}
	f.procs[cmd.Process.Pid] = p
	f.wg.Add(1)
	go f.supervise(p)
	return p, nil
}

func (f *fleet) supervise(p *proc) {
	defer f.wg.Done()
	err := p.cmd.Wait()
	close(p.done)
	f.mu.Lock()
	delete(f.procs, p.cmd.Process.Pid)
	unexpected := !p.expected && !f.closed
	if unexpected {
		f.exits++
	}
	f.mu.Unlock()
	if unexpected {
		f.say("worker %d exited by itself (%v); starting another", p.cmd.Process.Pid, err)
		time.Sleep(300 * time.Millisecond)
		_, _ = f.spawn()
	}
}

func (p *proc) waitReady(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("chaos: worker %d exited before it was ready", p.cmd.Process.Pid)
	case <-t.C:
		return fmt.Errorf("chaos: worker %d not ready after %s", p.cmd.Process.Pid, d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pids returns the live workers' process IDs.
func (f *fleet) pids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for pid, p := range f.procs {
		if !p.expected {
			out = append(out, pid)
		}
	}
	return out
}

// has reports whether pid is a live worker.
func (f *fleet) has(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.procs[pid]
	return ok && !p.expected
}

// random returns a live, unfrozen worker's process ID, or 0.
func (f *fleet) random() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var live []int
	for pid, p := range f.procs {
		if !p.expected && !p.frozen {
			live = append(live, pid)
		}
	}
	if len(live) == 0 {
		return 0
	}
	return live[rand.IntN(len(live))]
}

// kill SIGKILLs a worker, waits for it to die and starts a replacement.
// It reports whether pid was a live worker.
func (f *fleet) kill(pid int) bool {
	f.mu.Lock()
	p, ok := f.procs[pid]
	if !ok || p.expected {
		f.mu.Unlock()
		return false
	}
	p.expected = true
	f.mu.Unlock()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-p.done
	_, _ = f.spawn()
	return true
}

// signal sends SIGSTOP or SIGCONT to a worker.
func (f *fleet) signal(pid int, sig syscall.Signal) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.procs[pid]
	if !ok || p.expected {
		return false
	}
	p.frozen = sig == syscall.SIGSTOP
	return syscall.Kill(pid, sig) == nil
}

// takeExits returns the count of workers that exited by themselves since
// the last call.
func (f *fleet) takeExits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.exits
	f.exits = 0
	return n
}

// close stops every worker: SIGTERM, then SIGKILL after a grace period.
func (f *fleet) close() {
	f.mu.Lock()
	f.closed = true
	procs := make([]*proc, 0, len(f.procs))
	for _, p := range f.procs {
		p.expected = true
		procs = append(procs, p)
	}
	f.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	}
	f.wg.Wait()
}

// readyWriter closes ready when the worker prints its ready line.
type readyWriter struct {
	ready chan struct{}
	buf   bytes.Buffer
	once  sync.Once
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte("ready\n")) {
		w.once.Do(func() { close(w.ready) })
		w.buf.Reset()
	}
	return len(p), nil
}

// lockedWriter serializes writes from several workers' output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
