package assembly

import (
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy"
)

const (
	coreSection = "=== SYSTEM CORE ===\nCore rules.\n\n"
	// ctxEmpty and ctxRequest are the context lines of Meta{Protocol: "tech"} without and with the
	// request source.
	ctxEmpty   = `{"meta":{"protocol":"tech","sources":[],"truncated":false}}`
	ctxRequest = `{"meta":{"protocol":"tech","sources":["request"],"truncated":false},"request":{"a":"x\ny"}}`
)

func requestSource(t testing.TB) []ctxjson.Source {
	t.Helper()
	v, err := ctxjson.Parse([]byte(`{"a":"x\ny"}`))
	if err != nil {
		t.Fatal(err)
	}
	return []ctxjson.Source{{Name: "request", Value: v}}
}

// fullLayers fills every block.
func fullLayers(t testing.TB) Layers {
	return Layers{
		Rules:       "  Sé breve.\n",
		Application: []string{"App one.", "  ", "=== SYSTEM CORE ===\nApp two."},
		Directives:  []string{"d1", " ", "d2"},
		Meta:        ctxjson.Meta{Protocol: "tech", Sources: []string{"request"}},
		Sources:     requestSource(t),
		Tools:       []policy.Tool{{Name: "search", Description: "Find\nthings."}, {Name: "calc"}},
	}
}

func TestBuildFull(t *testing.T) {
	tm := ParseTemplate("t", 1, layeredText)
	p := Build(tm, fullLayers(t), DefaultSettings())
	want := coreSection +
		"=== PROTOCOL RULES ===\nSé breve.\n\n" +
		"=== APPLICATION INSTRUCTIONS ===\nApp one.\n\n> === SYSTEM CORE ===\nApp two.\n\n" +
		"=== RUNTIME DIRECTIVES ===\n- d1\n- d2\n\n" +
		ContextHeader + "\n" + ctxRequest + "\n\n" +
		"=== AVAILABLE TOOLS ===\n- search: Find things.\n- calc"
	if p.System() != want {
		t.Fatalf("System:\n got %q\nwant %q", p.System(), want)
	}
	if p.ContextMessage != "" || string(p.ContextJSON) != ctxRequest || p.ContextTruncated || p.DirectivesTruncated {
		t.Errorf("ContextMessage %q, ContextJSON %s, truncated %v/%v", p.ContextMessage, p.ContextJSON, p.ContextTruncated, p.DirectivesTruncated)
	}
	// Sizes are code points: "é" and "—" are one each although they take 2 and 3 bytes.
	if got, want := p.Sizes.TemplateChars, len(layeredText)-2; got != want {
		t.Errorf("TemplateChars = %d, want %d", got, want)
	}
	if got, want := p.Sizes.FilledChars, len(want)-1-2; got != want {
		t.Errorf("FilledChars = %d, want %d", got, want)
	}
	wantBlocks := map[string]int{
		BlockCore:        33, // the whole section, header and blank line included
		BlockRules:       9,  // "Sé breve."
		BlockApplication: 40, // "App one.\n\n> === SYSTEM CORE ===\nApp two."
		BlockDirectives:  9,  // "- d1\n- d2"
		BlockContext:     len(ctxRequest),
		BlockTools:       29, // "- search: Find things.\n- calc"
	}
	if !maps.Equal(p.Sizes.Blocks, wantBlocks) {
		t.Errorf("Blocks = %v, want %v", p.Sizes.Blocks, wantBlocks)
	}
}

