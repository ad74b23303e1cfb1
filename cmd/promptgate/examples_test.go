package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/demo"
)

// examplesDir is the repository's examples folder, seen from this package.
const examplesDir = "../../examples"

// exampleFiles are the files of examples/SUB matching *.json, by name without ".json".
func exampleFiles(t *testing.T, sub string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(examplesDir, sub, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples in %s: %v", sub, err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = b
	}
	return out
}

// TestExampleProtocolsCompile: every protocol file parses as the server parses a definition, its
// argument rules and information-flow rules compile, it says what it is for, and its file is named
// after its id.
func TestExampleProtocolsCompile(t *testing.T) {
	t.Parallel()
	for name, body := range exampleFiles(t, "protocols") {
		p, err := policy.ParseProtocol(body)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, err := vet.CompileRules(p.ToolCalls.Rules); err != nil {
			t.Errorf("%s: argument rules: %v", name, err)
		}
		if _, err := flow.Compile(p.ToolCalls.Spec); err != nil {
			t.Errorf("%s: information-flow rules: %v", name, err)
		}
		if p.ID != name || p.Description == "" {
			t.Errorf("%s: id %q, description %q", name, p.ID, p.Description)
		}
	}
}

// TestExamplesAreTheDemos: the demo's protocol and requests in examples/ are the ones `promptgate
// demo` serves and prints.
func TestExamplesAreTheDemos(t *testing.T) {
	t.Parallel()
	if got := exampleFiles(t, "protocols")[demo.ProtocolID]; !bytes.Equal(got, demo.Protocol()) {
		t.Errorf("examples/protocols/%s.json is not the demo's protocol (proxy/demo/defs/protocol.json)", demo.ProtocolID)
	}
	reqs := exampleFiles(t, "requests")
	for _, e := range demo.Examples() {
		if !bytes.Equal(reqs["demo-"+e.Name], e.Body) {
			t.Errorf("examples/requests/demo-%s.json is not the demo's request (proxy/demo/defs/%s.json)", e.Name, e.Name)
		}
	}
}

// TestExampleRequestsPreview pushes every example protocol with the CLI into a new DB and previews
// every example request under the protocol its name starts with, on the surface its name ends with,
// as examples/README.md says to.
func TestExampleRequestsPreview(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "pg.db")
	if _, _, err := runCmd(t, nil, "", "protocols", "list", "--db", db, "--create"); err != nil {
		t.Fatal(err)
	}
	for name := range exampleFiles(t, "protocols") {
		if out, _, err := runCmd(t, nil, "", "protocols", "push", "--activate", filepath.Join(examplesDir, "protocols", name+".json"), "--db", db); err != nil {
			t.Fatalf("push %s: %v %s", name, err, out)
		}
	}
	checks := map[string]map[string]string{ // per request: gjson path of the report -> the value it must hold
		"support-order":        {"tools.removed.0.name": "issue_refund", "flow.conversation.rules.2.state": "0 of 2 calls used"},
		"coding-fix.responses": {"tools.removed.0.name": "delete_branch", "flow.conversation.rules.2.state": "triggered: untrusted output (tool:web_fetch) is in the conversation"},
		"payments-refund":      {"flow.conversation.sources.2.source": "tool:get_transactions (trusted paths)", "flow.conversation.sources.3.trusted": "false"},
		"demo-layered":         {"tools.removed.0.name": "run_shell"},
		"demo-blocked-stream":  {"flow.conversation.sources.2.source": "tool:fetch_page"},
		"demo-held.messages":   {"flow.conversation.sources.1.source": "tool:read_file"},
	}
	for name := range exampleFiles(t, "requests") {
		protocol, _, _ := strings.Cut(name, "-")
		file := filepath.Join(examplesDir, "requests", name+".json")
		out, errOut, err := runCmd(t, nil, "", "preview", "--db", db, "--protocol", protocol, "--path", demo.PathOf(name), file)
		if err != nil {
			t.Errorf("%s: %v %s", name, err, errOut)
			continue
		}
		if gjson.Get(out, "protocolId").String() != protocol || gjson.Get(out, "path").String() != demo.PathOf(name) {
			t.Errorf("%s: %s", name, out)
		}
		want, ok := checks[name]
		if !ok {
			t.Errorf("%s: a new example request: say in this test what its preview shows", name)
		}
		for path, v := range want {
			if got := gjson.Get(out, path).String(); got != v {
				t.Errorf("%s: %s = %q, want %q", name, path, got, v)
			}
		}
	}
}

// TestExamplePluginFeedsTheContext builds the plugin the example config runs, puts its checksum and
// paths into the config as its comments say, and previews a request of user u-1: the memory file is
// in the runtime context.
func TestExamplePluginFeedsTheContext(t *testing.T) {
	t.Parallel()
	bin, sum := buildPlugin(t, "../../plugins/examples/filememory")
	cfg, err := os.ReadFile(filepath.Join(examplesDir, "plugin", "filememory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	memDir, _ := filepath.Abs(filepath.Join(examplesDir, "plugin", "memory"))
	text := strings.NewReplacer(strings.Repeat("0", 64), sum, "path: bin/filememory", "path: "+bin,
		"dir: examples/plugin/memory", "dir: "+memDir).Replace(string(cfg))
	if text == string(cfg) || strings.Count(text, sum)+strings.Count(text, bin)+strings.Count(text, memDir) != 3 {
		t.Fatalf("the example config does not hold the placeholders its comments name:\n%s", cfg)
	}
	dir := t.TempDir()
	file := writeFile(t, dir, "pg.yaml", text)
	db := filepath.Join(dir, "pg.db")
	if _, _, err := runCmd(t, nil, "", "protocols", "push", "--activate", "--create", "--db", db, filepath.Join(examplesDir, "protocols", "support.json")); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runCmd(t, nil, "", "preview", "--db", db, "--config", file, "--protocol", "support",
		filepath.Join(examplesDir, "requests", "support-order.json"))
	if err != nil {
		t.Fatalf("%v %s", err, errOut)
	}
	sys := gjson.Get(out, "upstreamRequest.messages.0.content").String()
	if !strings.Contains(sys, `"memory":{"name":"Ada","language":"en","orders":["A-123456"],"note":"prefers email over phone"}`) {
		t.Fatalf("the memory is not in the runtime context:\n%s", sys)
	}
}
