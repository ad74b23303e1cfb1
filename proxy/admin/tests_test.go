package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/policytest"
	"github.com/promptgate/promptgate/store"
)

// testsFixture is the admin API with policy tests on (the default deployment) and the example
// support protocol stored and active.
func testsFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, fixtureOpts{token: "t", options: func(o *Options) {
		o.Tests = &policytest.Config{Settings: assembly.DefaultSettings()}
	}})
	f.activateExample(t, "support")
	return f
}

// activateExample stores the example protocol NAME (examples/protocols/NAME.json) and activates it.
func (f *fixture) activateExample(t *testing.T, name string) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "..", "examples", "protocols", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := f.st.AddVersion(ctx, store.KindProtocol, body, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Activate(ctx, store.KindProtocol, name, v); err != nil {
		t.Fatal(err)
	}
}

// readSupportCases is the case file of the stored support protocol that policytest's tests use too:
// lookup passes; wrong-expectation expects a release of a call the protocol blocks (line 14).
func readSupportCases(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "policytest", "testdata", "support-stored.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// asJSON is a YAML case file as indented JSON (so that its lines are lines of its own).
func asJSON(t *testing.T, src string) string {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPolicyTestsOverTheAPI: a case file posted as YAML or as JSON runs against the stored
// protocol; the answer names each case, whether it passed, each failed expectation with its line
// and field, and what was decided; run= picks cases by name.
func TestPolicyTestsOverTheAPI(t *testing.T) {
	supportCases := readSupportCases(t)
	t.Parallel()
	f := testsFixture(t)
	b := f.ok(http.StatusOK, "POST", "/admin/tests", supportCases, "Content-Type", "application/yaml")
	if gjson.GetBytes(b, "passed").Bool() || gjson.GetBytes(b, "total").Int() != 2 || gjson.GetBytes(b, "failed").Int() != 1 {
		t.Fatalf("summary: %s", b)
	}
	pass, fail := gjson.GetBytes(b, "cases.0"), gjson.GetBytes(b, "cases.1")
	if pass.Get("name").String() != "lookup" || !pass.Get("passed").Bool() || pass.Get("failures.#").Int() != 0 || pass.Get("mistakes").Raw != "[]" ||
		!strings.Contains(pass.Get("decided").Raw, "call 1: get_order id call_1: released") {
		t.Errorf("the passing case: %s", pass.Raw)
	}
	if fail.Get("name").String() != "wrong-expectation" || fail.Get("passed").Bool() || fail.Get("failures.#").Int() != 1 ||
		fail.Get("failures.0.line").Int() != 14 || fail.Get("failures.0.field").String() != "cases[1].expect.calls[0]" ||
		fail.Get("failures.0.message").String() != "call get_order id call_1: got blocked by tool_call rule order-id: rule order-id: order_id does not match the pattern, want released" {
		t.Errorf("the failing case: %s", fail.Raw)
	}
	if !strings.Contains(fail.Get("decided").Raw, "under protocol support (the active version)") {
		t.Errorf("decided: %s", fail.Get("decided").Raw)
	}
	// The same file as JSON; run= keeps the case it matches.
	b = f.ok(http.StatusOK, "POST", "/admin/tests?run=^look", asJSON(t, supportCases))
	if !gjson.GetBytes(b, "passed").Bool() || gjson.GetBytes(b, "cases.#").Int() != 1 || gjson.GetBytes(b, "cases.0.name").String() != "lookup" {
		t.Errorf("JSON, run=^look: %s", b)
	}
	b = f.ok(http.StatusOK, "POST", "/admin/tests?run=nothing-is-called-this", supportCases, "Content-Type", "application/yaml; charset=utf-8")
	if string(b) != `{"passed":true,"total":0,"failed":0,"cases":[]}`+"\n" {
		t.Errorf("run matching nothing: %s", b)
	}
	// A stored version by number: version 1 is the one stored.
	b = f.ok(http.StatusOK, "POST", "/admin/tests?run=lookup", strings.Replace(supportCases, "protocol: support\n", "protocol: support@1\n", 1), "Content-Type", "application/yaml")
	if !gjson.GetBytes(b, "passed").Bool() {
		t.Errorf("support@1: %s", b)
	}
}

// TestPolicyTestsRefuseBadInput: every bad form of a request to POST /admin/tests is refused with
// its status and code, and nothing is run; a case file's problems are listed as the CLI names them,
// line and field.
func TestPolicyTestsRefuseBadInput(t *testing.T) {
	supportCases := readSupportCases(t)
	t.Parallel()
	f := testsFixture(t)
	yamlType := []string{"Content-Type", "application/yaml"}
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		code, param              string
	}{
		{"GET", "GET", "/admin/tests", "", nil, 405, "method_not_allowed", ""},
		{"PUT", "PUT", "/admin/tests", supportCases, nil, 405, "method_not_allowed", ""},
		{"no token", "POST", "/admin/tests", supportCases, []string{"Authorization", "", "Content-Type", "application/yaml"}, 401, "unauthorized", ""},
		{"wrong token", "POST", "/admin/tests", supportCases, []string{"Authorization", "Bearer nope", "Content-Type", "application/yaml"}, 401, "unauthorized", ""},
		{"text/plain", "POST", "/admin/tests", supportCases, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", ""},
		{"application/xml", "POST", "/admin/tests", supportCases, []string{"Content-Type", "application/xml"}, 415, "unsupported_media_type", "Content-Type"},
		{"no content type", "POST", "/admin/tests", supportCases, []string{"Content-Type", ""}, 415, "unsupported_media_type", "Content-Type"},
		{"missing body", "POST", "/admin/tests", "", yamlType, 400, "invalid_request", ""},
		{"blank body", "POST", "/admin/tests", " \n", nil, 400, "invalid_request", ""},
		{"oversize", "POST", "/admin/tests", "cases: []\n# " + strings.Repeat("a", MaxBodyBytes), yamlType, 413, "body_too_large", ""},
		{"YAML sent as JSON", "POST", "/admin/tests", supportCases, nil, 400, "invalid_json", ""},
		{"JSON with a key twice", "POST", "/admin/tests", `{"cases": [], "cases": []}`, nil, 400, "invalid_json", ""},
		{"bad run", "POST", "/admin/tests?run=(", supportCases, yamlType, 400, "invalid_request", "run"},
		{"unknown parameter", "POST", "/admin/tests?verbose=1", supportCases, yamlType, 400, "invalid_request", "verbose"},
		{"token in the query", "POST", "/admin/tests?token=t", supportCases, yamlType, 400, "token_in_query", "token"},
	} {
		e := f.fails(c.status, c.code, c.method, c.path, c.body, c.hdr...)
		if e.Get("param").String() != c.param {
			t.Errorf("%s: param %s, want %q (%s)", c.name, e.Get("param").Raw, c.param, e.Raw)
		}
	}

	if e := f.fails(415, "unsupported_media_type", "POST", "/admin/tests", supportCases, "Content-Type", "text/yaml"); !strings.Contains(e.Get("message").String(), "application/yaml or application/json") {
		t.Errorf("415 names the types: %s", e.Raw)
	}

	// The case file's own problems: 400 invalid_case_file, each "LINE: FIELD: MESSAGE" as the CLI
	// prints it (without a file name), also as data.
	replace := func(old, new string) string {
		if !strings.Contains(supportCases, old) {
			t.Fatalf("the case file has no %q", old)
		}
		return strings.Replace(supportCases, old, new, 1)
	}
	for _, c := range []struct{ name, body, want string }{
		{"bad YAML", "cases: [\n  - name: x\n", "not valid YAML: line "},
		{"unknown field", replace("    expect:\n      calls: [{id: call_1, outcome: released}]\n  - name: wrong", "    expct: {}\n    expect:\n      calls: [{id: call_1, outcome: released}]\n  - name: wrong"),
			"7: cases[0].expct: unknown key; valid keys here: name, note, protocol, path, headers, request, requestFile, answer, answers, expect"},
		{"a protocol file", replace("protocol: support\n", "protocol: {file: ../../examples/protocols/support.json}\n"),
			"1: protocol.file: the admin API reads no file: name a stored protocol (ID or ID@VERSION); push the file first with `promptgate protocols push`"},
		{"a request file", replace(`    request: {model: m, messages: [{role: user, content: "Where is A-123456?"}], tools: [{type: function, function: {name: get_order, parameters: {type: object}}}]}`,
			"    requestFile: /etc/passwd"), "4: cases[0].requestFile: the admin API reads no file: put the body in request"},
		{"a version the store lacks", replace("protocol: support\n", "protocol: support@7\n"), "1: protocol: protocol support@7 is not in the store"},
		{"a protocol the store lacks", replace("protocol: support\n", "protocol: nosuch\n"), "1: protocol: protocol nosuch (the active version) is not in the store"},
	} {
		resp, b := f.do("POST", "/admin/tests", c.body, "Content-Type", "application/yaml")
		e := assertError(t, resp, b, 400, "invalid_case_file")
		if msg := e.Get("message").String(); !strings.HasPrefix(msg, "the case file has ") || !strings.Contains(msg, "nothing was run:\n"+c.want) {
			t.Errorf("%s: message %q, want a line %q", c.name, msg, c.want)
		}
		var parts []string
		for _, k := range []string{"line", "field", "message"} {
			if v := e.Get("problems.0." + k).String(); v != "" {
				parts = append(parts, v)
			}
		}
		if !strings.HasPrefix(strings.Join(parts, ": "), c.want) {
			t.Errorf("%s: problems %s", c.name, e.Get("problems").Raw)
		}
	}

	// Without the deployment's config for tests, the endpoint is not there.
	g := newFixture(t, fixtureOpts{})
	g.fails(404, "not_found", "POST", "/admin/tests", supportCases, "Content-Type", "application/yaml")
}

// toolCallsUpstream answers every request with calls of get_order (order id 12345, which the
// support protocol blocks) and create_ticket (released).
func toolCallsUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	u := &recordingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[`+
			`{"id":"call_1","type":"function","function":{"name":"get_order","arguments":"{\"order_id\":\"12345\"}"}},`+
			`{"id":"call_2","type":"function","function":{"name":"create_ticket","arguments":"{\"priority\":\"low\",\"body\":\"Parcel damaged\"}"}}]}}]}`)
	}))
	t.Cleanup(u.Close)
	return u
}

// TestRecordOverTheAPIReplays: the proxy decides a request; POST /admin/tests/record writes a case
// from the audit ring's events of it, as `promptgate test --record` does; posted back to POST
// /admin/tests, the case passes; on another route the case is of that route's API.
func TestRecordOverTheAPIReplays(t *testing.T) {
	t.Parallel()
	f := testsFixture(t)
	up := toolCallsUpstream(t)
	u, err := url.Parse(up.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(proxy.Options{Engine: f.engine, Upstreams: map[string]proxy.Upstream{"openai": {URL: u}}, Audit: f.ring, AuditArguments: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	resp, body := chat(t, ts, `{"model":"m","messages":[{"role":"user","content":"My parcel A-123456 arrived broken."}],"tools":[`+
		`{"type":"function","function":{"name":"get_order","parameters":{"type":"object"}}},`+
		`{"type":"function","function":{"name":"create_ticket","parameters":{"type":"object"}}},`+
		`{"type":"function","function":{"name":"issue_refund","parameters":{"type":"object"}}}]}`, map[string]string{"X-Promptgate-Protocol": "support"})
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != 200 || id == "" || strings.Contains(string(body), "get_order") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	b := f.ok(http.StatusOK, "POST", "/admin/tests/record", `{"requestId":`+jsonQuote(id)+`}`)
	text := gjson.GetBytes(b, "caseFile").String()
	if gjson.GetBytes(b, "requestId").String() != id || gjson.GetBytes(b, "path").String() != "/v1/chat/completions" {
		t.Fatalf("reply: %s", b)
	}
	for _, want := range []string{"protocol: support@1\n", "name: " + id + "\n", "Recorded by POST /admin/tests/record from the server's audit ring on ",
		"toolsRemoved:\n        - issue_refund\n", "outcome: blocked", "rule: order-id", "argumentsSha256: " + audit.ArgsDigest([]byte(`{"order_id":"12345"}`))} {
		if !strings.Contains(text, want) {
			t.Errorf("the recorded case lacks %q:\n%s", want, text)
		}
	}
	run := f.ok(http.StatusOK, "POST", "/admin/tests", text, "Content-Type", "application/yaml")
	if !gjson.GetBytes(run, "passed").Bool() || gjson.GetBytes(run, "cases.#").Int() != 1 {
		t.Fatalf("the recorded case does not pass: %s\n%s", run, text)
	}
	b = f.ok(http.StatusOK, "POST", "/admin/tests/record", `{"requestId":`+jsonQuote(id)+`,"path":"/v1/messages"}`)
	if text := gjson.GetBytes(b, "caseFile").String(); !strings.Contains(text, "path: /v1/messages\n") || !strings.Contains(text, `"type":"tool_use","id":"toolu_1","name":"get_order"`) {
		t.Errorf("on /v1/messages:\n%s", text)
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestRecordRefusesBadInput: every bad form of a request to POST /admin/tests/record is refused
// with its status, code and param.
func TestRecordRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := testsFixture(t)
	ctx := context.Background()
	f.ring.Record(ctx, audit.Event{RequestID: "no-protocol", Kind: audit.KindToolCall, Tool: "x", Verdict: audit.VerdictAllowed})
	f.ring.Record(ctx, audit.Event{RequestID: "other-kinds", Kind: audit.KindStoredPrompt, Protocol: "support", Verdict: audit.VerdictAllowed})
	for _, c := range []struct {
		name, method, body string
		hdr                []string
		status             int
		code, param        string
	}{
		{"GET", "GET", "", nil, 405, "method_not_allowed", ""},
		{"no token", "POST", `{"requestId":"x"}`, []string{"Authorization", ""}, 401, "unauthorized", ""},
		{"YAML", "POST", `{"requestId":"x"}`, []string{"Content-Type", "application/yaml"}, 415, "unsupported_media_type", "Content-Type"},
		{"missing body", "POST", "", nil, 400, "invalid_request", "requestId"},
		{"empty requestId", "POST", `{"requestId":""}`, nil, 400, "invalid_request", "requestId"},
		{"requestId not a string", "POST", `{"requestId":7}`, nil, 400, "invalid_request", "requestId"},
		{"requestId with a control character", "POST", `{"requestId":"a\tb"}`, nil, 400, "invalid_request", "requestId"},
		{"requestId too long", "POST", `{"requestId":"` + strings.Repeat("a", 300) + `"}`, nil, 400, "invalid_request", "requestId"},
		{"unknown field", "POST", `{"requestId":"x","why":1}`, nil, 400, "invalid_request", "why"},
		{"not JSON", "POST", `{"requestId":`, nil, 400, "invalid_json", ""},
		{"oversize", "POST", `{"requestId":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, nil, 413, "body_too_large", ""},
		{"a path that is not a route", "POST", `{"requestId":"x","path":"/v1/embeddings"}`, nil, 400, "invalid_request", "path"},
		{"a parameter", "POST?x=1", `{"requestId":"x"}`, nil, 400, "invalid_request", "x"},
		{"unknown request id", "POST", `{"requestId":"pg-unknown"}`, nil, 404, "not_found", "requestId"},
		{"events without a protocol", "POST", `{"requestId":"no-protocol"}`, nil, 409, "not_recordable", "requestId"},
		{"no decision on a tool", "POST", `{"requestId":"other-kinds"}`, nil, 409, "not_recordable", "requestId"},
	} {
		method, path := c.method, "/admin/tests/record"
		if m, q, ok := strings.Cut(c.method, "?"); ok {
			method, path = m, path+"?"+q
		}
		e := f.fails(c.status, c.code, method, path, c.body, c.hdr...)
		if e.Get("param").String() != c.param {
			t.Errorf("%s: param %s, want %q (%s)", c.name, e.Get("param").Raw, c.param, e.Raw)
		}
	}
	// Without an audit ring there is nothing to record from.
	g := newFixture(t, fixtureOpts{noAudit: true})
	g.fails(404, "not_found", "POST", "/admin/tests/record", `{"requestId":"x"}`)
}

