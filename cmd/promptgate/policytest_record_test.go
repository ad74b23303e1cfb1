package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
)

// TestRecordReplaysALiveDecision: serve decides a request; `test --record` writes a case from the
// decision log — through the admin API while serve holds the ring, from the ring file once it
// stopped, and from the JSON lines of audit.file, the same case each time — and the case passes.
// Where the log kept only the arguments' digest, the arguments are placeholders: the case fails,
// saying so, until they are filled in.
func TestRecordReplaysALiveDecision(t *testing.T) {
	t.Parallel()
	// The upstream's calls, with their arguments as it sends them: the support protocol blocks the
	// first (rule order-id), releases the second and blocks the third (not in the allowlist).
	recordedCalls := []struct{ tool, args string }{
		{"get_order", `{"order_id":"12345"}`},
		{"create_ticket", `{"priority":"low","body":"Parcel damaged"}`},
		{"issue_refund", `{"order":"A-123456"}`},
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "pg.db")
	if _, _, err := runCmd(t, nil, "", "protocols", "push", "--create", "--activate", "--db", db, supportFile(t)); err != nil {
		t.Fatal(err)
	}
	jsonl := filepath.Join(dir, "events.jsonl")
	// search_kb is switched off by the config: serve's tool policy is what POST /admin/tests runs
	// with.
	cfg := writeFile(t, dir, "pg.yaml", "defaultProtocol: support\naudit: {includeArguments: true, file: "+jsonl+"}\ntools: {search_kb: {enabled: false}}\n")
	var calls []string
	for i, c := range recordedCalls {
		calls = append(calls, `{"id":"call_`+strconv.Itoa(i+1)+`","type":"function","function":{"name":"`+c.tool+`","arguments":`+jsonString(c.args)+`}}`)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[`+strings.Join(calls, ",")+`]}}]}`)
	}))
	t.Cleanup(up.Close)
	s := startServe(t, nil, "--db", db, "--config", cfg, "--upstream", up.URL+"/v1")
	resp, err := http.Post(s.base+"/chat/completions", "application/json", strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"My parcel A-123456 arrived broken."}],"tools":[`+
			`{"type":"function","function":{"name":"get_order","parameters":{"type":"object"}}},`+
			`{"type":"function","function":{"name":"create_ticket","parameters":{"type":"object"}}},`+
			`{"type":"function","function":{"name":"issue_refund","parameters":{"type":"object"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}

	// serve holds the ring: --record goes through its admin API.
	live := filepath.Join(dir, "live.test.yaml")
	env := map[string]string{EnvAdminURL: s.admin}
	var errOut string
	if !pollUntil(20*time.Second, func() bool {
		_, errOut, err = runCmd(t, env, "", "test", "--record", id, "--db", db, "--config", cfg, "--out", live)
		return err == nil
	}) {
		t.Fatalf("record: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "held by a running server; using its admin API at "+s.admin) {
		t.Errorf("stderr: %s", errOut)
	}
	fromAPI := recordAndRunOverTheAPI(t, s.admin, id)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	text := readString(t, live)
	for _, want := range []string{"protocol: support@1\n", "name: " + id + "\n", "PLACEHOLDER", "toolsRemoved:\n        - issue_refund\n",
		"- path: the route is not kept", "outcome: released", "rule: order-id"} {
		if !strings.Contains(text, want) {
			t.Errorf("the recorded case lacks %q:\n%s", want, text)
		}
	}
	for _, c := range recordedCalls {
		if !strings.Contains(text, "argumentsSha256: "+audit.ArgsDigest([]byte(c.args))) {
			t.Errorf("no digest of %s's arguments", c.tool)
		}
	}
	if out, errOut, err := runCmd(t, nil, "", "test", "-v", "--db", db, live); err != nil || strings.Count(out, "--- PASS") != 1 {
		t.Fatalf("the recorded case does not pass: %v\n%s%s\n%s", err, out, errOut, text)
	}

	// From the ring file, and from the JSON lines: the same case.
	fromRing, _, err := runCmd(t, nil, "", "test", "--record", id, "--db", db, "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	fromLines, _, err := runCmd(t, nil, "", "test", "--record", id, "--events", jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if withoutSource(fromRing) != withoutSource(text) || withoutSource(fromLines) != withoutSource(text) || withoutSource(fromAPI) != withoutSource(text) {
		t.Errorf("the cases differ:\n%s\n%s\n%s\n%s", text, fromRing, fromLines, fromAPI)
	}

	// The arguments' digest only (audit.includeArguments off): placeholders, which fail the case.
	noArgs := filepath.Join(dir, "noargs.jsonl")
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(readString(t, jsonl)), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		e.Args = ""
		b, _ := json.Marshal(e)
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(noArgs, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	placeholders := filepath.Join(dir, "placeholders.test.yaml")
	if _, _, err := runCmd(t, nil, "", "test", "--record", id, "--events", noArgs, "--out", placeholders); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, nil, "", "test", "--db", db, placeholders)
	if exitCode(err) != 1 || !strings.Contains(out, "cases[0].expect.calls[1].argumentsSha256: call create_ticket id call_2: its arguments have SHA-256 ") {
		t.Fatalf("the case with placeholders: exit %d\n%s", exitCode(err), out)
	}
	// Filled in with the real arguments, it passes.
	filled := readString(t, placeholders)
	for _, c := range recordedCalls {
		ph := jsonString(`{"PLACEHOLDER":"the arguments are not kept (audit.includeArguments is off); their SHA-256 is ` + audit.ArgsDigest([]byte(c.args)) + `"}`)
		if !strings.Contains(filled, ph) {
			t.Fatalf("no placeholder %s in:\n%s", ph, filled)
		}
		filled = strings.Replace(filled, ph, jsonString(c.args), 1)
	}
	if out, _, err := runCmd(t, nil, "", "test", "--db", db, writeFile(t, dir, "filled.test.yaml", filled)); err != nil {
		t.Fatalf("filled in: %v\n%s", err, out)
	}
}

// recordAndRunOverTheAPI records the case of request id through the admin API of a running serve,
// runs it there (it passes), runs a case of the config's kill switch (it passes: serve's tool
// policy is the run's), and returns the recorded case.
func recordAndRunOverTheAPI(t *testing.T, admin, id string) string {
	t.Helper()
	post := func(path, contentType, body string) []byte {
		t.Helper()
		resp, err := http.Post(admin+path, contentType, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	text := gjson.GetBytes(post("/admin/tests/record", "application/json", `{"requestId":`+jsonString(id)+`}`), "caseFile").String()
	if !strings.Contains(text, "Recorded by POST /admin/tests/record from the server's audit ring on ") {
		t.Errorf("the case recorded over the API:\n%s", text)
	}
	if run := post("/admin/tests", "application/yaml", text); !gjson.GetBytes(run, "passed").Bool() {
		t.Errorf("the case recorded over the API does not pass there: %s", run)
	}
	killed := "protocol: support\ncases:\n  - name: kb-off\n    request: {model: m, messages: [{role: user, content: hi}], tools: [{type: function, function: {name: search_kb}}]}\n" +
		"    answer: {body: {id: c, object: chat.completion, created: 1, model: m, choices: [{index: 0, finish_reason: stop, message: {role: assistant, content: ok}}]}}\n" +
		"    expect: {toolsRemoved: [search_kb], toolsKept: []}\n"
	if run := post("/admin/tests", "application/yaml", killed); !gjson.GetBytes(run, "passed").Bool() {
		t.Errorf("the config's kill switch is not in the API's run: %s", run)
	}
	return text
}

// withoutSource is a recorded case without the line that says where and when it was recorded.
func withoutSource(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.Contains(line, "Recorded by `promptgate test --record") && !strings.Contains(line, "Recorded by POST /admin/tests/record") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRecordRefusesBadInput: a request the log does not have, an --out that exists and a line that
// is not an event are refused, each named.
func TestRecordRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	events := writeFile(t, dir, "e.jsonl", `{"time":"2026-01-01T00:00:00Z","requestId":"pg-1","kind":"tool_call","protocol":"support","protocolVersion":1,"tool":"get_order","verdict":"allowed","reason":"","rule":"","argumentsSha256":"`+strings.Repeat("a", 64)+`"}`+"\nnot json\n")
	if _, _, err := runCmd(t, nil, "", "test", "--record", "pg-1", "--events", events); err == nil || !strings.Contains(err.Error(), events+":2: not a decision event") {
		t.Errorf("a bad line: %v", err)
	}
	good := writeFile(t, dir, "g.jsonl", strings.SplitN(readString(t, events), "\n", 2)[0]+"\n")
	if _, _, err := runCmd(t, nil, "", "test", "--record", "pg-2", "--events", good); err == nil || !strings.Contains(err.Error(), `no decision of request "pg-2"`) {
		t.Errorf("an unknown request: %v", err)
	}
	if _, _, err := runCmd(t, nil, "", "test", "--record", "pg-1", "--events", good, "--out", good); exitCode(err) != 2 || !strings.Contains(err.Error(), "the file exists") {
		t.Errorf("--out that exists: %v", err)
	}
	missing := filepath.Join(dir, "none.db")
	if _, _, err := runCmd(t, nil, "", "test", "--record", "pg-1", "--db", missing); err == nil || !strings.Contains(err.Error(), "none.audit.db") {
		t.Errorf("no ring: %v", err)
	}
	out, _, err := runCmd(t, nil, "", "test", "--record", "pg-1", "--events", good, "--path", "/v1/messages")
	if err != nil || !strings.Contains(out, "path: /v1/messages\n") || !strings.Contains(out, `"type":"tool_use","id":"toolu_1","name":"get_order"`) {
		t.Errorf("--path /v1/messages: %v\n%s", err, out)
	}
}

