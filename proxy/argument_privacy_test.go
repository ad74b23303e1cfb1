package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/promptgate/promptgate/policy/audit"
)

// The marker of argument content: a key and a value no reason, log line or stored event may hold.
const (
	secretKey = "SECRETKEY_q7zx"
	secretVal = "SECRETVAL_q7zx"
	secretTag = "q7zx" // never in a hex request id, hash or time
)

// privacyProtocol lets lookup through only when its q starts with "ok"; onViolation is mode.
func privacyProtocol(mode string) json.RawMessage {
	return json.RawMessage(`{"id": "p_` + mode + `", "promptTemplate": {"base": "base_tool_call_v2"}, "allowClientSelection": true,
	  "tools": {"allow": ["lookup"]},
	  "toolCalls": {"onViolation": "` + mode + `", "rules": [{"id": "ok-only", "tool": "lookup", "path": "q", "pattern": "^ok"}]}}`)
}

// privacySchema is lookup's declared schema: q a string, n "a" or "b", nothing else.
const privacySchema = `{"type":"object","properties":{"q":{"type":"string"},"n":{"enum":["a","b"]}},"additionalProperties":false}`

// privacyArgs are arguments that break each check, every one carrying the marker.
var privacyArgs = map[string]string{
	"additional property": `{"` + secretKey + `":"` + secretVal + `"}`,
	"enum":                `{"n":"` + secretVal + `"}`,
	"type":                `{"q":{"` + secretKey + `":1}}`,
	"rule":                `{"q":"` + secretVal + `"}`,
	"duplicate key":       `{"` + secretKey + `":1,"` + secretKey + `":2}`,
	"not json":            `{"q":"` + secretVal,
	"too deep":            `{"` + secretKey + `":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
	"not an object":       `["` + secretVal + `"]`,
}

// privacySurfaces are the client request and the upstream answer carrying one call of lookup with
// args, per surface and stream mode.
var privacySurfaces = []struct {
	name, path, request string
	answer              func(args string) (contentType, body string)
}{
	{"chat", PathChat, `{"model":"m","messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":` + privacySchema + `}}]}`,
		func(args string) (string, string) {
			return "application/json", completionWithCalls(`{"id":"call_1","type":"function","function":{"name":"lookup","arguments":` + jsonStr(args) + `}}`)
		}},
	{"chat stream", PathChat, `{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":` + privacySchema + `}}]}`,
		func(args string) (string, string) {
			half := len(args) / 2
			var b strings.Builder
			for _, c := range []string{
				chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":`+jsonStr(args[:half])+`}}]}`, ""),
				chunk(`{"tool_calls":[{"index":0,"function":{"arguments":`+jsonStr(args[half:])+`}}]}`, ""),
				chunk(`{}`, "tool_calls"), "[DONE]",
			} {
				b.WriteString("data: " + c + "\n\n")
			}
			return "text/event-stream", b.String()
		}},
	{"responses", PathResponses, `{"model":"gpt-4.1","input":"go","tools":[{"type":"function","name":"lookup","parameters":` + privacySchema + `}]}`,
		func(args string) (string, string) {
			return "application/json", responseJSON(fcItem("fc_1", "call_1", "lookup", args, "completed"))
		}},
	{"responses stream", PathResponses, `{"model":"gpt-4.1","stream":true,"input":"go","tools":[{"type":"function","name":"lookup","parameters":` + privacySchema + `}]}`,
		func(args string) (string, string) {
			return "text/event-stream", (&respEvents{}).created().call(0, "fc_1", "call_1", "lookup", args).completed()
		}},
	{"messages", PathMessages, `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"go"}],"tools":[{"name":"lookup","input_schema":` + privacySchema + `}]}`,
		func(args string) (string, string) {
			return "application/json", anthMessage("tool_use", toolUse("toolu_1", "lookup", args))
		}},
	{"messages stream", PathMessages, `{"model":"claude-sonnet-4-5","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"go"}],"tools":[{"name":"lookup","input_schema":` + privacySchema + `}]}`,
		func(args string) (string, string) {
			return "text/event-stream", (&anthEvents{}).start().tool(0, "toolu_1", "lookup", args).end("tool_use")
		}},
	// Gemini's args are a JSON value in the answer: arguments that are not JSON break the answer as
	// a whole.
	{"gemini", "/v1beta/models/m:generateContent", privacyGeminiRequest,
		func(args string) (string, string) { return "application/json", privacyGeminiAnswer(args) }},
	{"gemini stream", "/v1beta/models/m:streamGenerateContent?alt=sse", privacyGeminiRequest,
		func(args string) (string, string) {
			return "text/event-stream", "data: " + privacyGeminiAnswer(args) + "\r\n\r\n"
		}},
}

// privacyGeminiRequest declares lookup with privacySchema as its parametersJsonSchema.
const privacyGeminiRequest = `{"contents":[{"role":"user","parts":[{"text":"go"}]}],"tools":[{"functionDeclarations":[{"name":"lookup","parametersJsonSchema":` + privacySchema + `}]}]}`