// payeeConversation is the case of examples/tests/payments.test.yaml in which a payment to a new
// payee is held and then confirmed by the user's reply, under the stored payments protocol.
func payeeConversation(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "tests", "payments.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "  - name: new-payee-held-then-confirmed\n")
	end := strings.Index(text, "\n  - name: known-payee-released\n")
	if start < 0 || end < start {
		t.Fatal("examples/tests/payments.test.yaml has no case new-payee-held-then-confirmed")
	}
	return "protocol: payments\ncases:\n" + text[start:end+1]
}

// TestPolicyTestsOverTheAPIRunFollowUps: a case whose follow-up replies with the code of the call
// it held runs in the serving instance too: the call is confirmed and the case passes; with a code
// the notice did not show, the call is held again (nothing reaches the client) and the case fails
// at the follow-up's expectations, named by line and field.
func TestPolicyTestsOverTheAPIRunFollowUps(t *testing.T) {
	t.Parallel()
	f := testsFixture(t)
	f.activateExample(t, "payments")
	src := payeeConversation(t)
	b := f.ok(http.StatusOK, "POST", "/admin/tests", src, "Content-Type", "application/yaml")
	c := gjson.GetBytes(b, "cases.0")
	if !gjson.GetBytes(b, "passed").Bool() || !strings.Contains(c.Get("decided").Raw, "then[0]:") ||
		!strings.Contains(c.Get("decided").Raw, "send_money id toolu_3: confirmed by confirm") {
		t.Fatalf("the confirmed case: %s", b)
	}
	wrong := strings.Replace(src, "Yes, pay it: {{code}}", "Yes, pay it: 0000-0000", 1)
	if wrong == src {
		t.Fatal("the example's reply is not \"Yes, pay it: {{code}}\"")
	}
	b = f.ok(http.StatusOK, "POST", "/admin/tests", wrong, "Content-Type", "application/yaml")
	c = gjson.GetBytes(b, "cases.0")
	held := c.Get(`failures.#(field=="cases[0].then[0].expect.calls[0]")`)
	if gjson.GetBytes(b, "passed").Bool() || held.Get("line").Int() == 0 || !strings.Contains(held.Get("message").String(), "got held") {
		t.Errorf("the wrong code: %s", b)
	}
	// A follow-up's requestFile is a file of the server's: refused, named.
	withFile := strings.Replace(src, "      - request:\n", "      - requestFile: /etc/passwd\n        body:\n", 1)
	resp, rb := f.do("POST", "/admin/tests", withFile, "Content-Type", "application/yaml")
	if e := assertError(t, resp, rb, 400, "invalid_case_file"); !strings.Contains(e.Get("message").String(),
		"cases[0].then[0].requestFile: the admin API reads no file: put the body in request") {
		t.Errorf("a follow-up's requestFile: %s", e.Raw)
	}
}
