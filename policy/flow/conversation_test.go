package flow_test

import (
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// TestTranscriptSources: a transcript labels each part by its source, matches outputs to their
// calls by id (an unknown or shared id is tool:?), legacy outputs by name, MCP outputs by server,
// and trust follows the policy's toolOutputs.
func TestTranscriptSources(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"toolOutputs":{"trusted":["list_*","mcp:crm"]}}`)
	tr := flow.NewTranscript()
	tr.Text(flow.RoleApp, "rules", -1)
	tr.Text(flow.RoleUser, "find", 0)
	tr.Attachment("img alt", 0)
	tr.LegacyCall("list_files", []byte(`{}`), 1)
	tr.LegacyOutput("list_files", flow.Output{Text: "f1"}, 2)
	tr.LegacyOutput("other", flow.Output{Text: "f2"}, 3)
	tr.Call("list_a", "x", []byte(`{}`), "", 4)
	tr.Call("shell", "x", []byte(`"ls"`), "", 4)
	tr.Output("x", flow.Output{Text: "dup"}, 5)
	tr.Output("nope", flow.Output{Text: "orphan"}, 6)
	tr.Call("mcp", "m1", []byte(`{"q":1}`), "crm", 7)
	tr.Output("m1", flow.Output{Text: "crm says hi"}, 8)
	tr.ToolOutput("mcp", flow.Output{Text: "web says", Server: "web"}, 9)
	tr.Untrusted("critic text", 10)
	tr.Text(flow.RoleAssistant, "done", 11)
	c, err := p.Analyze(tr, flow.Options{Context: []string{"plugin says"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"+app:rules", "+user:find", "context:img alt", "+tool:list_files:f1", "tool:?:f2", "tool:?:dup", "tool:?:orphan",
		"+mcp:crm:crm says hi", "mcp:web:web says", "tool:?:critic text", "assistant:done", "context:plugin says"}
	if got := flowtest.Labels(c); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("segments\n got %q\nwant %q", got, want)
	}
	if got := strings.Join(flowtest.CallNames(c.Calls()), " "); got != `list_files#({}) list_a#x({}) shell#x("ls") mcp#m1({"q":1})` {
		t.Fatalf("calls %s", got)
	}
}

// TestTranscriptHistory: parts added while History is on are marked, and an unseen history is
// reported with its first reason.
func TestTranscriptHistory(t *testing.T) {
	t.Parallel()
	tr := flow.NewTranscript()
	tr.History(true)
	tr.Text(flow.RoleUser, "first", 0)
	tr.Call("read", "c1", []byte(`{}`), "", 1)
	tr.Output("c1", flow.Output{Text: "data"}, 2)
	tr.History(false)
	tr.Text(flow.RoleUser, "and now?", 0)
	c, err := mustCompile(t, `{}`).Analyze(tr, flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"+user:first", "tool:read:data", "+user:and now?"}
	if got := flowtest.Labels(c); strings.Join(got, "|") != strings.Join(want, "|") || c.Unseen() != "" {
		t.Fatalf("got %q unseen %q", got, c.Unseen())
	}
	if s := c.Segments(); !s[0].InHistory || s[2].InHistory || !c.Calls()[0].InHistory {
		t.Fatalf("history flags: %+v", s)
	}
	tr.SetUnseen("item_reference")
	tr.SetUnseen("conversation")
	if tr.Unseen() != "item_reference" {
		t.Fatalf("unseen %q, want the first reason", tr.Unseen())
	}
	if _, err := mustCompile(t, `{}`).Analyze(nil, flow.Options{}); err == nil {
		t.Fatal("a nil transcript was analyzed")
	}
}

// TestSourcePatternsMCP: mcp:SERVER in from, not.from and after lists; a bare "mcp" in
// toolOutputs.trusted trusts no MCP server.
func TestSourcePatternsMCP(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"toolOutputs":{"trusted":["mcp","*"]},"provenance":[
	  {"id":"from-crm","tool":"mail","path":"to","as":"email","from":["mcp:crm"]},
	  {"id":"not-web","tool":"post","path":"to","as":"email","not":{"from":["mcp:w*"]}}],
	  "flows":[{"id":"after-web","after":["mcp:web"],"tools":["wipe"]}]}`)
	tr := flow.NewTranscript()
	tr.Text(flow.RoleUser, "mail the contact", 0)
	tr.Call("mcp", "a", []byte(`{}`), "crm", 1)
	tr.Output("a", flow.Output{Text: "bob@x.com"}, 2)
	tr.Call("mcp", "b", []byte(`{}`), "web", 3)
	tr.Output("b", flow.Output{Text: "eve@evil.net"}, 4)
	c, err := p.Analyze(tr, flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range c.Segments() {
		if s.Source.Kind == flow.SourceMCP && c.Trusted(i) {
			t.Errorf("%s is trusted by a list without mcp:SERVER", s.Source)
		}
	}
	for _, tc := range []struct{ tool, args, verdict string }{
		{"mail", `{"to":"bob@x.com"}`, flow.VerdictAllowed},
		{"mail", `{"to":"eve@evil.net"}`, flow.VerdictBlocked},
		{"post", `{"to":"eve@evil.net"}`, flow.VerdictBlocked},
		{"post", `{"to":"bob@x.com"}`, flow.VerdictAllowed},
		{"wipe", `{}`, flow.VerdictBlocked},
	} {
		if r := c.Check(flow.Call{Tool: tc.tool, Args: []byte(tc.args)}); r.Verdict != tc.verdict {
			t.Errorf("%s %s: %s (%s), want %s", tc.tool, tc.args, r.Verdict, r.Reason, tc.verdict)
		}
	}
	if _, err := flow.Compile(flow.Spec{Provenance: []flow.ProvenanceRule{{Tool: "t", Path: "p", From: []string{"mcp:"}}}}); err == nil {
		t.Error("mcp: without a server was taken")
	}
}
