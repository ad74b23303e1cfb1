package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/proxy/policytest"
)

// policyTestDir is the folder of this package's case files.
const policyTestDir = "testdata/policytest"

// TestExamplesPolicyTestsPass runs `promptgate test` over examples/, as CI does: every case of the
// example protocols passes, each is reported on a line of its own, and every example protocol has
// its case file. (What the cases cover between them is policytest's TestExamplesCoverTheOutcomes.)
func TestExamplesPolicyTestsPass(t *testing.T) {
	t.Parallel()
	out, errOut, err := runCmd(t, nil, "", "test", "-v", examplesDir)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, errOut)
	}
	files, err := findCaseFiles([]string{examplesDir})
	if err != nil {
		t.Fatal(err)
	}
	cases, problems := policytest.Load(files, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	for _, c := range cases {
		if !strings.Contains(out, "--- PASS: "+c.Name+" (") {
			t.Errorf("no PASS line for %s", c.Name)
		}
	}
	if !strings.HasSuffix(out, "PASS\nok  \t"+strconv.Itoa(len(cases))+" cases\t"+lastField(out)+"\n") {
		t.Errorf("the summary line:\n%s", out)
	}
	for name := range exampleFiles(t, "protocols") {
		if _, err := os.Stat(filepath.Join(examplesDir, "tests", name+policytest.Suffixes()[0])); err != nil {
			t.Errorf("examples/protocols/%s.json has no tests: %v", name, err)
		}
	}
}

// lastField is the last tab-separated field of the output's last line (the time).
func lastField(out string) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	f := strings.Split(lines[len(lines)-1], "\t")
	return f[len(f)-1]
}

// TestPolicyTestReportsAFailingCase: a case whose expectations the proxy does not meet is reported
// FAIL, with each expectation not met named by file, line and field, the others still PASS, the
// exit status is 1, and the JUnit file says the same.
func TestPolicyTestReportsAFailingCase(t *testing.T) {
	t.Parallel()
	junit := filepath.Join(t.TempDir(), "junit.xml")
	file := filepath.Join(policyTestDir, "failing.test.yaml")
	out, _, err := runCmd(t, nil, "", "test", "--junit", junit, policyTestDir)
	if err == nil || exitCode(err) != 1 {
		t.Fatalf("exit %d (%v), want 1\n%s", exitCode(err), err, out)
	}
	for _, want := range []string{
		"--- PASS: failing/passes (",
		"--- FAIL: failing/wrongly-expects-release (",
		file + ":16: cases[1].expect.toolsKept: not kept: issue_refund (kept: get_order, create_ticket)\n",
		file + `:18: cases[1].expect.prompt.contains[0]: the layered prompt does not contain "- Refund every order at once."` + "\n",
		file + ":19: cases[1].expect.calls[0]: call get_order id call_1: got blocked by tool_call rule order-id: rule order-id: order_id does not match the pattern, want released\n",
		"FAIL\nFAIL\t1 of 2 cases\t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if doc.Tests != 2 || doc.Failures != 1 || doc.Errors != 0 || len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != 2 {
		t.Fatalf("junit: %+v", doc)
	}
	pass, fail := doc.Suites[0].Cases[0], doc.Suites[0].Cases[1]
	if pass.Name != "passes" || pass.Failure != nil || fail.Name != "wrongly-expects-release" || fail.Classname != "failing" ||
		fail.Failure == nil || !strings.Contains(fail.Failure.Text, "cases[1].expect.calls[0]") || fail.Failure.Message != "3 expectation(s) not met" {
		t.Errorf("junit cases: %+v", doc.Suites[0].Cases)
	}
}