func TestBuildLeavesOutEmptyBlocks(t *testing.T) {
	tm := ParseTemplate("t", 1, layeredText)
	headers := map[string]string{
		BlockRules:       "=== PROTOCOL RULES ===",
		BlockApplication: "=== APPLICATION INSTRUCTIONS ===",
		BlockDirectives:  "=== RUNTIME DIRECTIVES ===",
		BlockTools:       "=== AVAILABLE TOOLS ===",
	}
	tests := []struct {
		block string
		empty func(*Layers)
	}{
		{BlockRules, func(l *Layers) { l.Rules = " \n\t" }},
		{BlockApplication, func(l *Layers) { l.Application = []string{"", " \r\n "} }},
		{BlockDirectives, func(l *Layers) { l.Directives = nil }},
		{BlockDirectives, func(l *Layers) { l.Directives = []string{"\n", "\u2028"} }},
		{BlockTools, func(l *Layers) { l.Tools = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.block, func(t *testing.T) {
			l := fullLayers(t)
			tt.empty(&l)
			p := Build(tm, l, DefaultSettings())
			for block, h := range headers {
				if got, want := strings.Contains(p.System(), h), block != tt.block; got != want {
					t.Errorf("header %q present = %v, want %v", h, got, want)
				}
				if _, ok := p.Sizes.Blocks[block]; ok != (block != tt.block) {
					t.Errorf("Blocks[%s] present = %v", block, ok)
				}
			}
			if !strings.HasPrefix(p.System(), coreSection) || !strings.Contains(p.System(), "\n\n"+ContextHeader+"\n"+ctxRequest) {
				t.Errorf("SYSTEM CORE or RUNTIME CONTEXT missing:\n%s", p.System())
			}
			if strings.Contains(p.System(), "{{") || strings.Contains(p.System(), "\n\n\n") {
				t.Errorf("a placeholder or a double blank line is left:\n%q", p.System())
			}
		})
	}

	t.Run("all", func(t *testing.T) {
		p := Build(tm, Layers{Meta: ctxjson.Meta{Protocol: "tech"}}, DefaultSettings())
		if want := coreSection + ContextHeader + "\n" + ctxEmpty; p.System() != want {
			t.Errorf("System:\n got %q\nwant %q", p.System(), want)
		}
		if want := map[string]int{BlockCore: 33, BlockContext: len(ctxEmpty)}; !maps.Equal(p.Sizes.Blocks, want) {
			t.Errorf("Blocks = %v, want %v", p.Sizes.Blocks, want)
		}
	})
}

// TestBuildOrder checks that the blocks come in the template's order, whatever the order in which
// the layers are filled, and that a header without a placeholder is kept as written.
func TestBuildOrder(t *testing.T) {
	tm := ParseTemplate("t", 1, "=== SYSTEM CORE ===\nC\n=== AVAILABLE TOOLS ===\n{{tools}}\n=== NOTE ===\nN\n=== PROTOCOL RULES ===\n{{protocol_rules}}\n")
	p := Build(tm, Layers{Rules: "R", Tools: []policy.Tool{{Name: "t"}}}, DefaultSettings())
	if want := "=== SYSTEM CORE ===\nC\n=== AVAILABLE TOOLS ===\n- t\n=== NOTE ===\nN\n=== PROTOCOL RULES ===\nR"; p.System() != want {
		t.Errorf("System:\n got %q\nwant %q", p.System(), want)
	}
}

const legacyText = "You are helpful.\n\nOUTPUT FORMAT:\nUse TOOL_CALL lines.\n\nSafety: decline harm.\n"

func TestBuildLegacy(t *testing.T) {
	tm := ParseTemplate("legacy", 1, legacyText)
	if tm.Layered {
		t.Fatal("legacy template parsed as layered")
	}
	kept := "You are helpful.\n\nOUTPUT FORMAT:\nUse TOOL_CALL lines.\n\nSafety: decline harm."
	tests := []struct {
		name   string
		layers Layers
		want   string
		blocks map[string]int
	}{
		{"nothing", Layers{}, kept, map[string]int{}},
		{"rules", Layers{Rules: "Rules."}, kept + "\n\n=== PROTOCOL RULES ===\nRules.", map[string]int{BlockRules: 6}},
		{
			"no sources, no context",
			Layers{Rules: "Rules.", Meta: ctxjson.Meta{Protocol: "tech"}, Tools: []policy.Tool{{Name: "a", Description: "A."}}},
			kept + "\n\n=== PROTOCOL RULES ===\nRules.\n\n=== AVAILABLE TOOLS ===\n- a: A.",
			map[string]int{BlockRules: 6, BlockTools: 7},
		},
		{
			"everything",
			fullLayers(t),
			kept + "\n\n=== PROTOCOL RULES ===\nSé breve." +
				"\n\n=== APPLICATION INSTRUCTIONS ===\nApp one.\n\n> === SYSTEM CORE ===\nApp two." +
				"\n\n=== RUNTIME DIRECTIVES ===\n- d1\n- d2" +
				"\n\n" + ContextHeader + "\n" + ctxRequest +
				"\n\n=== AVAILABLE TOOLS ===\n- search: Find things.\n- calc",
			map[string]int{BlockRules: 9, BlockApplication: 40, BlockDirectives: 9, BlockContext: len(ctxRequest), BlockTools: 29},
		},
		{
			"native tools strip OUTPUT FORMAT to the end",
			Layers{Rules: "Rules.", NativeTools: true},
			"You are helpful.\n\n=== PROTOCOL RULES ===\nRules.",
			map[string]int{BlockRules: 6},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Build(tm, tt.layers, DefaultSettings())
			if p.System() != tt.want {
				t.Errorf("System:\n got %q\nwant %q", p.System(), tt.want)
			}
			if !maps.Equal(p.Sizes.Blocks, tt.blocks) {
				t.Errorf("Blocks = %v, want %v", p.Sizes.Blocks, tt.blocks)
			}
			if p.Sizes.TemplateChars != len(legacyText) || p.Sizes.FilledChars != utf8.RuneCountInString(tt.want) {
				t.Errorf("TemplateChars %d, FilledChars %d", p.Sizes.TemplateChars, p.Sizes.FilledChars)
			}
		})
	}
}

