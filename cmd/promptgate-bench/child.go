package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/promptgate/promptgate/proxy"
)

// envChild holds the JSON childSpec of a child process of the run.
const envChild = "PROMPTGATE_BENCH_CHILD"

// Roles of the child processes.
const (
	roleUpstream   = "upstream"
	roleBaseline   = "baseline"
	rolePromptgate = "promptgate"
)

// childSpec tells a child process what to serve.
type childSpec struct {
	Role string `json:"role"`
	// Dir is the child's own folder for its files (promptgate's DB, config and log).
	Dir string `json:"dir"`
	// Upstream is the fake upstream's root URL (baseline, promptgate).
	Upstream string `json:"upstream,omitempty"`
	// Plugins is the number of context-source plugins (promptgate).
	Plugins int `json:"plugins,omitempty"`
	// RespBytes, Chunks and ChunkDelay shape the fake upstream's answers.
	RespBytes  int           `json:"respBytes,omitempty"`
	Chunks     int           `json:"chunks,omitempty"`
	ChunkDelay time.Duration `json:"chunkDelay,omitempty"`
	// Lifetime bounds the child's life: it exits by itself after it, or as soon as its stdin
	// closes.
	Lifetime time.Duration `json:"lifetime"`
	// Timeline stamps the requests that carry HeaderSeq (see timeline.go); Profile also records
	// blocking and mutex contention for the block and mutex profiles.
	Timeline bool `json:"timeline,omitempty"`
	Profile  bool `json:"profile,omitempty"`
}

// readyLine is the one line a child prints on stdout once it serves.
type readyLine struct {
	Addr    string `json:"addr"`
	Control string `json:"control"`
	Pid     int    `json:"pid"`
}

// runChildRole runs this process as a child of the run when its environment says it is one: a
// server (envChild) or a context-source plugin started by promptgate's plugin host. handled is
// false otherwise.
func runChildRole() (handled bool, err error) {
	if isPluginProcess() {
		servePlugin()
		return true, nil
	}
	raw := os.Getenv(envChild)
	if raw == "" {
		return false, nil
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return true, fmt.Errorf("%s: %w", envChild, err)
	}
	return true, serveChild(spec, os.Stdin, os.Stdout)
}

// serveChild serves spec's role on 127.0.0.1 until stdin closes or the lifetime ends.
func serveChild(spec childSpec, stdin io.Reader, stdout io.Writer) error {
	if spec.Lifetime <= 0 {
		spec.Lifetime = time.Hour
	}
	ctx, cancel := context.WithTimeout(context.Background(), spec.Lifetime)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin) // the parent closes stdin (or dies): stop
		cancel()
	}()

	control := http.NewServeMux()
	control.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(readServerStats())
	})
	control.HandleFunc("/debug/pprof/", pprof.Index)
	control.HandleFunc("/debug/pprof/profile", pprof.Profile)
	control.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if spec.Profile {
		runtime.SetBlockProfileRate(1)
		runtime.SetMutexProfileFraction(1)
	}
	book := newMarkBook()
	control.HandleFunc("GET /marks", book.serve)

	// The upstream transport of both proxies; stamped on a timeline run.
	var transport http.RoundTripper = proxy.NewTransport()
	if spec.Timeline {
		transport = markedTransport{next: transport}
	}
	var h http.Handler
	switch spec.Role {
	case roleUpstream:
		u := newFakeUpstream(spec.RespBytes, spec.Chunks, spec.ChunkDelay)
		control.HandleFunc("GET /last", u.lastBody)
		h = u
		if spec.Timeline {
			h = book.wrapUpstream(h)
		}
	case roleBaseline:
		u, err := parseRoot(spec.Upstream)
		if err != nil {
			return err
		}
		h = newBaseline(u, transport)
	case rolePromptgate:
		srv, pg, err := newPromptgate(ctx, spec.Dir, spec.Upstream, spec.Plugins, transport)
		if err != nil {
			return err
		}
		defer pg.Close()
		h = srv
	default:
		return fmt.Errorf("unknown role %q", spec.Role)
	}
	if spec.Timeline && spec.Role != roleUpstream {
		h = book.wrapProxy(h)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return err
	}
	quiet := log.New(io.Discard, "", 0)
	// The timeouts of serve's listener.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, ErrorLog: quiet}
	csrv := &http.Server{Handler: control, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- csrv.Serve(cln) }()
	line, _ := json.Marshal(readyLine{Addr: ln.Addr().String(), Control: cln.Addr().String(), Pid: os.Getpid()})
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shut, cancelShut := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancelShut()
	_ = srv.Shutdown(shut)
	_ = csrv.Shutdown(shut)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// serverStats is what a child says about itself: Go runtime counters, its CPU time and context
