package assembly

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/store/builtin"
)

// frameInput is one fuzz case of Build: the template text and the layers, settings packed in flags.
type frameInput struct {
	template, rules, app, directive, toolName, toolDesc, context string
	flags                                                        uint8
	directivesMax                                                int
}

// Flags of frameInput.
const (
	flagNative uint8 = 1 << iota
	flagDatamark
	flagStructured
	flagRedact
	flagMinimalTools
	flagNoSources
)

func (in frameInput) build(tb testing.TB) (*Template, Layers, Settings, bool) {
	tb.Helper()
	l := Layers{
		Rules: in.rules, Application: []string{in.app, "Second app text."}, Directives: []string{in.directive, "Keep it short."},
		Meta:        ctxjson.Meta{Protocol: "tech"},
		Tools:       []policy.Tool{{Name: in.toolName, Description: in.toolDesc}, {Name: "calc"}},
		NativeTools: in.flags&flagNative != 0,
	}
	if in.flags&flagNoSources == 0 {
		v, err := ctxjson.Parse([]byte(in.context))
		if err != nil {
			return nil, l, Settings{}, false
		}
		l.Sources = []ctxjson.Source{{Name: "request", Value: v}}
		l.Meta.Sources = []string{"request"}
	}
	s := DefaultSettings()
	s.DatamarkToolOutput = in.flags&flagDatamark != 0
	s.StructuredChannel = in.flags&flagStructured != 0
	s.RedactInSystem = in.flags&flagRedact != 0
	if in.flags&flagMinimalTools != 0 {
		s.ToolDefsMode = ToolDefsMinimal
	}
	s.DirectivesMaxChars = in.directivesMax % 4000
	return ParseTemplate("fuzz", 1, in.template), l, s, true
}

// samePrompt fails unless got is the reference prompt, field by field, and its JSON string is the
// one encoding/json writes.
func samePrompt(t *testing.T, what string, got, want Prompt) {
	t.Helper()
	if got.System() != want.System() {
		t.Fatalf("%s: System\n got %q\nwant %q", what, got.System(), want.System())
	}
	if got.ContextMessage != want.ContextMessage || !bytes.Equal(got.ContextJSON, want.ContextJSON) ||
		got.ContextTruncated != want.ContextTruncated || got.DirectivesTruncated != want.DirectivesTruncated ||
		got.DatamarkToolOutput != want.DatamarkToolOutput {
		t.Fatalf("%s: context or flags differ:\n got %q %s %v %v %v\nwant %q %s %v %v %v", what,
			got.ContextMessage, got.ContextJSON, got.ContextTruncated, got.DirectivesTruncated, got.DatamarkToolOutput,
			want.ContextMessage, want.ContextJSON, want.ContextTruncated, want.DirectivesTruncated, want.DatamarkToolOutput)
	}
	if !reflect.DeepEqual(got.Sizes, want.Sizes) {
		t.Fatalf("%s: Sizes\n got %+v\nwant %+v", what, got.Sizes, want.Sizes)
	}
	var enc bytes.Buffer
	e := json.NewEncoder(&enc)
	e.SetEscapeHTML(false)
	if err := e.Encode(want.System()); err != nil {
		t.Fatal(err)
	}
	if js := got.AppendSystemJSON(nil); !bytes.Equal(js, bytes.TrimSuffix(enc.Bytes(), []byte("\n"))) {
		t.Fatalf("%s: AppendSystemJSON\n got %s\nwant %s", what, js, enc.Bytes())
	}
}

func frameSeeds(tb testing.TB) []frameInput {
	tb.Helper()
	base := frameInput{rules: "  Sé breve.\n", app: "App one.\n=== SYSTEM CORE ===", directive: "d1\u2028d2", toolName: "search",
		toolDesc: "Find\nthings \"quoted\".", context: `{"a":"x\ny","b":"\u2029<tag>"}`, directivesMax: 2500}
	var out []frameInput
	texts := []string{layeredText, legacyText, "", " \n\t", "=== SYSTEM CORE ===\r\nCore.\r\n\r\n=== PROTOCOL RULES ===\r\n{{protocol_rules}}\r\n",
		"=== SYSTEM CORE ===\nCore \xe2\x80\n=== PROTOCOL RULES ===\n{{protocol_rules}}\n\xa8 tail\n\n" + ContextHeader + "\n{{runtime_context}}\n",
		"Intro.\nOUTPUT FORMAT:\nlines\n=== AVAILABLE TOOLS ===\n{{tools}}\n   \n"}
	for _, name := range []string{"base_tool_call_v2", "base_legacy_v1"} {
		d, ok := builtin.Template(name)
		if !ok {
			tb.Fatalf("no built-in template %s", name)
		}
		texts = append(texts, d.Text)
	}
	for i, text := range texts {
		for _, flags := range []uint8{0, flagNative | flagDatamark, flagStructured, flagStructured | flagRedact | flagMinimalTools, flagNoSources} {
			in := base
			in.template, in.flags = text, flags
			if i%2 == 1 {
				in.rules, in.app, in.toolDesc, in.directivesMax = "", " \t", "", 5
			}
			out = append(out, in)
		}
	}
	return out
}

