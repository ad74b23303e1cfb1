package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy/modules"
)

// fields decodes the answer of the named source, or fails.
func fields(t *testing.T, r gather.Result, name string) map[string]any {
	t.Helper()
	for _, s := range r.Sources {
		if s.Name == name {
			var m map[string]any
			if err := json.Unmarshal(ctxjson.Encode(s.Value), &m); err != nil {
				t.Fatalf("source %s: %v", name, err)
			}
			return m
		}
	}
	t.Fatalf("source %q missing; sources %v, skipped %v", name, names(r), r.Skipped)
	return nil
}

func names(r gather.Result) []string {
	var out []string
	for _, s := range r.Sources {
		out = append(out, s.Name)
	}
	return out
}

// skipReason returns the meta.skipped reason of the named source, "" when it is not skipped.
func skipReason(r gather.Result, name string) string {
	for _, s := range r.Skipped {
		if s.Source == name {
			return s.Reason
		}
	}
	return ""
}

func collect(t *testing.T, h *plugins.Host, q gather.Query) gather.Result {
	t.Helper()
	r, err := h.Gather(context.Background(), q)
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	return r
}

func TestWrongChecksumRefusedAtStart(t *testing.T) {
	e := entry("memory", "filememory", map[string]any{"dir": t.TempDir()})
	e.SHA256 = built["profilegraph"].sha256
	_, err := plugins.NewHost(context.Background(), []plugins.Spec{e}, plugins.HostOptions{Logger: testLogger(t)})
	if err == nil {
		t.Fatal("NewHost accepted a binary whose sha256 differs from the config")
	}
	for _, want := range []string{`"memory"`, built["profilegraph"].sha256, built["filememory"].sha256, "sha256sum"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}

	// A binary changed on disk after the config was written.
	tampered := filepath.Join(t.TempDir(), "filememory")
	b, err := os.ReadFile(built["filememory"].path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tampered, append(b, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	e = entry("memory", "filememory", map[string]any{"dir": t.TempDir()})
	e.Path = tampered
	if _, err := plugins.NewHost(context.Background(), []plugins.Spec{e}, plugins.HostOptions{}); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Fatalf("tampered binary: err = %v", err)
	}

	e.Path = filepath.Join(t.TempDir(), "missing")
	if _, err := plugins.NewHost(context.Background(), []plugins.Spec{e}, plugins.HostOptions{}); err == nil || !strings.Contains(err.Error(), `"memory"`) {
		t.Fatalf("missing binary: err = %v", err)
	}
}

func TestFileMemoryThroughHost(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "memory")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "alice.json"), `{"likes":["tea"],"z":1,"a":{"deep":true}}`)
	write(t, filepath.Join(base, "secret.json"), `{"secret":"outside the memory dir"}`)
	h := startHost(t, plugins.HostOptions{}, entry("memory", "filememory", map[string]any{"dir": dir}))

	r := collect(t, h, gather.Query{Protocol: "neutral", Mode: modules.Standard, User: "alice"})
	if got := string(ctxjson.Encode(r.Sources[0].Value)); got != `{"likes":["tea"],"z":1,"a":{"deep":true}}` {
		t.Errorf("alice: %s (keys must keep the file's order)", got)
	}
	if len(r.Notes["memory"]) != 1 {
		t.Errorf("notes = %v", r.Notes)
	}
	for _, user := range []string{"bob", "../secret", "..", "/etc/passwd", "", "a/../../secret"} {
		r := collect(t, h, gather.Query{Mode: modules.Standard, User: user})
		if got := string(ctxjson.Encode(r.Sources[0].Value)); got != `{}` {
			t.Errorf("user %q: %s, want {}", user, got)
		}
	}
}

