package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/store"
)

const cacheProtocolV1 = `{"id":"p","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["get_ticket"]},
  "toolCalls":{"rules":[{"id":"tid","tool":"get_ticket","path":"id","pattern":"^T-[0-9]+$"}]}}`

const cacheProtocolV2 = `{"id":"p","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["get_ticket"]},
  "toolCalls":{"rules":[{"id":"tid","tool":"get_ticket","path":"id","pattern":"^X-[0-9]+$"}]}}`

const cacheRequest = `{"model":"m","messages":[{"role":"user","content":"hi"}],
  "tools":[{"type":"function","function":{"name":"get_ticket","parameters":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}}]}`

// TestArgRulesOncePerSnapshot checks that the argument rules are compiled once per definitions
// snapshot and effective protocol, that a new snapshot gets its own, and that a request prepared on
// the old snapshot keeps the old rules.
func TestArgRulesOncePerSnapshot(t *testing.T) {
	e := testEngine(t, "defaultProtocol: p\n", nil, nil, []json.RawMessage{json.RawMessage(cacheProtocolV1)})
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: mustURL(t, "http://127.0.0.1:1/v1")}}})
	if err != nil {
		t.Fatal(err)
	}
	prep := func() *Prepared {
		t.Helper()
		p, err := e.Prepare(context.Background(), Input{Path: PathChat, Header: http.Header{}, Body: []byte(cacheRequest)})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	rules := func(p *Prepared) any {
		t.Helper()
		pol, err := p.Policy(0)
		set := pol.Rules
		if err != nil || set.Len() != 1 {
			t.Fatalf("rules %v, %v", set, err)
		}
		return set
	}
	check := func(p *Prepared, id string) bool {
		pol, _ := p.Policy(s.limits.MaxJSONDepth)
		_, _, ok := vet.NewChecker(pol).Check("get_ticket", []byte(`{"id":"`+id+`"}`))
		return ok
	}
	a, b := prep(), prep()
	if rules(a) != rules(b) {
		t.Error("two requests on one snapshot compiled the rules twice")
	}
	if a.Protocol != b.Protocol {
		t.Error("two requests on one snapshot merged the protocol twice")
	}
	if !check(a, "T-1") || check(a, "X-1") {
		t.Error("v1 rules not applied")
	}
	if err := e.defs.store.(store.Store).ApplyRollout(context.Background(), store.Rollout{ID: "v2", Protocols: []json.RawMessage{json.RawMessage(cacheProtocolV2)}}); err != nil {
		t.Fatal(err)
	}
	if err := e.defs.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := prep()
	if rules(c) == rules(a) {
		t.Error("a new snapshot reused the old snapshot's rules")
	}
	if c.Protocol == a.Protocol || c.Protocol.Version == a.Protocol.Version {
		t.Errorf("a new snapshot reused the old snapshot's protocol (version %d, was %d)", c.Protocol.Version, a.Protocol.Version)
	}
	if check(c, "T-1") || !check(c, "X-1") {
		t.Error("v2 rules not applied")
	}
	if !check(a, "T-1") || check(a, "X-1") {
		t.Error("a request prepared before the activation changed rules")
	}
	// A Prepared made outside the engine compiles its rules itself.
	bare := &Prepared{Protocol: a.Protocol, Kept: a.Kept}
	if rules(bare) == rules(a) || !check(bare, "T-1") {
		t.Error("a Prepared without a snapshot")
	}
}