func TestBuildOutputFormat(t *testing.T) {
	tm := ParseTemplate("t", 1, "=== SYSTEM CORE ===\nCore.\n\n  OUTPUT FORMAT:\nUse TOOL_CALL.\n\n"+
		"=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n=== NOTES ===\nKeep me.\nOUTPUT FORMAT: second\nDrop me too.\n"+
		ContextHeader+"\n{{runtime_context}}\n")
	l := Layers{Rules: "R", Meta: ctxjson.Meta{Protocol: "tech"}}
	p := Build(tm, l, DefaultSettings())
	want := "=== SYSTEM CORE ===\nCore.\n\n  OUTPUT FORMAT:\nUse TOOL_CALL.\n\n=== PROTOCOL RULES ===\nR\n\n" +
		"=== NOTES ===\nKeep me.\nOUTPUT FORMAT: second\nDrop me too.\n" + ContextHeader + "\n" + ctxEmpty
	if p.System() != want {
		t.Errorf("without native tools:\n got %q\nwant %q", p.System(), want)
	}
	l.NativeTools = true
	p = Build(tm, l, DefaultSettings())
	want = "=== SYSTEM CORE ===\nCore.\n\n=== PROTOCOL RULES ===\nR\n\n=== NOTES ===\nKeep me.\n" + ContextHeader + "\n" + ctxEmpty
	if p.System() != want {
		t.Errorf("with native tools:\n got %q\nwant %q", p.System(), want)
	}
	// The core block's size is what is left of it.
	if got := p.Sizes.Blocks[BlockCore]; got != len("=== SYSTEM CORE ===\nCore.\n\n") {
		t.Errorf("Blocks[core] = %d", got)
	}
}

func TestBuildStructuredChannel(t *testing.T) {
	tm := ParseTemplate("t", 1, layeredText)
	l := Layers{Meta: ctxjson.Meta{Protocol: "tech"}, Sources: requestSource(t)}
	s := DefaultSettings()
	s.StructuredChannel = true

	p := Build(tm, l, s) // redacted by default
	if want := ContextHeader + "\n" + ctxRequest; p.ContextMessage != want {
		t.Errorf("ContextMessage:\n got %q\nwant %q", p.ContextMessage, want)
	}
	if string(p.ContextJSON) != ctxRequest {
		t.Errorf("ContextJSON = %s", p.ContextJSON)
	}
	if want := coreSection + ContextHeader + "\n(the runtime context JSON is in the next system message)"; p.System() != want {
		t.Errorf("redacted System:\n got %q\nwant %q", p.System(), want)
	}
	if got := p.Sizes.Blocks[BlockContext]; got != utf8.RuneCountInString(contextPointer) {
		t.Errorf("Blocks[context] = %d, want the pointer's length", got)
	}

	s.RedactInSystem = false
	p = Build(tm, l, s)
	if want := ContextHeader + "\n" + ctxRequest; p.ContextMessage != want {
		t.Errorf("ContextMessage:\n got %q\nwant %q", p.ContextMessage, want)
	}
	if want := coreSection + ContextHeader + "\n" + ctxRequest; p.System() != want {
		t.Errorf("unredacted System:\n got %q\nwant %q", p.System(), want)
	}

	s.StructuredChannel = false // RedactInSystem alone does nothing
	s.RedactInSystem = true
	if p = Build(tm, l, s); p.ContextMessage != "" || !strings.HasSuffix(p.System(), ctxRequest) {
		t.Errorf("without the channel: ContextMessage %q, System %q", p.ContextMessage, p.System())
	}
}