// privacyGeminiAnswer is a GenerateContentResponse with one call of lookup with args.
func privacyGeminiAnswer(args string) string {
	return `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"lookup","args":` + args + `}}]},"finishReason":"STOP","index":0}],"responseId":"r1"}`
}

// TestNoArgumentContentInAuditOrLog: for every check a call can fail, on every surface, stream or
// not, and in every onViolation mode, no key or value of the arguments reaches the audit ring, the
// audit file or the log (debug level); with audit.includeArguments they are in the events'
// arguments field, and only there.
func TestNoArgumentContentInAuditOrLog(t *testing.T) {
	t.Parallel()
	for _, include := range []bool{false, true} {
		dir := t.TempDir()
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		ring, err := audit.OpenRing(filepath.Join(dir, "ring.db"), 10_000, log)
		if err != nil {
			t.Fatal(err)
		}
		jl, err := audit.OpenJSONL(filepath.Join(dir, "audit.jsonl"), log)
		if err != nil {
			t.Fatal(err)
		}
		var answer atomic.Pointer[[2]string]
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a := answer.Load()
			w.Header().Set("Content-Type", a[0])
			_, _ = io.WriteString(w, a[1])
		}))
		t.Cleanup(up.Close)
		e := testEngine(t, "defaultProtocol: p_refuse\n", nil, nil,
			[]json.RawMessage{privacyProtocol("refuse"), privacyProtocol("error"), privacyProtocol("audit")})
		e.log = log
		u := mustURL(t, up.URL+"/v1")
		ts := serveProxy(t, Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}, "gemini": {URL: mustURL(t, up.URL)}}, Log: log,
			Audit: audit.Multi{audit.Log{Logger: log}, ring, jl}, AuditArguments: include})

		requests := 0
		for _, sf := range privacySurfaces {
			for check, args := range privacyArgs {
				for _, mode := range []string{"refuse", "error", "audit"} {
					ct, body := sf.answer(args)
					answer.Store(&[2]string{ct, body})
					resp, b := postTo(t, ts, sf.path, sf.request, map[string]string{HeaderProtocol: "p_" + mode})
					requests++
					if mode != "audit" && strings.Contains(string(b), secretTag) {
						t.Errorf("include %v, %s, %s, %s: the client got the blocked arguments: %d %s", include, sf.name, check, mode, resp.StatusCode, b)
					}
				}
			}
		}
		if err := ring.Flush(); err != nil {
			t.Fatal(err)
		}
		events, err := ring.Query(context.Background(), audit.Filter{Limit: audit.MaxQueryLimit, Kind: audit.KindToolCall})
		if err != nil {
			t.Fatal(err)
		}
		if err := ring.Close(); err != nil {
			t.Fatal(err)
		}
		if err := jl.Close(); err != nil {
			t.Fatal(err)
		}
		if len(events) < requests/2 {
			t.Fatalf("include %v: %d tool_call events for %d requests", include, len(events), requests)
		}
		if strings.Contains(logs.String(), secretTag) {
			t.Errorf("include %v: argument content in the log:\n%s", include, grepLines(logs.String(), secretTag))
		}
		lines, err := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var fileEvents []audit.Event
		for line := range strings.Lines(string(lines)) {
			var ev audit.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("audit file line %q: %v", line, err)
			}
			fileEvents = append(fileEvents, ev)
		}
		withArgs := 0
		for _, src := range []struct {
			name   string
			events []audit.Event
		}{{"ring", events}, {"file", fileEvents}} {
			for _, ev := range src.events {
				if strings.Contains(ev.Args, secretTag) {
					withArgs++
				}
				ev.Args = ""
				if b, _ := json.Marshal(ev); strings.Contains(string(b), secretTag) {
					t.Errorf("include %v: argument content in a %s event outside arguments: %s", include, src.name, b)
				}
			}
		}
		if include != (withArgs > 0) {
			t.Errorf("include %v: %d events carry the arguments", include, withArgs)
		}
		if !include {
			// Nothing anywhere in the files: not in a reason, not in a page bbolt left behind.
			for _, f := range []string{"ring.db", "audit.jsonl"} {
				if b, _ := os.ReadFile(filepath.Join(dir, f)); bytes.Contains(b, []byte(secretTag)) {
					t.Errorf("%s holds argument content", f)
				}
			}
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

// TestAuditToolNameBounded: the name of a tool the model made up is recorded as the notice shows
// it: escaped and cut to 64 characters, whatever its length or its characters.
func TestAuditToolNameBounded(t *testing.T) {
	t.Parallel()
	name := "x\u202e\n" + strings.Repeat("y", 5000)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, completionWithCalls(`{"id":"call_1","type":"function","function":{"name":`+jsonStr(name)+`,"arguments":"{}"}}`))
	})
	ts, rec := argsProxy(t, up.URL, false)
	if resp, b := postJSON(t, ts, vetRequest, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	events := toolCallEvents(t, rec)
	if len(events) != 1 {
		t.Fatalf("events %v", events)
	}
	for tool := range events {
		if len(tool) > 100 || strings.ContainsAny(tool, "\u202e\n") || !strings.HasPrefix(tool, `"x\u202e\n`) {
			t.Errorf("audit tool %q (%d bytes): want it escaped and cut", tool, len(tool))
		}
	}
}