// TestFramesPerSnapshot checks that a layered prompt's fixed part is made once per snapshot,
// template and protocol, that the upstream body is the one assembly.Build gives, and that an
// activation (new rules, new template text) is served from the next request on, while a request
// prepared before keeps its prompt.
func TestFramesPerSnapshot(t *testing.T) {
	const protoV1 = `{"id":"p","promptTemplate":{"base":"tpl","overrides":{"rules":"- rule of version one"}},"tools":{"allow":["*"]}}`
	const protoV2 = `{"id":"p","promptTemplate":{"base":"tpl","overrides":{"rules":"- rule of version two"}},"tools":{"allow":["*"]}}`
	tpl := func(core string) json.RawMessage {
		b, err := json.Marshal(map[string]string{"name": "tpl", "text": "=== SYSTEM CORE ===\n" + core + "\n\n=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n" +
			assembly.ContextHeader + "\n{{runtime_context}}\n\n=== AVAILABLE TOOLS ===\n{{tools}}\n"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	e := testEngine(t, "defaultProtocol: p\n", nil, []json.RawMessage{tpl("Core of template one.")}, []json.RawMessage{json.RawMessage(protoV1)})
	prep := func() *Prepared {
		t.Helper()
		p, err := e.Prepare(context.Background(), Input{Path: PathChat, Header: http.Header{}, Body: []byte(cacheRequest)})
		if err != nil {
			t.Fatal(err)
		}
		// The upstream body holds the prompt Build gives without a frame, escaped as encoding/json
		// does.
		want := assembly.Build(p.Template, assembly.Layers{Rules: p.Protocol.Rules, Tools: p.Kept, NativeTools: true,
			Meta: ctxjson.Meta{Protocol: p.Protocol.ID}}, e.settings)
		if p.Prompt.System() != want.System() {
			t.Fatalf("System\n got %q\nwant %q", p.Prompt.System(), want.System())
		}
		var enc bytes.Buffer
		je := json.NewEncoder(&enc)
		je.SetEscapeHTML(false)
		if err := je.Encode(want.System()); err != nil {
			t.Fatal(err)
		}
		if got := gjson.GetBytes(p.Body, "messages.0.content").Raw; got+"\n" != enc.String() {
			t.Fatalf("upstream system message %s, want %s", got, enc.Bytes())
		}
		return p
	}
	frames := func() int {
		n := 0
		e.defs.snapshot().frames.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	a := prep()
	prep()
	if n := frames(); n != 1 {
		t.Errorf("%d frames after two requests of one protocol, want 1", n)
	}
	if !strings.Contains(a.Prompt.System(), "rule of version one") || !strings.Contains(a.Prompt.System(), "Core of template one.") {
		t.Fatalf("first prompt:\n%s", a.Prompt.System())
	}
	before := a.Prompt.System()

	if err := e.defs.store.(store.Store).ApplyRollout(context.Background(), store.Rollout{ID: "v2", Templates: []json.RawMessage{tpl("Core of template two.")},
		Protocols: []json.RawMessage{json.RawMessage(protoV2)}}); err != nil {
		t.Fatal(err)
	}
	b := prep()
	for _, s := range []string{"rule of version one", "Core of template one."} {
		if strings.Contains(b.Prompt.System(), s) || strings.Contains(string(b.Body), s) {
			t.Errorf("after the activation, the prompt still holds %q:\n%s", s, b.Body)
		}
	}
	for _, s := range []string{"rule of version two", "Core of template two."} {
		if !strings.Contains(string(b.Body), s) {
			t.Errorf("after the activation, the upstream body lacks %q:\n%s", s, b.Body)
		}
	}
	if a.Prompt.System() != before || !strings.Contains(string(a.Body), "rule of version one") {
		t.Error("a request prepared before the activation changed its prompt")
	}
}

// TestBufferPool checks that the proxies' copy buffers come back whole and that foreign buffers are
// not kept.
func TestBufferPool(t *testing.T) {
	p := newBufferPool()
	b := p.Get()
	if len(b) != proxyBufferSize {
		t.Fatalf("buffer of %d bytes", len(b))
	}
	p.Put(b[:10])
	if got := p.Get(); len(got) != proxyBufferSize {
		t.Fatalf("buffer of %d bytes after a short Put", len(got))
	}
	p.Put(make([]byte, 100)) // not ours: dropped
	if got := p.Get(); len(got) != proxyBufferSize {
		t.Fatalf("buffer of %d bytes after a foreign Put", len(got))
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