// TestRecordOnEverySurface: a recording written for each route (--path) is a case of that API that
// replays the logged decisions: a body, or one event of a Gemini stream.
func TestRecordOnEverySurface(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "pg.db")
	if _, _, err := runCmd(t, nil, "", "protocols", "push", "--create", "--activate", "--db", db, supportFile(t)); err != nil {
		t.Fatal(err)
	}
	event := func(kind, tool, verdict, rule, args string) string {
		e := audit.Event{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), RequestID: "pg-7", Kind: kind, Protocol: "support",
			ProtocolVersion: 1, Tool: tool, Verdict: verdict, Rule: rule}
		e = e.WithArguments([]byte(args), true)
		b, _ := json.Marshal(e)
		return string(b)
	}
	events := writeFile(t, dir, "e.jsonl", strings.Join([]string{
		event(audit.KindToolRemoved, "issue_refund", audit.VerdictRemoved, "", ""),
		event(audit.KindToolCall, "get_order", audit.VerdictBlocked, "order-id", `{"order_id": "12345"}`),
		event(audit.KindToolCall, "create_ticket", audit.VerdictAllowed, "", `{"priority":"low",  "body":"two  spaces"}`),
		event(audit.KindToolCall, "issue_refund", audit.VerdictBlocked, "", `{}`),
	}, "\n")+"\n")
	for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages",
		"/v1beta/models/gemini-2.5-flash:generateContent", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"} {
		out, _, err := runCmd(t, nil, "", "test", "--record", "pg-7", "--events", events, "--path", path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		file := writeFile(t, t.TempDir(), "r.test.yaml", out)
		if got, errOut, err := runCmd(t, nil, "", "test", "-v", "--db", db, file); err != nil || strings.Count(got, "\n    call ") != 3 {
			t.Errorf("%s: %v\n%s%s\n%s", path, err, got, errOut, out)
		}
	}
}