// TestPolicyTestRunFilter: -run selects cases by their full name; a filter that matches nothing
// runs nothing and says so; a bad regular expression is a usage error.
func TestPolicyTestRunFilter(t *testing.T) {
	t.Parallel()
	out, _, err := runCmd(t, nil, "", "test", "-run", "^failing/passes$", policyTestDir)
	if err != nil || strings.Count(out, "--- ") != 1 || !strings.Contains(out, "ok  \t1 cases") {
		t.Errorf("-run one case: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, nil, "", "test", "-run", "wrongly", policyTestDir)
	if exitCode(err) != 1 || strings.Contains(out, "failing/passes") {
		t.Errorf("-run the failing case: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, nil, "", "test", "-run", "nothing-is-called-this", policyTestDir)
	if err != nil || !strings.Contains(out, "no case matches") {
		t.Errorf("-run that matches nothing: %v\n%s", err, out)
	}
	_, _, err = runCmd(t, nil, "", "test", "-run", "(", policyTestDir)
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "-run \"(\": not a regular expression") {
		t.Errorf("-run (: %v", err)
	}
}

// supportFile is the example support protocol, by an absolute path (case files in temporary folders
// name it).
func supportFile(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(examplesDir, "protocols", "support.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// goodCase is a case file that passes, for the bad-input table to break one thing of.
func goodCase(protocol string) string {
	return `protocol: {file: ` + protocol + `}
cases:
  - name: lookup
    request:
      model: m
      messages: [{role: user, content: "Where is A-123456?"}]
      tools: [{type: function, function: {name: get_order, parameters: {type: object}}}]
    answer:
      body: {id: c, object: chat.completion, created: 1, model: m, choices: [{index: 0, finish_reason: tool_calls, message: {role: assistant, content: null, tool_calls: [{id: call_1, type: function, function: {name: get_order, arguments: '{"order_id": "A-123456"}'}}]}}]}
    expect:
      prompt: {contains: ["Look up only orders"]}
      calls: [{id: call_1, outcome: released}]
`
}

// TestPolicyTestRefusesBadInput: every bad form of a case file is refused with exit status 2 and a
// message that names the file, the line and the field — while reading (nothing is run) or, for what
// only running shows, on the case's line.
func TestPolicyTestRefusesBadInput(t *testing.T) {
	t.Parallel()
	proto := supportFile(t)
	good := goodCase(proto)
	if out, errOut, err := runCmd(t, nil, "", "test", writeFile(t, t.TempDir(), "good.test.yaml", good)); err != nil {
		t.Fatalf("the good case: %v\n%s%s", err, out, errOut)
	}
	replace := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("the good case has no %q", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	const chatAnswer = `body: {id: c, object: chat.completion, created: 1, model: m, choices: [{index: 0, finish_reason: tool_calls, message: {role: assistant, content: null, tool_calls: [{id: call_1, type: function, function: {name: get_order, arguments: '{"order_id": "A-123456"}'}}]}}]}`
	for _, tc := range []struct {
		name, file, want string
	}{
		{"malformed YAML", "cases: [\n  - name: x\n", `: not valid YAML: line `},
		{"empty file", "", ": the file is empty"},
		{"unknown key of a case", replace("    expect:", "    expct: {}\n    expect:"), ":10: cases[0].expct: unknown key; valid keys here: name, note, protocol,"},
		{"unknown key of a call", replace("outcome: released}", "outcome: released, verdict: allowed}"), ":12: cases[0].expect.calls[0].verdict: unknown key"},
		{"unknown key at the top", "protocols: x\n" + good, ":1: protocols: unknown key; valid keys here: protocol, path, headers, cases"},
		{"a key given twice", replace("    expect:", "    name: again\n    expect:"), ":10: cases[0].name: given twice"},
		{"missing protocol", strings.Replace(good, "protocol: {file: "+proto+"}\n", "", 1), ":2: cases[0].protocol: missing"},
		{"protocol file that does not exist", replace(proto, proto+".missing"), ":1: protocol: open " + proto + ".missing: no such file"},
		{"protocol file that is not a protocol", replace(proto, filepath.Join(filepath.Dir(proto), "..", "requests", "support-order.json")), `:1: protocol: `},
		{"protocol id that is not an id", replace("{file: "+proto+"}", `"support/v2"`), `:1: protocol: "support/v2" is not a protocol id`},
		{"bad regexp", replace(`prompt: {contains: ["Look up only orders"]}`, `prompt: {matches: ["Look up (only"]}`), ":11: cases[0].expect.prompt.matches[0]: not a regular expression (Go RE2 syntax): missing closing )"},
		{"unknown outcome", replace("outcome: released", "outcome: allowed"), `:12: cases[0].expect.calls[0].outcome: "allowed": give one of released, audited, blocked, held, confirmed`},
		{"answer body that is not JSON", replace(chatAnswer, `body: '{"id": "c",'`), ":9: cases[0].answer.body: the string is not valid JSON"},
		{"answer of another API", replace("    request:", "    path: /v1/messages\n    request:"), ":10: cases[0].answer: not an Anthropic Messages answer (type): the request goes to /v1/messages"},
		{"answer with body and events", replace(chatAnswer, chatAnswer+"\n      events: [{data: x}]"), ":9: cases[0].answer: give exactly one of body"},
		{"[DONE] unquoted", replace(chatAnswer, "events: [{data: [DONE]}]"), `:9: cases[0].answer.events[0].data: [DONE] unquoted is a YAML list: write data: "[DONE]"`},
		{"request file that does not exist", replace("    request:\n      model: m\n      messages: [{role: user, content: \"Where is A-123456?\"}]\n      tools: [{type: function, function: {name: get_order, parameters: {type: object}}}]\n", "    requestFile: nowhere.json\n"), ":4: cases[0].requestFile: open "},
		{"no expectations", replace("    expect:\n      prompt: {contains: [\"Look up only orders\"]}\n      calls: [{id: call_1, outcome: released}]\n", ""), ":3: cases[0].expect: missing"},
		{"a path that is not a rewritten route", replace("    request:", "    path: /v1/embeddings\n    request:"), `:4: cases[0].path: "/v1/embeddings" is not a rewritten route`},
		{"a name that is not a name", replace("name: lookup", "name: look up"), `:3: cases[0].name: "look up": use 1 to 100 letters`},
		{"a follow-up's {{code}} with no held call before", replace("    expect:", "    then:\n      - request: {model: m, messages: [{role: user, content: \"{{code}}\"}]}\n        expect: {status: 200}\n    expect:"), ":11: cases[0].then[0].request: {{code}} and {{notice}} are the code and the notice of the call held last before this step, and no step before it expects a held call"},
		{"a follow-up's unknown key", replace("    expect:", "    then:\n      - name: again\n        request: {model: m}\n        expect: {status: 200}\n    expect:"), ":11: cases[0].then[0].name: unknown key; valid keys here: headers, request, requestFile, answer, answers, expect"},
		{"no follow-ups in then", replace("    expect:", "    then: []\n    expect:"), ":10: cases[0].then: the list is empty"},
		// What only running the case shows.
		{"expectation naming a call that does not exist", replace("{id: call_1, outcome: released}", "{id: call_1, outcome: released}, {id: call_9, outcome: blocked}"), `:12: cases[0].expect.calls[1].id: the answer holds no call with id "call_9" (the calls decided: get_order id call_1) (a mistake of the case)`},
		{"expectation naming a tool that is never called", replace("{id: call_1, outcome: released}", "{id: call_1, outcome: released}, {tool: create_ticket, outcome: blocked}"), `:12: cases[0].expect.calls[1].tool: the answer holds no call with tool "create_ticket"`},
		{"a stream for a request that asked for none", replace(chatAnswer, `events: [{data: '{"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}'}, {data: "[DONE]"}]`), ":9: cases[0].answer: the request asks for no stream, and the answer is an event stream"},
		{"no answer where the request goes upstream", replace("    answer:\n      "+chatAnswer+"\n", ""), ":3: cases[0].answer: missing: the proxy sent the request upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := writeFile(t, t.TempDir(), "bad.test.yaml", tc.file)
			out, errOut, err := runCmd(t, nil, "", "test", file)
			if exitCode(err) != 2 {
				t.Fatalf("exit %d (%v), want 2\n%s%s", exitCode(err), err, out, errOut)
			}
			if all := out + errOut; !strings.Contains(all, file+tc.want) {
				t.Errorf("want %q in:\n%s", file+tc.want, all)
			}
		})
	}
}

// TestPolicyTestRefusesBadStreams: a stream the proxy cannot read as the route's — an event that is
// not JSON, a stream that ends before its last event — is a mistake of the case (exit 2), named at
// its answer.
func TestPolicyTestRefusesBadStreams(t *testing.T) {
	t.Parallel()
	head := "protocol: {file: " + supportFile(t) + "}\ncases:\n  - name: s\n    request: {model: m, stream: true, messages: [{role: user, content: hi}], tools: [{type: function, function: {name: get_order}}]}\n    expect: {status: 200}\n    answer:\n      events:\n"
	for name, tc := range map[string]struct{ events, want string }{
		"an event that is not JSON": {
			`        - data: '{"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "get_order", "arguments": ""}}]}}]}'
        - data: '{"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]'
        - data: "[DONE]"
`, ":7: cases[0].answer: an event of the stream is not valid JSON"},
		"a stream cut short": {
			`        - data: '{"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]}'
`, ":7: cases[0].answer: the stream ends before the last event of a /v1/chat/completions stream (the proxy ended it as truncated)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			file := writeFile(t, t.TempDir(), "s.test.yaml", head+tc.events)
			out, errOut, err := runCmd(t, nil, "", "test", file)
			if exitCode(err) != 2 || !strings.Contains(out, file+tc.want) || !strings.Contains(out, "--- FAIL: s/s (") {
				t.Errorf("exit %d (%v), want 2 and %q:\n%s%s", exitCode(err), err, tc.want, out, errOut)
			}
		})
	}
}

// TestPolicyTestCommandLine: what is wrong with the command line itself is exit 2, named.
func TestPolicyTestCommandLine(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"test", empty}, "test: no case files (*.test.yaml) in " + empty},
		{[]string{"test", filepath.Join(empty, "nothing.test.yaml")}, "no such file"},
		{[]string{"test", "--record", "pg-1", policyTestDir}, "test --record takes no DIR"},
		{[]string{"test", "--record", "pg-1", "-v"}, "--v goes with test, not with --record"},
		{[]string{"test", "--out", "x.yaml", policyTestDir}, "--out goes with --record, not with test"},
		{[]string{"test", "--record", "pg-1", "--path", "/v1/embeddings"}, `--path "/v1/embeddings": use one of`},
	} {
		_, _, err := runCmd(t, nil, "", tc.args...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: exit %d %v, want 2 and %q", tc.args, exitCode(err), err, tc.want)
		}
	}
}

// TestPolicyTestProtocolFromTheStore: a case names a stored protocol by id (the active version) or
// by id@version, read from the DB as the other commands read it; an id the store lacks is refused
// naming the field; without --create no DB is made, and cases that name only files open none.
func TestPolicyTestProtocolFromTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "pg.db")
	support, err := os.ReadFile(supportFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, nil, "", "protocols", "push", "--create", "--activate", "--db", db, supportFile(t)); err != nil {
		t.Fatal(err)
	}
	// Version 2 lets every order id through; it is stored, not active.
	v2 := strings.Replace(string(support), `"pattern": "^A-[0-9]{6}$"`, `"pattern": "."`, 1)
	if _, _, err := runCmd(t, nil, "", "protocols", "push", "--db", db, writeFile(t, dir, "v2.json", v2)); err != nil {
		t.Fatal(err)
	}
	cases := func(protocol, outcome string) string {
		return strings.NewReplacer("{file: "+supportFile(t)+"}", protocol, `"A-123456"}'`, `"12345"}'`, "outcome: released", "outcome: "+outcome,
			`messages: [{role: user, content: "Where is A-123456?"}]`, `messages: [{role: user, content: "Where is 12345?"}]`).Replace(goodCase(supportFile(t)))
	}
	for _, tc := range []struct{ protocol, outcome string }{{"support", "blocked"}, {"support@1", "blocked"}, {"support@2", "released"}, {"{id: support, version: 2}", "released"}} {
		file := writeFile(t, t.TempDir(), "store.test.yaml", cases(tc.protocol, tc.outcome))
		out, errOut, err := runCmd(t, nil, "", "test", "-v", "--db", db, file)
		if err != nil || !strings.Contains(errOut, "promptgate: using bbolt:"+db) {
			t.Errorf("%s: %v\n%s%s", tc.protocol, err, out, errOut)
		}
	}
	file := writeFile(t, t.TempDir(), "nosuch.test.yaml", cases("support@7", "blocked"))
	if _, errOut, err := runCmd(t, nil, "", "test", "--db", db, file); exitCode(err) != 2 || !strings.Contains(errOut, file+":1: protocol: protocol support@7 is not in the store") {
		t.Errorf("a version the store lacks: %v\n%s", err, errOut)
	}
	missing := filepath.Join(dir, "nodb", "pg.db")
	if _, _, err := runCmd(t, nil, "", "test", "--db", missing, file); err == nil || !strings.Contains(err.Error(), missing+" (--db) does not exist") {
		t.Errorf("no DB: %v", err)
	}
	if out, _, err := runCmd(t, nil, "", "test", "--db", missing, writeFile(t, t.TempDir(), "f.test.yaml", goodCase(supportFile(t)))); err != nil {
		t.Errorf("cases of files with a --db that does not exist: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Error("a DB was created")
	}
}

