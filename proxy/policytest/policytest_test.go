package policytest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/store"
)

// examplesTests is the folder of the example protocols' case files.
var examplesTests = filepath.Join("..", "..", "examples", "tests")

// testConfig is a deployment with the defaults: no tool policy, the default prompt settings and
// limits.
func testConfig() Config { return Config{Settings: assembly.DefaultSettings()} }

// exampleCases reads every case file of examples/tests.
func exampleCases(t *testing.T) []*Case {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(examplesTests, "*.test.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example case files: %v", err)
	}
	var refs []FileRef
	for _, p := range paths {
		refs = append(refs, FileRef{Path: p, Name: strings.TrimSuffix(filepath.Base(p), ".test.yaml")})
	}
	cases, problems := Load(refs, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return cases
}

// TestExamplesCoverTheOutcomes runs every example case through Env.Run: each passes, and between
// them they release, block, hold and confirm calls, check the layered prompt and the tools kept, on every
// surface, in streams too.
func TestExamplesCoverTheOutcomes(t *testing.T) {
	t.Parallel()
	cases := exampleCases(t)
	env := NewEnv(testConfig(), BuiltinSnapshot())
	if problems := env.LoadProtocols(context.Background(), cases, nil); len(problems) > 0 {
		t.Fatal(problems)
	}
	outcomes, surfaces := map[string]bool{}, map[string]bool{}
	prompts, tools, streams := 0, 0, 0
	for _, c := range cases {
		r, err := env.Run(context.Background(), c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !r.Passed() {
			t.Errorf("%s: failures %v, problems %v", c.Name, r.Failures, r.Problems)
		}
		for _, s := range c.steps() {
			if s.expect.calls != nil {
				for _, e := range *s.expect.calls {
					outcomes[e.outcome] = true
				}
			}
		}
		if !c.expect.prompt.empty() {
			prompts++
		}
		if c.expect.toolsKept != nil || c.expect.toolsRemoved != nil {
			tools++
		}
		if len(c.answers) > 0 && c.answers[0].stream {
			streams++
		}
		surfaces[surfaceOf(c.Path)] = true
	}
	for _, o := range []string{outcomeReleased, outcomeBlocked, outcomeHeld, outcomeConfirmed} {
		if !outcomes[o] {
			t.Errorf("no example case expects a %s call", o)
		}
	}
	if prompts == 0 || tools == 0 || streams < 2 || len(surfaces) != 4 {
		t.Errorf("prompt checks %d, tool checks %d, streams %d, surfaces %v", prompts, tools, streams, surfaces)
	}
}

// supportBody is the example support protocol's definition.
func supportBody(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "protocols", "support.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storedCase is a case file that names the stored support protocol by protocol, with no file: its
// first case passes, its second expects a release the protocol blocks.
func storedCase(t *testing.T, protocol string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "support-stored.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.Replace(string(b), "protocol: support\n", "protocol: "+protocol+"\n", 1))
}

// supportStore is a real store file with the support protocol pushed and active.
func supportStore(t *testing.T) *store.Bolt {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "pg.db"), store.Options{Validate: proxy.ValidateDefinition, Links: proxy.CheckLinks, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	v, err := st.AddVersion(ctx, store.KindProtocol, supportBody(t), "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Activate(ctx, store.KindProtocol, "support", v); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRunFromBytesAgainstAStore: a case file given as bytes, with no name and no file, runs against
// a store's protocol (the active one, or a version); each result names the case-file line of what
// failed, and a version the store lacks is a problem at the protocol's line.
func TestRunFromBytesAgainstAStore(t *testing.T) {
	t.Parallel()
	st := supportStore(t)
	ctx := context.Background()
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, protocol := range []string{"support", "support@1", "{id: support, version: 1}"} {
		cases, problems := Parse("", "", storedCase(t, protocol), Options{NoFiles: true})
		if len(problems) > 0 {
			t.Fatal(problems)
		}
		if cases[0].Name != "lookup" || cases[1].Name != "wrong-expectation" {
			t.Fatalf("names %q %q: a file without a name gives its cases their own", cases[0].Name, cases[1].Name)
		}
		env := NewEnv(testConfig(), snap)
		if problems := env.LoadProtocols(ctx, cases, st); len(problems) > 0 {
			t.Fatal(problems)
		}
		pass, err := env.Run(ctx, cases[0])
		if err != nil {
			t.Fatal(err)
		}
		fail, err := env.Run(ctx, cases[1])
		if err != nil {
			t.Fatal(err)
		}
		want := "14: cases[1].expect.calls[0]: call get_order id call_1: got blocked by tool_call rule order-id: rule order-id: order_id does not match the pattern, want released"
		if !pass.Passed() || fail.Passed() || len(fail.Failures) != 1 || fail.Failures[0].String() != want {
			t.Errorf("%s: pass %+v, fail %+v", protocol, pass, fail.Failures)
		}
		if !strings.Contains(strings.Join(fail.Details, "\n"), "call 1: get_order id call_1: blocked by tool_call rule order-id") {
			t.Errorf("%s: details %q", protocol, fail.Details)
		}
	}
	cases, _ := Parse("", "", storedCase(t, "support@9"), Options{NoFiles: true})
	problems := NewEnv(testConfig(), snap).LoadProtocols(ctx, cases, st)
	if len(problems) != 1 || !strings.HasPrefix(problems[0].String(), "1: protocol: protocol support@9 is not in the store") {
		t.Errorf("a version the store lacks: %v", problems)
	}
	if _, err := NewEnv(testConfig(), snap).Run(ctx, cases[0]); err == nil {
		t.Error("a case whose protocol was not loaded ran")
	}
}

// TestParseWithoutFilesRefusesEveryFile: with NoFiles, a protocol file and a request file are each
// refused at their field, and nothing is read (a path that exists is refused as one that does not).
func TestParseWithoutFilesRefusesEveryFile(t *testing.T) {
	t.Parallel()
	exists, err := filepath.Abs(filepath.Join("..", "..", "examples", "protocols", "support.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{exists, "/nonexistent/p.json"} {
		src := "protocol: {file: " + path + "}\ncases:\n  - name: a\n    requestFile: " + path + "\n    answer: {body: {choices: []}}\n    expect: {status: 200}\n"
		_, problems := Parse("", "", []byte(src), Options{NoFiles: true})
		var got []string
		for _, p := range problems {
			got = append(got, p.String())
		}
		want := []string{
			"1: protocol.file: the admin API reads no file: name a stored protocol (ID or ID@VERSION); push the file first with `promptgate protocols push`",
			"4: cases[0].requestFile: the admin API reads no file: put the body in request",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\ngot  %q\nwant %q", path, got, want)
		}
	}
	// Read from a file, the same file names its protocol by path.
	if _, problems := Parse("x.test.yaml", "x", []byte("protocol: {file: "+exists+"}\ncases: [{name: a, request: {}, expect: {status: 200}}]\n"), Options{}); len(problems) > 0 {
		t.Errorf("with files: %v", problems)
	}
}

// TestProblemString: a problem reads FILE:LINE: FIELD: MESSAGE, with the parts that are not known
// left out.
func TestProblemString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "a.test.yaml", Line: 3, Field: "cases[0].name", Message: "m"}, "a.test.yaml:3: cases[0].name: m"},
		{Problem{File: "a.test.yaml", Message: "not valid YAML: x"}, "a.test.yaml: not valid YAML: x"},
		{Problem{File: "a.test.yaml", Line: 7, Message: "two documents"}, "a.test.yaml:7: two documents"},
		{Problem{Line: 3, Field: "cases", Message: "m"}, "3: cases: m"},
		{Problem{Message: "the file is empty"}, "the file is empty"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}

// TestRecordingReplays: a recording of logged decisions is a case file that Parse reads without a
// problem and that passes against the store that decided them.
func TestRecordingReplays(t *testing.T) {
	t.Parallel()
	st := supportStore(t)
	ctx := context.Background()
	event := func(kind, tool, verdict, rule, args string) audit.Event {
		e := audit.Event{RequestID: "pg-7", Kind: kind, Protocol: "support", ProtocolVersion: 1, Tool: tool, Verdict: verdict, Rule: rule}
		return e.WithArguments([]byte(args), true)
	}
	events := []audit.Event{
		event(audit.KindToolRemoved, "issue_refund", audit.VerdictRemoved, "", ""),
		event(audit.KindToolCall, "get_order", audit.VerdictBlocked, "order-id", `{"order_id": "12345"}`),
		event(audit.KindToolCall, "create_ticket", audit.VerdictAllowed, "", `{"priority":"low","body":"Parcel damaged"}`),
	}
	rec, err := NewRecording("pg-7", proxy.PathChat, events)
	if err != nil {
		t.Fatal(err)
	}
	text, err := rec.YAML("POST /admin/tests/record", "the audit ring", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "Recorded by POST /admin/tests/record from the audit ring on 2026-01-01T00:00:00Z.") {
		t.Errorf("the note:\n%s", text)
	}
	cases, problems := Parse("", "", text, Options{NoFiles: true})
	if len(problems) > 0 {
		t.Fatalf("%v\n%s", problems, text)
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env := NewEnv(testConfig(), snap)
	if problems := env.LoadProtocols(ctx, cases, st); len(problems) > 0 {
		t.Fatal(problems)
	}
	r, err := env.Run(ctx, cases[0])
	if err != nil || !r.Passed() {
		t.Fatalf("%v %+v\n%s", err, r, text)
	}
	for _, bad := range []struct {
		id, path string
		events   []audit.Event
		want     string
	}{
		{"pg-8", proxy.PathChat, nil, `no decision of request "pg-8"`},
		{"pg-7", "/v1/embeddings", events, `path "/v1/embeddings": use one of`},
		{"pg-7", proxy.PathChat, []audit.Event{{RequestID: "pg-7", Kind: audit.KindToolCall, Tool: "x", Verdict: audit.VerdictAllowed}}, "name no protocol"},
	} {
		if _, err := NewRecording(bad.id, bad.path, bad.events); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s %s: %v, want %q", bad.id, bad.path, err, bad.want)
		}
	}
}

// TestAliasesCannotExpandAFile: a YAML alias repeats its anchor's value; a request named once by
// anchor and then by alias is read in each case, but a small file whose aliases nest (a billion
// elements) or repeat a large value is refused at the field where it goes over, without writing
// what it names.
func TestAliasesCannotExpandAFile(t *testing.T) {
	t.Parallel()
	reuse := "protocol: x\ncases:\n  - name: a\n    request: &req {model: m, messages: [{role: user, content: hi}]}\n    expect: {status: 200}\n" +
		"  - name: b\n    request: *req\n    expect: {status: 200}\n"
	cases, problems := Parse("", "", []byte(reuse), Options{})
	if len(problems) > 0 || len(cases) != 2 || string(cases[1].request) != `{"model":"m","messages":[{"role":"user","content":"hi"}]}` {
		t.Fatalf("an alias of a request: %v %d cases", problems, len(cases))
	}
	nested := "protocol: x\ncases:\n  - name: a\n    expect: {status: 200}\n    request:\n      a: &a [x,x,x,x,x,x,x,x,x,x]\n"
	for i, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		prev := string(rune('a' + i))
		nested += "      " + name + ": &" + name + " [*" + prev + strings.Repeat(", *"+prev, 9) + "]\n"
	}
	big := strings.Repeat("x", 1<<20)
	repeated := "protocol: x\nheaders: {X-Big: &big " + big + "}\ncases:\n"
	for i := range 50 {
		repeated += "  - {name: c" + strconv.Itoa(i) + ", request: *big, expect: {status: 200}}\n"
	}
	for name, src := range map[string]string{"nested aliases": nested, "a large value named again and again": repeated} {
		start := time.Now()
		_, problems := Parse("", "", []byte(src), Options{})
		var over []string
		for _, p := range problems {
			if strings.Contains(p.Message, "a YAML alias (*name) repeats its anchor's value") {
				over = append(over, p.String())
			}
		}
		if len(over) != 1 {
			t.Errorf("%s: problems %v", name, problems)
		}
		t.Logf("%s: %s, read in %v", name, over, time.Since(start))
	}
}

// TestAppendJSONReadsAsYAMLDoes: a YAML value written as JSON keeps its keys in order and each
// scalar's value as YAML reads it; what JSON cannot hold is refused.
func TestAppendJSONReadsAsYAMLDoes(t *testing.T) {
	t.Parallel()
	r := &yamlReader{file: "f"}
	for in, want := range map[string]string{
		"{b: 1, a: [true, null, 1.5, '1.50', x, -0x10]}": `{"b":1,"a":[true,null,1.5,"1.50","x",-16]}`,
		"{z: &v {k: v}, y: *v}":                          `{"z":{"k":"v"},"y":{"k":"v"}}`,
		`{"quoted key": "é\n"}`:                          `{"quoted key":"é\n"}`,
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(in), &doc); err != nil {
			t.Fatal(err)
		}
		got, ok := r.jsonValue(doc.Content[0], "x")
		if !ok || string(got) != want {
			t.Errorf("%s: got %s %v, want %s (%v)", in, got, ok, want, r.errs)
		}
	}
	for _, in := range []string{"{a: .inf}", "{a: 1, a: 2}", "{<<: {a: 1}}", "{[a]: 1}", "'{not json'"} {
		r := &yamlReader{file: "f"}
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(in), &doc); err != nil {
			continue // refused by YAML already
		}
		if got, ok := r.jsonValue(doc.Content[0], "x"); ok {
			t.Errorf("%s: got %s, want an error", in, got)
		}
	}
}
