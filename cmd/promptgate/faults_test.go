package main

// Faults around the assembled server: its DB file (locked, corrupt, read-only), its audit file
// (disk full) and its plugins (crash, hang, flood), each through the real `serve` command.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/store"
)

// Environment of the helper process (this test binary run again, see TestFaultHelperProcess).
const (
	envHelper = "PROMPTGATE_FAULT_HELPER" // hold | run
	envHelpDB = "PROMPTGATE_FAULT_DB"     // hold: the DB file to lock
	envHelpIn = "PROMPTGATE_FAULT_ARGS"   // run: the promptgate arguments, as a JSON array
)

// TestFaultHelperProcess is not a test: run again as a child with envHelper set, it is the other
// process of a test — one that holds the DB's lock, or a promptgate run whose crash must not take
// the test binary down.
func TestFaultHelperProcess(t *testing.T) {
	switch os.Getenv(envHelper) {
	case "":
		t.Skip("helper process only")
	case "hold":
		st, err := store.Open(os.Getenv(envHelpDB), store.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("holding")
		_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes our stdin
		_ = st.Close()
		os.Exit(0)
	case "run":
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv(envHelpIn)), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := run(ctx, args, os.Stdin, os.Stdout, os.Stderr, os.Getenv); err != nil {
			fmt.Fprintln(os.Stderr, "promptgate:", err)
			os.Exit(exitCode(err))
		}
		os.Exit(0)
	}
}

// helper runs this test binary as the helper process.
func helper(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{envHelper + "=" + mode}, env...)...)
	return cmd
}

// jsonArgs encodes arguments for envHelpIn.
func jsonArgs(args []string) string {
	b, _ := json.Marshal(args)
	return string(b)
}

// runChild runs promptgate with args in a child process and returns its exit code and stderr.
func runChild(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := helper(t, "run", envHelpIn+"="+jsonArgs(args))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, errb.String()
}

func TestFaultDBLockedByAnotherProcess(t *testing.T) {
	db := filepath.Join(t.TempDir(), "pg.db")
	hold := helper(t, "hold", envHelpDB+"="+db)
	in, err := hold.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	hold.Stderr = os.Stderr
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close(); _ = hold.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "holding\n" {
		t.Fatalf("the other process did not take the lock: %q %v", line, err)
	}
	// serve must give up on the lock (after store.DefaultLockTimeout, 1 s) rather than wait for it;
	// the wall-clock bound below only tells "gave up" from "waits forever", and is generous for a
	// loaded machine. (The lock wait does not watch ctx, so without the bound a hang would last the
	// whole run.)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"serve", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, nil, io.Discard, io.Discard, envMap(nil))
	}()
	select {
	case err = <-errc:
	case <-time.After(60 * time.Second):
		t.Fatalf("serve has waited %v for a locked DB; it must give up after its lock timeout", time.Since(start).Round(time.Second))
	}
	if err == nil || !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), db) {
		t.Fatalf("serve with the DB locked: %v; want ErrLocked naming %s", err, db)
	}
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// seededDB creates a DB the way serve does and returns its path and bytes.
func seededDB(t *testing.T) (string, []byte) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "pg.db")
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	return db, b
}

// A corrupt DB (or audit ring) file stops serve at start with a message naming the file; it never
// panics. Each case runs in a child process so that a panic would fail the case, not the test
// binary.
func TestFaultCorruptDB(t *testing.T) {
	_, good := seededDB(t)
	garbage := bytes.Repeat([]byte("promptgate!"), 4096)
	cases := map[string]func([]byte) []byte{
		"garbage":   func([]byte) []byte { return garbage },
		"truncated": func(b []byte) []byte { return b[:len(b)/3] },
		"meta pages overwritten": func(b []byte) []byte {
			c := bytes.Clone(b)
			copy(c[:8192], garbage)
			return c
		},
		"data pages overwritten": func(b []byte) []byte {
			c := bytes.Clone(b)
			copy(c[8192:], garbage)
			return c
		},
	}
	for name, corrupt := range cases {
		for _, which := range []string{"db", "audit ring"} {
			t.Run(name+"/"+which, func(t *testing.T) {
				dir := t.TempDir()
				db := filepath.Join(dir, "pg.db")
				target := db
				if which == "audit ring" {
					if err := os.WriteFile(db, good, 0o600); err != nil {
						t.Fatal(err)
					}
					target = filepath.Join(dir, "pg.audit.db")
				}
				if err := os.WriteFile(target, corrupt(good), 0o600); err != nil {
					t.Fatal(err)
				}
				code, stderr := runChild(t, "serve", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
				if code == 0 {
					t.Fatalf("serve accepted a corrupt %s file", which)
				}
				if goroutineTrace.MatchString(stderr) {
					t.Fatalf("serve panicked on a corrupt %s file:\n%.2000s", which, stderr)
				}
				if !strings.Contains(stderr, target) {
					t.Errorf("the message does not name %s:\n%s", target, stderr)
				}
			})
		}
	}
}

// goroutineTrace matches the stack dump of a Go panic.
var goroutineTrace = regexp.MustCompile(`(?m)^goroutine \d+ \[`)

// syncBuffer is a bytes.Buffer safe for concurrent writers (the log).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// served is a running `promptgate serve`.
type served struct {
	base   string // http://ADDR/v1
	admin  string // http://ADDR
	stderr *syncBuffer
	stop   func() error
}

// startServe runs serve in this process on free ports, with the given env, until stop or the end of
// the test.
func startServe(t *testing.T, e map[string]string, args ...string) *served {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := &served{stderr: &syncBuffer{}}
	go func() {
		err := run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...), nil, pw, s.stderr, envMap(e))
		pw.Close()
		done <- err
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("serve printed nothing: %v; %v\n%s", err, <-done, s.stderr.String())
	}
	adminLine, err := br.ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("admin line %q: %v", adminLine, err)
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
	s.base = strings.Fields(line)[4]
	s.admin = strings.TrimSpace(strings.Fields(adminLine)[4])
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(30 * time.Second):
				stopErr = fmt.Errorf("serve did not stop")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = s.stop() })
	return s
}