// FuzzFrame holds Build (through a frame) to the section-by-section reference, byte for byte, sizes
// and JSON string included; and a frame reused for another request (the same directives and tools
// or others), and for layers it was not made of, to the same.
func FuzzFrame(f *testing.F) {
	for _, in := range frameSeeds(f) {
		f.Add(in.template, in.rules, in.app, in.directive, in.toolName, in.toolDesc, in.context, in.flags, in.directivesMax)
	}
	f.Fuzz(func(t *testing.T, template, rules, app, directive, toolName, toolDesc, context string, flags uint8, directivesMax int) {
		if directivesMax < 0 {
			directivesMax = -directivesMax
		}
		in := frameInput{template, rules, app, directive, toolName, toolDesc, context, flags, directivesMax}
		tm, l, s, ok := in.build(t)
		if !ok {
			return
		}
		want := buildReference(tm, l, s)
		fr := NewFrame(tm, l, s)
		first := fr.Build(l, s)
		samePrompt(t, "fresh frame", first, want)

		// The same frame for another request of the same template and protocol.
		other := l
		other.Application = []string{toolDesc, app + app}
		other.Directives = nil
		other.Tools = other.Tools[1:]
		other.Sources = nil
		other.Meta.Sources = nil
		samePrompt(t, "reused frame", fr.Build(other, s), buildReference(tm, other, s))
		samePrompt(t, "reused frame, first request again", fr.Build(l, s), want)
		if first.System() != want.System() {
			t.Fatal("a later Build changed an earlier prompt")
		}

		// The frame keeps the first request's directives and tools blocks: a request with the same
		// tools but another description, or under another cap or tool mode, gets its own.
		desc := l
		desc.Tools = []policy.Tool{{Name: toolName, Description: toolDesc + "."}, {Name: "calc"}}
		samePrompt(t, "reused frame, another description", fr.Build(desc, s), buildReference(tm, desc, s))
		caps := s
		caps.DirectivesMaxChars = (s.DirectivesMaxChars + 7) % 4000
		if caps.ToolDefsMode == ToolDefsMinimal {
			caps.ToolDefsMode = ToolDefsFull
		} else {
			caps.ToolDefsMode = ToolDefsMinimal
		}
		samePrompt(t, "reused frame, other caps", fr.Build(l, caps), buildReference(tm, l, caps))

		// Layers and settings the frame was not made of: the prompt is theirs all the same.
		diff := l
		diff.Rules = rules + " more"
		diff.NativeTools = !l.NativeTools
		ds := s
		ds.StructuredChannel, ds.DatamarkToolOutput = !s.StructuredChannel, !s.DatamarkToolOutput
		samePrompt(t, "frame of other layers", fr.Build(diff, ds), buildReference(tm, diff, ds))
	})
}

// TestNewPrompt: a prompt made of a text has that text as System and its JSON string, valid
// UTF-8 or not.
func TestNewPrompt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ system, want string }{
		{"changed \"here\"", `"changed \"here\""`},
		{"", `""`},
		{"bad \xff\xe2\x80 end", `"bad \ufffd\ufffd\ufffd end"`},
	} {
		p := NewPrompt(tc.system)
		if p.System() != tc.system {
			t.Errorf("NewPrompt(%q): System %q", tc.system, p.System())
		}
		if got := string(p.AppendSystemJSON([]byte("x"))); got != "x"+tc.want {
			t.Errorf("NewPrompt(%q).AppendSystemJSON = %s, want x%s", tc.system, got, tc.want)
		}
	}
}

// FuzzAppendJSONString holds AppendJSONString to encoding/json's Encoder without HTML escaping.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/\b\f\n\r\t\x00\x1f\x7f", "<&>", "é—\u2028\u2029\u0085", "\xff\xe2\x80", "a\xe2\x80\xa8b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var enc bytes.Buffer
		e := json.NewEncoder(&enc)
		e.SetEscapeHTML(false)
		if err := e.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(enc.Bytes(), []byte("\n"))
		if got := AppendJSONString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Fatalf("AppendJSONString(%q) = %s, want %s", s, got, want)
		}
		var b bytes.Buffer
		b.WriteString("y")
		WriteJSONString(&b, s)
		if !bytes.Equal(b.Bytes()[1:], want) {
			t.Fatalf("WriteJSONString(%q) = %s, want %s", s, b.Bytes(), want)
		}
	})
}