func TestProfileGraphModes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.json")
	write(t, file, `{"u-1": {
		"interests": ["jazz", {"name": "distributed systems", "weight": 9}, "JAZZ", {"label": "chess", "score": 3}],
		"projects": [{"title": "promptgate", "count": 2}, "`+strings.Repeat("p", 100)+`"],
		"goals": ["ship v1"], "tools": ["go", "vim", "git"],
		"boundaries": ["no medical advice", "no politics", "no gossip"],
		"relationship": {"trusted": true, "mentor": false, "colleague": true, "stage": "peer"}}}`)
	h := startHost(t, plugins.HostOptions{}, entry("profile", "profilegraph", map[string]any{"file": file, "limit": 2, "maxChars": 10}))

	r := collect(t, h, gather.Query{Mode: modules.Minimal, User: "u-1"})
	if got := string(ctxjson.Encode(r.Sources[0].Value)); got != `{}` {
		t.Errorf("minimal: %s, want {}", got)
	}
	r = collect(t, h, gather.Query{Mode: modules.Standard, User: "u-1"})
	want := `{"interests":["distribut…","chess"],"projects":["promptgate","ppppppppp…"],"goals":["ship v1"],` +
		`"tools":["go","vim"],"boundaries":["no medica…","no politi…"],"relationship":["trusted","colleague"]}`
	if got := string(ctxjson.Encode(r.Sources[0].Value)); got != want {
		t.Errorf("standard:\n got %s\nwant %s", got, want)
	}
	r = collect(t, h, gather.Query{Mode: modules.Full, User: "u-1"})
	flags := fields(t, r, "profile")["relationshipFlags"]
	if !reflect.DeepEqual(flags, map[string]any{"trusted": true, "mentor": false, "colleague": true, "stage": "peer"}) {
		t.Errorf("full: relationshipFlags = %v", flags)
	}
	r = collect(t, h, gather.Query{Mode: modules.Full, User: "nobody"})
	if got := string(ctxjson.Encode(r.Sources[0].Value)); got != `{}` {
		t.Errorf("unknown user: %s", got)
	}
}

func TestModuleModesAndToggles(t *testing.T) {
	a := entry("a", "testsource", nil)
	b := entry("b", "testsource", nil)
	b.MinMode = "standard"
	c := entry("c", "testsource", nil)
	c.MinMode = "full"
	c.Required = true
	h := startHost(t, plugins.HostOptions{}, a, b, c)
	for _, tc := range []struct {
		mode    modules.Mode
		off     []string
		sources []string
		skipped []ctxjson.Skip
	}{
		{modules.Minimal, nil, []string{"a"}, nil},
		{modules.Standard, nil, []string{"a", "b"}, nil},
		{modules.Full, nil, []string{"a", "b", "c"}, nil},
		{modules.Full, []string{"b"}, []string{"a", "c"}, []ctxjson.Skip{{Source: "b", Reason: "module off"}}},
		// c is below the mode: absent, not listed as switched off.
		{modules.Standard, []string{"c", "a"}, []string{"b"}, []ctxjson.Skip{{Source: "a", Reason: "module off"}}},
		// A required source switched off is not a failure.
		{modules.Full, []string{"c"}, []string{"a", "b"}, []ctxjson.Skip{{Source: "c", Reason: "module off"}}},
		{"", nil, nil, nil},
	} {
		r, err := h.Gather(context.Background(), gather.Query{Mode: tc.mode, ModulesOff: tc.off})
		if err != nil {
			t.Fatalf("mode %v off %v: %v", tc.mode, tc.off, err)
		}
		if !reflect.DeepEqual(names(r), tc.sources) || !reflect.DeepEqual(r.Skipped, tc.skipped) {
			t.Errorf("mode %v off %v: sources %v skipped %v; want %v %v", tc.mode, tc.off, names(r), r.Skipped, tc.sources, tc.skipped)
		}
		if tc.mode != "" && fields(t, r, tc.sources[0])["mode"] != string(tc.mode) {
			t.Errorf("mode %v: the plugin was told %v", tc.mode, fields(t, r, tc.sources[0])["mode"])
		}
	}
}