// recordingUpstream answers every chat request with a fixed completion and keeps the last body.
type recordingUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	last []byte
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	u := &recordingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.last = b
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *recordingUpstream) lastBody() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// contextMeta is the meta object of the RUNTIME CONTEXT line of an upstream chat body.
func contextMeta(t *testing.T, body []byte) gjson.Result {
	t.Helper()
	sys := gjson.GetBytes(body, "messages.0.content").String()
	_, after, ok := strings.Cut(sys, "=== RUNTIME CONTEXT")
	if !ok {
		t.Fatalf("no RUNTIME CONTEXT block: %s", sys)
	}
	lines := strings.SplitN(after, "\n", 3)
	if len(lines) < 2 || !gjson.Valid(lines[1]) {
		t.Fatalf("context line %q", lines)
	}
	return gjson.Get(lines[1], "meta")
}

// A disk that is full for the audit file costs the events, counted and logged with the file's name;
// requests are served and tool policy is enforced as before.
func TestFaultServeAuditDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system:", err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_evil","type":"function","function":{"name":"delete_all","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pg.yaml")
	if err := os.WriteFile(cfg, []byte("audit: {file: /dev/full}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, nil, "--db", filepath.Join(dir, "pg.db"), "--config", cfg, "--upstream", up.URL+"/v1")
	for range 3 {
		resp, err := http.Post(s.base+"/chat/completions", "application/json", strings.NewReader(
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"get_weather"}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") || resp.Header.Get("X-Promptgate-Blocked") != "1" {
			t.Fatalf("with the audit disk full: %d %s", resp.StatusCode, b)
		}
	}
	// The ring still has the decisions. It writes in the background: poll until they are there (a
	// generous bound for a loaded machine; the poll ends as soon as they are).
	var b []byte
	ringHas := func() bool {
		resp, err := http.Get(s.admin + "/admin/audit?limit=10")
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return len(gjson.GetBytes(b, `events.#(verdict=="blocked")#`).Array()) > 0
	}
	if !pollUntil(30*time.Second, ringHas) {
		t.Errorf("the audit ring lost the decisions too: %s", b)
	}
	// The operator sees the loss on /metrics: every event given to the file failed, none was
	// written; the ring, on a good disk, wrote its copies.
	metrics := func() string {
		resp, err := http.Get(s.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	const (
		fileFailed  = `promptgate_audit_events_total{outcome="failed",sink="file"} 3`
		fileWritten = `promptgate_audit_events_total{outcome="written",sink="file"} 0`
		ringWritten = `promptgate_audit_events_total{outcome="written",sink="ring"} 3`
		fileErrors  = `promptgate_audit_write_errors_total{sink="file"} `
	)
	ok := func(m string) bool {
		return strings.Contains(m, fileFailed+"\n") && strings.Contains(m, fileWritten+"\n") && strings.Contains(m, ringWritten+"\n") &&
			strings.Contains(m, fileErrors) && !strings.Contains(m, fileErrors+"0\n")
	}
	var m string
	// The sinks write in the background.
	if !pollUntil(30*time.Second, func() bool { m = metrics(); return ok(m) }) {
		t.Errorf("/metrics does not show the failed audit writes:\n%s", grepLines(m, "promptgate_audit"))
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if l := s.stderr.String(); !strings.Contains(l, "audit: write failed") || !strings.Contains(l, "/dev/full") {
		t.Errorf("the audit failure is not logged naming the file:\n%s", l)
	}
}

// testsource builds the misbehaving test plugin (plugins/internal/testplugins/testsource) and
// returns its path and checksum.
func testsource(t *testing.T) (string, string) {
	t.Helper()
	return buildPlugin(t, "../../plugins/internal/testplugins/testsource")
}

// buildPlugin builds the plugin program in dir (relative to this package) and returns its path and
// checksum.
func buildPlugin(t *testing.T, dir string) (string, string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to build the plugin:", err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	cmd := exec.Command(goTool, "build", "-o", bin, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return bin, hex.EncodeToString(sum[:])
}

// Plugins that crash, hang or flood: an optional one is skipped and says so in meta.skipped; a
// required one turns the request into 503 context_unavailable.
func TestFaultServePlugins(t *testing.T) {
	bin, sum := testsource(t)
	plugin := func(name, behavior string, required bool) string {
		// Only the hanging plugin's timeout is under test; the others get one that a loaded machine
		// cannot reach, so that a slow answer (the flood of 1 MiB, over the host's answer cap of
		// 256 KiB, or the echo) is not skipped as a timeout.
		timeout := "60s"
		if behavior == "hang" {
			timeout = "1s"
		}
		return fmt.Sprintf("  - {name: %s, path: %q, sha256: %q, module: %s, minMode: minimal, timeout: %s, required: %v, config: {behavior: %s, size: 1048576}}\n",
			name, bin, sum, name, timeout, required, behavior)
	}
	up := newRecordingUpstream(t)
	chat := func(s *served, user string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Promptgate-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	start := func(t *testing.T, plugins string) *served {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "pg.yaml")
		if err := os.WriteFile(cfg, []byte("plugins:\n"+plugins), 0o600); err != nil {
			t.Fatal(err)
		}
		return startServe(t, nil, "--db", filepath.Join(dir, "pg.db"), "--config", cfg, "--upstream", up.URL+"/v1")
	}

	t.Run("optional: skipped and said so", func(t *testing.T) {
		s := start(t, plugin("hang", "hang", false)+plugin("flood", "huge", false)+plugin("crashy", "crash", false)+plugin("echo", "echo", false))
		resp, b := chat(s, "crash")
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		meta := contextMeta(t, up.lastBody())
		reasons := map[string]string{}
		for _, sk := range meta.Get("skipped").Array() {
			reasons[sk.Get("source").String()] = sk.Get("reason").String()
		}
		if reasons["hang"] != "timeout" || !strings.HasPrefix(reasons["flood"], "answer too large") || reasons["crashy"] != "unavailable" || reasons["echo"] != "" {
			t.Errorf("meta.skipped = %s", meta.Get("skipped").Raw)
		}
		if got := meta.Get("sources").Raw; got != `["echo"]` {
			t.Errorf("meta.sources = %s", got)
		}
		// An optional plugin that is down does not make the proxy unready.
		if resp, err := http.Get(strings.TrimSuffix(s.base, "/v1") + "/readyz"); err != nil || resp.StatusCode != 200 {
			t.Errorf("readyz with an optional plugin down: %v %v", err, resp)
		}
	})
	t.Run("required hang: 503", func(t *testing.T) {
		s := start(t, plugin("hang", "hang", true))
		resp, b := chat(s, "alice")
		if resp.StatusCode != 503 || gjson.GetBytes(b, "error.code").String() != "context_unavailable" || !strings.Contains(string(b), `\"hang\"`) {
			t.Errorf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("required flood: 503", func(t *testing.T) {
		s := start(t, plugin("flood", "huge", true))
		resp, b := chat(s, "alice")
		if resp.StatusCode != 503 || gjson.GetBytes(b, "error.code").String() != "context_unavailable" || !strings.Contains(string(b), "answer too large") {
			t.Errorf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("required crash: 503, then served again after the restart", func(t *testing.T) {
		s := start(t, plugin("crashy", "crash", true))
		if resp, b := chat(s, "alice"); resp.StatusCode != 200 {
			t.Fatalf("before the crash: %d %s", resp.StatusCode, b)
		}
		resp, b := chat(s, "crash")
		if resp.StatusCode != 503 || gjson.GetBytes(b, "error.code").String() != "context_unavailable" {
			t.Fatalf("the crash: %d %s", resp.StatusCode, b)
		}
		status := 0
		if !pollUntil(60*time.Second, func() bool { resp, _ := chat(s, "alice"); status = resp.StatusCode; return status == 200 }) {
			t.Fatalf("still %d after the plugin should have restarted", status)
		}
		if meta := contextMeta(t, up.lastBody()); meta.Get("sources").Raw != `["crashy"]` {
			t.Errorf("after the restart: meta %s", meta.Raw)
		}
	})
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// pollUntil calls cond every 25 ms until it holds (true) or d has passed (false; cond is tried once
// more at the end). d is a bound for a loaded machine, not a measurement: the poll returns as soon
// as cond holds.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(25 * time.Millisecond)
	}
	return true
}
