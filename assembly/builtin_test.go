package assembly

import (
	"strings"
	"testing"

	"github.com/promptgate/promptgate/store/builtin"
)

func builtinTemplate(tb testing.TB, name string) *Template {
	tb.Helper()
	d, ok := builtin.Template(name)
	if !ok {
		tb.Fatalf("no built-in template %s", name)
	}
	return ParseTemplate(d.Name, 0, d.Text)
}

// TestBuiltinTemplates checks that the shipped templates parse as the contract says:
// base_tool_call_v2 layered with the six blocks in order, base_legacy_v1 legacy with an OUTPUT
// FORMAT part.
func TestBuiltinTemplates(t *testing.T) {
	v2 := builtinTemplate(t, "base_tool_call_v2")
	var blocks []string
	for _, s := range v2.sections {
		blocks = append(blocks, s.block)
	}
	want := []string{BlockCore, BlockRules, BlockApplication, BlockDirectives, BlockContext, BlockTools}
	if !v2.Layered || strings.Join(blocks, ",") != strings.Join(want, ",") {
		t.Errorf("base_tool_call_v2: layered %v, blocks %v; want %v", v2.Layered, blocks, want)
	}
	if !strings.Contains(v2.Text, ContextHeader+"\n"+PhContext) {
		t.Error("base_tool_call_v2 lacks the RUNTIME CONTEXT header ContextHeader names")
	}
	v1 := builtinTemplate(t, "base_legacy_v1")
	hasOutFmt := false
	for _, s := range v1.sections {
		hasOutFmt = hasOutFmt || s.outputFormat
	}
	if v1.Layered || !hasOutFmt {
		t.Errorf("base_legacy_v1: layered %v, OUTPUT FORMAT part %v", v1.Layered, hasOutFmt)
	}
	p := Build(v1, Layers{Rules: "R", NativeTools: true}, DefaultSettings())
	if strings.Contains(p.System(), "OUTPUT FORMAT") || strings.Contains(p.System(), "TOOL_CALL") || !strings.HasSuffix(p.System(), "\n\n=== PROTOCOL RULES ===\nR") {
		t.Errorf("base_legacy_v1 with native tools:\n%s", p.System())
	}
}