func TestCaching(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "calls")
	cached := entry("cached", "testsource", map[string]any{"countFile": count})
	cached.CacheTTL = time.Minute
	short := entry("short", "testsource", map[string]any{"countFile": filepath.Join(dir, "short")})
	short.CacheTTL = 300 * time.Millisecond
	failing := entry("failing", "testsource", map[string]any{"behavior": "error", "countFile": filepath.Join(dir, "failing")})
	failing.CacheTTL = time.Minute
	asks := entry("asks", "testsource", map[string]any{"countFile": filepath.Join(dir, "asks")})
	asks.CacheTTL, asks.ReceiveUserMessage = time.Minute, true
	h := startHost(t, plugins.HostOptions{}, cached, short, failing, asks)

	q := gather.Query{Protocol: "neutral", Mode: modules.Standard, User: "u-1", Conversation: "c-1", LatestUser: "hello"}
	first := collect(t, h, q)
	second := collect(t, h, q)
	if lines(t, count) != 1 {
		t.Fatalf("a second request within the TTL called the plugin: %d calls", lines(t, count))
	}
	if !reflect.DeepEqual(fields(t, first, "cached"), fields(t, second, "cached")) {
		t.Error("the cached answer differs")
	}
	if lines(t, filepath.Join(dir, "failing")) != 2 {
		t.Errorf("a failure was cached: %d calls", lines(t, filepath.Join(dir, "failing")))
	}
	// Every part of the key makes its own entry.
	for _, q2 := range []gather.Query{
		{Protocol: "neutral", Mode: modules.Standard, User: "u-2", Conversation: "c-1"},
		{Protocol: "neutral", Mode: modules.Standard, User: "u-1", Conversation: "c-2"},
		{Protocol: "private", Mode: modules.Standard, User: "u-1", Conversation: "c-1"},
		{Protocol: "neutral", Mode: modules.Full, User: "u-1", Conversation: "c-1"},
	} {
		collect(t, h, q2)
	}
	if lines(t, count) != 5 {
		t.Errorf("%d calls after 4 distinct keys, want 5", lines(t, count))
	}
	// The latest user message is part of the key only for a source that receives it.
	q.LatestUser = "another question"
	collect(t, h, q)
	if lines(t, count) != 5 || lines(t, filepath.Join(dir, "asks")) != 6 { // asks: 1 + 4 distinct keys + 1 new message
		t.Errorf("new message: cached %d calls (want 5), asks %d calls (want 6)", lines(t, count), lines(t, filepath.Join(dir, "asks")))
	}
	// After the TTL the plugin is called again.
	before := lines(t, filepath.Join(dir, "short"))
	time.Sleep(400 * time.Millisecond)
	collect(t, h, q)
	if n := lines(t, filepath.Join(dir, "short")); n != before+1 {
		t.Errorf("after its 300ms TTL: %d calls, want %d", n, before+1)
	}
	if n := lines(t, count); n != 5 {
		t.Errorf("within its 1m TTL: %d calls, want 5", n)
	}
}

func TestCacheOff(t *testing.T) {
	count := filepath.Join(t.TempDir(), "calls")
	e := entry("c", "testsource", map[string]any{"countFile": count})
	e.CacheTTL = time.Minute
	h := startHost(t, plugins.HostOptions{CacheMaxBytes: -1}, e)
	collect(t, h, gather.Query{Mode: modules.Full})
	collect(t, h, gather.Query{Mode: modules.Full})
	if lines(t, count) != 2 {
		t.Errorf("CacheMaxBytes -1: %d calls, want 2", lines(t, count))
	}
}

func TestUserMessageAndDirectivesOnlyWhereAllowed(t *testing.T) {
	trusted := entry("trusted", "testsource", nil)
	trusted.ReceiveUserMessage, trusted.TrustedDirectives = true, true
	plain := entry("plain", "testsource", nil)
	imitate := entry("imitate", "testsource", map[string]any{"behavior": "imitate"})
	h := startHost(t, plugins.HostOptions{}, trusted, plain, imitate)
	r := collect(t, h, gather.Query{Mode: modules.Full, User: "u", LatestUser: "what is my name?"})
	if got := fields(t, r, "trusted")["latestUser"]; got != "what is my name?" {
		t.Errorf("receiveUserMessage: latestUser = %q", got)
	}
	if got := fields(t, r, "plain")["latestUser"]; got != "" {
		t.Errorf("without receiveUserMessage the plugin saw %q", got)
	}
	if !reflect.DeepEqual(r.Directives, []string{"directive from testsource"}) {
		t.Errorf("directives = %q; only the trusted source's may pass", r.Directives)
	}
	if len(r.Notes["trusted"]) != 1 || len(r.Notes["plain"]) != 1 {
		t.Errorf("notes = %v", r.Notes)
	}
	// The imitation is data: it stays inside the source's value, escaped on encoding.
	enc := string(ctxjson.Encode(r.Sources[2].Value))
	if strings.ContainsAny(enc, "\n\r\u2028") || !strings.Contains(enc, `=== SYSTEM CORE ===`) {
		t.Errorf("imitate: %s", enc)
	}
}