func TestBuildContextTruncated(t *testing.T) {
	v, err := ctxjson.Parse([]byte(`{"text":"` + strings.Repeat("x", 500) + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	s := DefaultSettings()
	s.ContextMaxChars = 100
	p := Build(ParseTemplate("t", 1, layeredText), Layers{Meta: ctxjson.Meta{Protocol: "tech"}, Sources: []ctxjson.Source{{Name: "request", Value: v}}}, s)
	if !p.ContextTruncated || utf8.RuneCount(p.ContextJSON) > 100 || !strings.Contains(string(p.ContextJSON), `"truncated":true`) {
		t.Errorf("truncated %v, line %s", p.ContextTruncated, p.ContextJSON)
	}
	if !strings.HasSuffix(p.System(), ContextHeader+"\n"+string(p.ContextJSON)) {
		t.Errorf("System does not end with the truncated line: %q", p.System())
	}
}

func TestRenderDirectives(t *testing.T) {
	tests := []struct {
		name      string
		ds        []string
		max       int
		want      string
		truncated bool
	}{
		{"none", nil, 100, "", false},
		{"blank ones skipped", []string{" ", "a", "\n"}, 100, "- a", false},
		{"fits exactly", []string{"abc", "defghij"}, 15, "- abc\n- defghij", false},
		{"one over: cut with …", []string{"abc", "defghij"}, 14, "- abc\n- defgh…", true},
		{"one over with no room left: dropped", []string{"abc", "de"}, 9, "- abc", true},
		{"room of four", []string{"abc", "defghij"}, 10, "- abc\n- d…", true},
		{"room of three: dropped", []string{"abc", "defghij"}, 9, "- abc", true},
		{"rest dropped after a cut", []string{"abcdef", "g", "h"}, 6, "- abc…", true},
		{"code points, not bytes", []string{"héllo wörld"}, 8, "- héllo…", true},
		{"multi-byte fits exactly", []string{"héllo wörld"}, 13, "- héllo wörld", false},
		{"first too long for any room", []string{"abcdef"}, 3, "", true},
		{"cap 0", []string{"a"}, 0, "", true},
		{"negative cap", []string{"a"}, -1, "", true},
		{"multi-line folded", []string{"  one\ntwo\r\nthree\u2028four\u0085five\vsix\fseven\u2029eight\rnine "}, 100,
			"- one two three four five six seven eight nine", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, trunc := renderDirectives(tt.ds, tt.max)
			if got != tt.want || trunc != tt.truncated {
				t.Errorf("renderDirectives(%q, %d) = %q, %v; want %q, %v", tt.ds, tt.max, got, trunc, tt.want, tt.truncated)
			}
			if tt.max > 0 && utf8.RuneCountInString(got) > tt.max {
				t.Errorf("%d code points over the cap %d", utf8.RuneCountInString(got), tt.max)
			}
		})
	}
}

func TestBuildDirectivesCap(t *testing.T) {
	tm := ParseTemplate("t", 1, layeredText)
	s := DefaultSettings()
	s.DirectivesMaxChars = 0
	p := Build(tm, Layers{Directives: []string{"a"}}, s)
	if strings.Contains(p.System(), "RUNTIME DIRECTIVES") || !p.DirectivesTruncated {
		t.Errorf("cap 0: truncated %v, System %q", p.DirectivesTruncated, p.System())
	}
	s.DirectivesMaxChars = 14
	p = Build(tm, Layers{Directives: []string{"abc", "defghij\nklm"}}, s)
	if !strings.Contains(p.System(), "=== RUNTIME DIRECTIVES ===\n- abc\n- defgh…\n\n") || !p.DirectivesTruncated || p.Sizes.Blocks[BlockDirectives] != 14 {
		t.Errorf("cap 14: truncated %v, size %d, System %q", p.DirectivesTruncated, p.Sizes.Blocks[BlockDirectives], p.System())
	}
}

func TestRenderTools(t *testing.T) {
	tools := []policy.Tool{
		{Name: "search", Description: "  Find\r\nthings\u2028in the\u2029docs.\n"},
		{Name: "calc", Description: " \n "},
		{Name: "multi\nline", Description: "x"},
	}
	if got, want := renderTools(tools, ToolDefsFull), "- search: Find things in the docs.\n- calc\n- multi line: x"; got != want {
		t.Errorf("full:\n got %q\nwant %q", got, want)
	}
	if got, want := renderTools(tools, ToolDefsMinimal), "- search\n- calc\n- multi line"; got != want {
		t.Errorf("minimal:\n got %q\nwant %q", got, want)
	}
	if got := renderTools(nil, ToolDefsFull); got != "" {
		t.Errorf("no tools: %q", got)
	}
	s := DefaultSettings()
	s.ToolDefsMode = ToolDefsMinimal
	p := Build(ParseTemplate("t", 1, layeredText), Layers{Tools: tools[:1]}, s)
	if !strings.HasSuffix(p.System(), "=== AVAILABLE TOOLS ===\n- search") {
		t.Errorf("minimal mode in Build: %q", p.System())
	}
}

func TestCutRunes(t *testing.T) {
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{
		{"héllo", 2, "hé"}, {"héllo", 5, "héllo"}, {"héllo", 9, "héllo"}, {"héllo", 0, ""}, {"héllo", -1, ""}, {"", 3, ""},
	} {
		if got := cutRunes(tt.s, tt.n); got != tt.want {
			t.Errorf("cutRunes(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