// TestCaseNamesAreFolderPaths: a case's name is its file's path under the folder tested, without
// the suffix.
func TestCaseNamesAreFolderPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sub := filepath.Join(dir, "team", "pay")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, sub, "refunds.test.yml", "x")
	writeFile(t, filepath.Join(dir, ".git"), "hidden.test.yaml", "x")
	writeFile(t, dir, "notes.yaml", "x")
	files, err := findCaseFiles([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"team/pay/refunds"}) {
		t.Errorf("names %q", names)
	}
}

// TestPolicyDocCaseFileRuns: the case file docs/policy.md shows passes, put beside the example
// tests as its comment names it.
func TestPolicyDocCaseFileRuns(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(inRepo("docs/policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := string(b)[strings.Index(string(b), "### A case file"):]
	blocks := codeBlocks(sec)
	if len(blocks) == 0 || blocks[0].lang != "yaml" || !strings.HasPrefix(blocks[0].text, "# payments.test.yaml\n") {
		t.Fatalf("the section's first block is not the case file: %+v", blocks)
	}
	abs, err := filepath.Abs(filepath.Join(examplesDir, "protocols", "payments.json"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(blocks[0].text, "{file: ../protocols/payments.json}", "{file: "+abs+"}", 1)
	file := writeFile(t, t.TempDir(), "payments.test.yaml", text)
	if out, errOut, err := runCmd(t, nil, "", "test", file); err != nil || !strings.Contains(out, "--- PASS: payments/new-payee-held") {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
}

// TestPolicyTestModes: the support protocol in each onViolation mode — error (the client gets 403
// tool_call_blocked), audit (the call is released and marked audited), continue (promptgate asks
// the upstream again and each answer of the case is played in turn; one answer too few fails the
// case).
func TestPolicyTestModes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	support, err := os.ReadFile(supportFile(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"error", "audit", "continue"} {
		writeFile(t, dir, mode+".json", strings.Replace(string(support), `"onViolation": "refuse"`, `"onViolation": "`+mode+`"`, 1))
	}
	answer := func(id, orderID string) string {
		return `{body: {id: c, object: chat.completion, created: 1, model: m, choices: [{index: 0, finish_reason: tool_calls, message: {role: assistant, content: null, tool_calls: [{id: ` + id + `, type: function, function: {name: get_order, arguments: '{"order_id": "` + orderID + `"}'}}]}}]}}`
	}
	request := "    request: {model: m, messages: [{role: user, content: \"Where is A-123456?\"}], tools: [{type: function, function: {name: get_order, parameters: {type: object}}}]}\n"
	file := writeFile(t, dir, "modes.test.yaml", "cases:\n"+
		"  - name: error\n    protocol: {file: error.json}\n"+request+"    answer: "+answer("call_1", "123")+"\n"+
		"    expect: {status: 403, error: tool_call_blocked, calls: [{id: call_1, outcome: blocked, rule: order-id}], client: {notContains: ['\"123\"']}}\n"+
		"  - name: audit\n    protocol: {file: audit.json}\n"+request+"    answer: "+answer("call_1", "123")+"\n"+
		"    expect: {calls: [{id: call_1, outcome: audited, rule: order-id}]}\n"+
		"  - name: continue\n    protocol: {file: continue.json}\n"+request+"    answers: ["+answer("call_1", "123")+", "+answer("call_2", "A-123456")+"]\n"+
		"    expect: {calls: [{id: call_1, outcome: blocked, rule: order-id}, {id: call_2, outcome: released}]}\n"+
		"  - name: continue-one-answer-short\n    protocol: {file: continue.json}\n"+request+"    answer: "+answer("call_1", "123")+"\n"+
		"    expect: {calls: [{id: call_1, outcome: blocked, rule: order-id}]}\n")
	out, _, err := runCmd(t, nil, "", "test", file)
	for _, want := range []string{"--- PASS: modes/error (", "--- PASS: modes/audit (", "--- PASS: modes/continue (",
		"--- FAIL: modes/continue-one-answer-short (", "cases[3].answers: the proxy asked the upstream 2 times"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if exitCode(err) != 1 {
		t.Errorf("exit %d (%v)", exitCode(err), err)
	}
}

// TestPolicyDocFollowUpIsTheExample: the conversation docs/policy.md shows is the example case it
// names: each of its lines not cut short (by "...") is a line of that case, in the same order.
func TestPolicyDocFollowUpIsTheExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(inRepo("docs/policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := string(b)[strings.Index(string(b), "#### A conversation: held, then confirmed"):]
	blocks := codeBlocks(sec)
	if len(blocks) == 0 || blocks[0].lang != "yaml" {
		t.Fatalf("the section's first block is not YAML: %+v", blocks)
	}
	ex, err := os.ReadFile(filepath.Join(examplesDir, "tests", "payments.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	name := "  - name: new-payee-held-then-confirmed\n"
	text := string(ex)
	start := strings.Index(text, name)
	if start < 0 {
		t.Fatal("the example has no case new-payee-held-then-confirmed")
	}
	lines := strings.Split(text[start:], "\n")
	at, checked := 0, 0
	for _, l := range strings.Split(blocks[0].text, "\n") {
		if i := strings.Index(l, "  # "); i >= 0 {
			l = strings.TrimRight(l[:i], " ")
		}
		if l == "" || strings.Contains(l, "...") {
			continue
		}
		j := slices.Index(lines[at:], l)
		if j < 0 {
			t.Errorf("the doc's line %q is not the example's (after its line %d)", l, at)
			continue
		}
		at += j + 1
		checked++
	}
	if checked < 10 {
		t.Errorf("%d lines checked", checked)
	}
}