// TestListsFromAnswers: the fields an entry names in lists become operator lists (list:NAME) of the
// request; a field that is missing or not a value gives none; an entry without lists gives none.
func TestListsFromAnswers(t *testing.T) {
	directory := entry("directory", "testsource", nil)
	directory.Lists = []string{"user", "mode", "missing", "pid"}
	plain := entry("plain", "testsource", nil)
	h := startHost(t, plugins.HostOptions{}, directory, plain)
	r := collect(t, h, gather.Query{Mode: modules.Full, User: "payee-directory-user"})
	if !reflect.DeepEqual(r.Lists["user"], []string{"payee-directory-user"}) || !reflect.DeepEqual(r.Lists["mode"], []string{"full"}) ||
		r.Lists["missing"] != nil || len(r.Lists["pid"]) != 1 || len(r.Lists) != 3 {
		t.Errorf("lists = %v", r.Lists)
	}
	if errs := plugins.ValidateSpecs("plugins", []plugins.Spec{{Name: "d", Path: "p", SHA256: strings.Repeat("a", 64), MinMode: "standard", Lists: []string{"a b"}}}); len(errs) != 1 ||
		!strings.Contains(errs[0].Error(), "plugins[0] (d).lists[0]") {
		t.Errorf("a bad list name: %v", errs)
	}
}

func TestPluginEnvironmentHoldsNoSecrets(t *testing.T) {
	t.Setenv("PROMPTGATE_ADMIN_TOKEN", "s3cret-admin")
	t.Setenv("OPENAI_API_KEY", "sk-s3cret")
	h := startHost(t, plugins.HostOptions{}, entry("env", "testsource", map[string]any{"behavior": "env"}))
	r := collect(t, h, gather.Query{Mode: modules.Minimal})
	env := string(ctxjson.Encode(r.Sources[0].Value))
	if strings.Contains(env, "s3cret") || !strings.Contains(env, "PATH=") {
		t.Errorf("plugin environment: %s", env)
	}
}

func TestTimeoutHangingPlugin(t *testing.T) {
	hang := entry("hang", "testsource", map[string]any{"behavior": "hang"})
	hang.Timeout = 200 * time.Millisecond
	// The echo's timeout is far beyond what a loaded machine needs: Gather ending well before it
	// shows that the hang was cut by its own 200ms, not by the other source's timeout.
	echo := entry("echo", "testsource", nil)
	echo.Timeout = 60 * time.Second
	h := startHost(t, plugins.HostOptions{}, hang, echo)
	var mu sync.Mutex
	observed := map[string]string{}
	h.Observe(func(source string, took time.Duration, reason string) {
		mu.Lock()
		defer mu.Unlock()
		observed[source] = reason
		if source == "hang" && took < hang.Timeout {
			t.Errorf("hang observed after %v, before its timeout", took)
		}
	})
	start := time.Now()
	r := collect(t, h, gather.Query{Mode: modules.Minimal})
	mu.Lock()
	if len(observed) != 2 || observed["hang"] != "timeout" || observed["echo"] != "" {
		t.Errorf("observer saw %v", observed)
	}
	mu.Unlock()
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Gather took %v with a 200ms timeout", took)
	}
	if got := skipReason(r, "hang"); got != "timeout" {
		t.Errorf("hang: reason %q, want timeout", got)
	}
	fields(t, r, "echo") // the others are not held up
	// A hang is not a crash: the plugin stays up and answers the next request the same way.
	if ok, why := h.Ready(); !ok {
		t.Errorf("not ready after a timeout: %s", why)
	}
}