// switches, and its resident memory.
type serverStats struct {
	Mallocs    uint64 `json:"mallocs"`
	TotalAlloc uint64 `json:"totalAlloc"`
	HeapInuse  uint64 `json:"heapInuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"numGC"`
	Goroutines int    `json:"goroutines"`
	// GoroutinesCreated counts the goroutines started so far (runtime/metrics).
	GoroutinesCreated uint64 `json:"goroutinesCreated"`
	// CPUNs is the user and system CPU time so far; VolSwitches and InvolSwitches the voluntary (a
	// thread blocked: a wait) and involuntary (preempted) context switches so far (getrusage); 0
	// where there is none.
	CPUNs         int64 `json:"cpuNs"`
	VolSwitches   int64 `json:"volSwitches"`
	InvolSwitches int64 `json:"involSwitches"`
	// MinorFaults counts the page faults served without I/O so far (getrusage): memory the runtime
	// gave back to the system and touches again.
	MinorFaults int64 `json:"minorFaults"`
	// RSS and PeakRSS are VmRSS and VmHWM of /proc/self/status, in bytes; 0 where there is no
	// /proc.
	RSS     uint64 `json:"rss"`
	PeakRSS uint64 `json:"peakRSS"`
	// SysReads and SysWrites are the process's read and write system calls so far (syscr and syscw
	// of /proc/PID/io), read by the harness; 0 where there is no /proc.
	SysReads  uint64 `json:"-"`
	SysWrites uint64 `json:"-"`
}

func readServerStats() serverStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s := serverStats{Mallocs: m.Mallocs, TotalAlloc: m.TotalAlloc, HeapInuse: m.HeapInuse, Sys: m.Sys,
		NumGC: m.NumGC, Goroutines: runtime.NumGoroutine()}
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(created)
	if created[0].Value.Kind() == metrics.KindUint64 {
		s.GoroutinesCreated = created[0].Value.Uint64()
	}
	s.CPUNs, s.VolSwitches, s.InvolSwitches, s.MinorFaults = selfUsage()
	s.RSS, s.PeakRSS = procRSS(os.Getpid())
	return s
}

// procRSS reads VmRSS and VmHWM of a process from /proc (Linux); zeros elsewhere.
func procRSS(pid int) (rss, hwm uint64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var kb uint64
		switch k {
		case "VmRSS":
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			rss = kb << 10
		case "VmHWM":
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// procIO reads the read and write system call counts of a process from /proc (Linux); zeros
// elsewhere.
func procIO(pid int) (reads, writes uint64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// child is a running child process, seen from the harness.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready readyLine
	done  chan struct{}
	once  sync.Once
}

// URL is the child's server root.
func (c *child) URL() string { return "http://" + c.ready.Addr }

// startChild starts this binary as a child serving spec and waits for its ready line.
func startChild(ctx context.Context, exe, name string, spec childSpec, env []string, stderr io.Writer) (*child, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), env...), envChild+"="+string(raw))
	cmd.Stderr = &prefixWriter{prefix: name + ": ", w: stderr}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Its stdout is read through a pipe of our own, so that reading it never races with cmd.Wait.
	stdout, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		stdout.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		stdout.Close()
	}()
	wait := time.NewTimer(60 * time.Second)
	defer wait.Stop()
	select {
	case line, ok := <-lines:
		if ok && json.Unmarshal([]byte(line), &c.ready) == nil && c.ready.Addr != "" {
			return c, nil
		}
		c.stop()
		return nil, fmt.Errorf("%s did not start (see its errors above)", name)
	case <-wait.C:
		c.stop()
		return nil, fmt.Errorf("%s did not start within 60s", name)
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
}

// stop closes the child's stdin, which makes it shut down, and kills it if it has not gone in 10s.
func (c *child) stop() {
	c.once.Do(func() {
		_ = c.stdin.Close()
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// prefixWriter writes each line with a prefix (a child's stderr into the harness's progress).
type prefixWriter struct {
	prefix string
	w      io.Writer
	mu     sync.Mutex
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}