func TestHugeAnswerRefusedWithoutReadingIt(t *testing.T) {
	huge := entry("huge", "testsource", map[string]any{"behavior": "huge"})
	// The plugin builds 50 MiB before it sends; under -race on a busy machine that alone has taken
	// 5 s. What is tested is the refusal by size, not the timeout.
	huge.Timeout = 60 * time.Second
	h := startHost(t, plugins.HostOptions{}, huge, entry("echo", "testsource", nil))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	r := collect(t, h, gather.Query{Mode: modules.Minimal})
	runtime.ReadMemStats(&after)
	if got := skipReason(r, "huge"); got != "answer too large (over 262144 bytes)" {
		t.Errorf("huge: reason %q", got)
	}
	fields(t, r, "echo")
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 30<<20 {
		t.Errorf("the host allocated %d MiB for a refused 50 MiB answer", grown>>20)
	}
	t.Logf("50 MiB answer refused in %v", time.Since(start))

	small := entry("small", "testsource", map[string]any{"behavior": "huge", "size": 2048})
	h = startHost(t, plugins.HostOptions{MaxAnswerBytes: 1024}, small)
	if got := skipReason(collect(t, h, gather.Query{Mode: modules.Minimal}), "small"); got != "answer too large (over 1024 bytes)" {
		t.Errorf("MaxAnswerBytes 1024: reason %q", got)
	}
}

func TestInvalidAnswersSkipped(t *testing.T) {
	h := startHost(t, plugins.HostOptions{},
		entry("badutf8", "testsource", map[string]any{"behavior": "badutf8"}),
		entry("notobject", "testsource", map[string]any{"behavior": "notobject"}),
		entry("failing", "testsource", map[string]any{"behavior": "error"}),
		entry("echo", "testsource", nil),
	)
	r := collect(t, h, gather.Query{Mode: modules.Minimal})
	want := []ctxjson.Skip{
		{Source: "badutf8", Reason: "invalid answer: invalid UTF-8"},
		{Source: "notobject", Reason: "invalid answer: fields is an array, not a JSON object"},
		{Source: "failing", Reason: "error: backend down"},
	}
	if !reflect.DeepEqual(r.Skipped, want) || !reflect.DeepEqual(names(r), []string{"echo"}) {
		t.Errorf("skipped %v sources %v; want %v [echo]", r.Skipped, names(r), want)
	}
}

func TestRequiredFailure(t *testing.T) {
	req := entry("profile", "testsource", map[string]any{"behavior": "error"})
	req.Required = true
	h := startHost(t, plugins.HostOptions{}, req, entry("echo", "testsource", nil))
	r, err := h.Gather(context.Background(), gather.Query{Mode: modules.Minimal})
	if !errors.Is(err, plugins.ErrRequiredFailed) || !strings.Contains(err.Error(), `"profile"`) || !strings.Contains(err.Error(), "backend down") {
		t.Fatalf("err = %v; want ErrRequiredFailed naming the source and why", err)
	}
	if skipReason(r, "profile") != "error: backend down" || len(r.Sources) != 1 {
		t.Errorf("result = %+v", r)
	}

	// A required plugin that cannot start keeps the host from starting; an optional one does not.
	bad := entry("strict", "testsource", map[string]any{"behavior": "refuse-config"})
	bad.Required = true
	_, err = plugins.NewHost(context.Background(), []plugins.Spec{bad}, plugins.HostOptions{Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), `"strict"`) || !strings.Contains(err.Error(), "refuses every config") {
		t.Fatalf("required plugin failing Configure: err = %v", err)
	}
	bad.Required = false
	h = startHost(t, plugins.HostOptions{}, bad)
	if ok, why := h.Ready(); !ok {
		t.Errorf("an optional plugin that failed to start made the host unready: %s", why)
	}
	if got := skipReason(collect(t, h, gather.Query{Mode: modules.Minimal}), "strict"); got != "unavailable" {
		t.Errorf("optional plugin down: reason %q", got)
	}
}

func TestCrashMidCallRestarts(t *testing.T) {
	crashy := entry("crashy", "testsource", map[string]any{"behavior": "crash"})
	crashy.Required = true
	// The timeout is far beyond what a loaded machine needs, so that "fails fast" below means "did
	// not wait for the timeout". The backoff keeps the plugin down long enough for the test to see
	// it down even when the machine is slow to schedule the test.
	crashy.Timeout = 60 * time.Second
	h := startHost(t, plugins.HostOptions{RestartBackoff: 2 * time.Second, HealthInterval: 50 * time.Millisecond},
		crashy, entry("echo", "testsource", nil))
	if ok, why := h.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	if st := h.Status(); len(st) != 2 || st[0].Name != "crashy" || !st[0].Up || !st[0].Required || st[0].Restarts != 0 ||
		st[0].UpSince.IsZero() || st[1].Name != "echo" || !st[1].Up || st[1].Required {
		t.Fatalf("status at start: %+v", st)
	}
	pid := fields(t, collect(t, h, gather.Query{Mode: modules.Minimal, User: "alice"}), "crashy")["pid"]

	r, err := h.Gather(context.Background(), gather.Query{Mode: modules.Minimal, User: "crash"})
	if !errors.Is(err, plugins.ErrRequiredFailed) || skipReason(r, "crashy") != "unavailable" {
		t.Fatalf("crash mid-call: err %v, skipped %v", err, r.Skipped)
	}
	fields(t, r, "echo") // the other source answered

	// While it restarts the host is not ready and calls fail fast.
	waitFor(t, 30*time.Second, "unready after the crash", func() bool { ok, _ := h.Ready(); return !ok })
	if st := h.Status()[0]; st.Up || st.Down == "" || !st.UpSince.IsZero() {
		t.Errorf("status while down: %+v", st)
	}
	start := time.Now()
	if r, _ := h.Gather(context.Background(), gather.Query{Mode: modules.Minimal, User: "alice"}); skipReason(r, "crashy") == "unavailable" && time.Since(start) > 30*time.Second {
		t.Errorf("a call to a plugin that is down took %v (its timeout is %v)", time.Since(start), crashy.Timeout)
	}
	waitFor(t, 60*time.Second, "ready after the restart", func() bool { ok, _ := h.Ready(); return ok })
	got := fields(t, collect(t, h, gather.Query{Mode: modules.Minimal, User: "alice"}), "crashy")["pid"]
	if got == pid {
		t.Errorf("same pid %v after a crash", pid)
	}
	if st := h.Status(); !st[0].Up || st[0].Down != "" || st[0].Restarts != 1 || st[1].Restarts != 0 {
		t.Errorf("status after the restart: %+v", st)
	}

	// A process that dies between requests is noticed and restarted too.
	p, err := os.FindProcess(int(got.(float64)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a new process after kill", func() bool {
		r, _ := h.Gather(context.Background(), gather.Query{Mode: modules.Minimal, User: "alice"})
		for _, s := range r.Sources {
			if s.Name == "crashy" {
				return s.Value.Get("pid").Text() != ctxjson.Int(int64(got.(float64))).Text()
			}
		}
		return false
	})
}

func TestCloseStopsEveryProcess(t *testing.T) {
	// The hanging call's timeout is far beyond the bound below: the call ends because of Close.
	calls := filepath.Join(t.TempDir(), "calls")
	hang := entry("hang", "testsource", map[string]any{"behavior": "hang", "countFile": calls})
	hang.Timeout = 5 * time.Minute
	h, err := plugins.NewHost(context.Background(), []plugins.Spec{entry("a", "testsource", nil), hang},
		plugins.HostOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, h, gather.Query{Mode: modules.Minimal, ModulesOff: []string{"hang"}})
	pid := int(fields(t, r, "a")["pid"].(float64))
	done := make(chan time.Duration)
	go func() { // a call in flight, hanging
		start := time.Now()
		_, _ = h.Gather(context.Background(), gather.Query{Mode: modules.Minimal})
		done <- time.Since(start)
	}()
	waitFor(t, 30*time.Second, "the hanging call in flight", func() bool { return lines(t, calls) == 1 })
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if took := <-done; took > time.Minute {
		t.Errorf("the call in flight lasted %v after Close", took)
	}
	if ok, _ := h.Ready(); ok {
		t.Error("ready after Close")
	}
	if got := skipReason(collect(t, h, gather.Query{Mode: modules.Minimal}), "a"); got != "unavailable" {
		t.Errorf("after Close: reason %q", got)
	}
	if runtime.GOOS != "windows" {
		waitFor(t, 30*time.Second, "plugin process gone", func() bool {
			p, err := os.FindProcess(pid)
			return err != nil || p.Signal(syscall.Signal(0)) != nil
		})
	}
	_ = h.Close() // twice is fine
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func write(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func lines(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
