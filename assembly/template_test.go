package assembly

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/store/builtin"
)

// layeredText is a small layered template with every block, in the contract's order.
const layeredText = "=== SYSTEM CORE ===\nCore rules.\n\n" +
	"=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n" +
	"=== APPLICATION INSTRUCTIONS ===\n{{application_instructions}}\n\n" +
	"=== RUNTIME DIRECTIVES ===\n{{runtime_directives}}\n\n" +
	ContextHeader + "\n{{runtime_context}}\n\n" +
	"=== AVAILABLE TOOLS ===\n{{tools}}\n"

func TestParseTemplate(t *testing.T) {
	layeredSections := []section{
		{text: "=== SYSTEM CORE ===\nCore rules.\n\n", block: BlockCore},
		{text: "=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n", ph: PhRules, block: BlockRules},
		{text: "=== APPLICATION INSTRUCTIONS ===\n{{application_instructions}}\n\n", ph: PhApplication, block: BlockApplication},
		{text: "=== RUNTIME DIRECTIVES ===\n{{runtime_directives}}\n\n", ph: PhDirectives, block: BlockDirectives},
		{text: ContextHeader + "\n{{runtime_context}}\n\n", ph: PhContext, block: BlockContext},
		{text: "=== AVAILABLE TOOLS ===\n{{tools}}\n", ph: PhTools, block: BlockTools},
	}
	tests := []struct {
		name     string
		text     string
		layered  bool
		sections []section
	}{
		{"layered", layeredText, true, layeredSections},
		{
			"no trailing newline",
			"=== SYSTEM CORE ===\nCore.\n\n=== AVAILABLE TOOLS ===\n{{tools}}",
			true,
			[]section{
				{text: "=== SYSTEM CORE ===\nCore.\n\n", block: BlockCore},
				{text: "=== AVAILABLE TOOLS ===\n{{tools}}", ph: PhTools, block: BlockTools},
			},
		},
		{
			// CRLF (and lone CR) line ends are read as LF; without that a lone CR hid every header.
			"crlf",
			"=== SYSTEM CORE ===\r\nCore.\r\n\r\n=== PROTOCOL RULES ===\r\n{{protocol_rules}}\r\n\r\n  OUTPUT FORMAT:\r\nplain\r\n",
			true,
			[]section{
				{text: "=== SYSTEM CORE ===\nCore.\n\n", block: BlockCore},
				{text: "=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n", ph: PhRules, block: BlockRules},
				{text: "  OUTPUT FORMAT:\nplain\n", block: BlockOther, outputFormat: true},
			},
		},
		{
			"lone cr",
			"=== SYSTEM CORE ===\rCore.\r\r=== AVAILABLE TOOLS ===\r{{tools}}",
			true,
			[]section{
				{text: "=== SYSTEM CORE ===\nCore.\n\n", block: BlockCore},
				{text: "=== AVAILABLE TOOLS ===\n{{tools}}", ph: PhTools, block: BlockTools},
			},
		},
		{
			"indented headers and output format",
			"\t=== SYSTEM CORE ===\nCore.\n    OUTPUT FORMAT: json\nUse TOOL_CALL.\n\n  === RUNTIME CONTEXT ===\n{{runtime_context}}\n",
			true,
			[]section{
				{text: "\t=== SYSTEM CORE ===\nCore.\n", block: BlockCore},
				{text: "    OUTPUT FORMAT: json\nUse TOOL_CALL.\n\n", block: BlockOther, outputFormat: true},
				{text: "  === RUNTIME CONTEXT ===\n{{runtime_context}}\n", ph: PhContext, block: BlockContext},
			},
		},
		{
			// The OUTPUT FORMAT part ends at the next header; text before it in the same block
			// stays.
			"output format inside a block",
			"=== SYSTEM CORE ===\nA.\nOUTPUT FORMAT:\nB.\n=== X ===\nC.\n=== SYSTEM CORE 2 ===\n",
			false,
			[]section{
				{text: "=== SYSTEM CORE ===\nA.\n", block: BlockCore},
				{text: "OUTPUT FORMAT:\nB.\n", block: BlockOther, outputFormat: true},
				{text: "=== X ===\nC.\n", block: BlockOther},
				{text: "=== SYSTEM CORE 2 ===\n", block: BlockCore},
			},
		},
		{
			"legacy",
			"You are helpful.\n\nOUTPUT FORMAT:\nReply in text.\n\nSafety: decline harm.",
			false,
			[]section{
				{text: "You are helpful.\n\n", block: BlockOther},
				{text: "OUTPUT FORMAT:\nReply in text.\n\nSafety: decline harm.", block: BlockOther, outputFormat: true},
			},
		},
		{"empty", "", false, nil},
		{
			// A RUNTIME CONTEXT header without the placeholder is static text of the context block.
			"static context header",
			"=== RUNTIME CONTEXT ===\nnone\n",
			false,
			[]section{{text: "=== RUNTIME CONTEXT ===\nnone\n", block: BlockContext}},
		},
		{
			// A header-less preamble is its own section; a placeholder in it still makes the
			// template layered.
			"preamble with placeholder",
			"Intro {{tools}}\n=== SYSTEM CORE ===\n",
			true,
			[]section{
				{text: "Intro {{tools}}\n", ph: PhTools, block: BlockTools},
				{text: "=== SYSTEM CORE ===\n", block: BlockCore},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := ParseTemplate("tpl", 3, tt.text)
			if tm.Name != "tpl" || tm.Version != 3 || tm.Text != tt.text {
				t.Errorf("name, version, text = %q, %d, %q; want tpl, 3 and the input", tm.Name, tm.Version, tm.Text)
			}
			if tm.Layered != tt.layered {
				t.Errorf("Layered = %v, want %v", tm.Layered, tt.layered)
			}
			if !reflect.DeepEqual(tm.sections, tt.sections) {
				t.Errorf("sections:\n got %#v\nwant %#v", tm.sections, tt.sections)
			}
		})
	}
}

// TestParseTemplateEachPlaceholder checks that any one placeholder makes a template layered and
// maps to its block.
func TestParseTemplateEachPlaceholder(t *testing.T) {
	for _, p := range []struct{ ph, block string }{
		{"{{protocol_rules}}", BlockRules},
		{"{{application_instructions}}", BlockApplication},
		{"{{runtime_directives}}", BlockDirectives},
		{"{{runtime_context}}", BlockContext},
		{"{{tools}}", BlockTools},
	} {
		tm := ParseTemplate("t", 1, "=== SYSTEM CORE ===\ncore\n=== H ===\n"+p.ph+"\n")
		if !tm.Layered {
			t.Errorf("%s: Layered = false", p.ph)
		}
		if len(tm.sections) != 2 || tm.sections[1].ph != p.ph || tm.sections[1].block != p.block {
			t.Errorf("%s: sections = %#v, want the second to hold it as %s", p.ph, tm.sections, p.block)
		}
	}
	if tm := ParseTemplate("t", 1, "=== H ===\n{{unknown}}\n{{ tools }}\n"); tm.Layered {
		t.Error("a template without a known placeholder is layered")
	}
}

func TestValidateTemplate(t *testing.T) {
	ok := []string{
		"=== SYSTEM CORE ===\nx\n\n=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n" + ContextHeader + "\n{{runtime_context}}\n",
		"legacy text without placeholders",
		"=== SYSTEM CORE ===\r\nx\r\n" + ContextHeader + "\r\n  {{runtime_context}}  \r\n",
	}
	for _, s := range ok {
		if err := ValidateTemplate(s); err != nil {
			t.Errorf("ValidateTemplate(%q) = %v", s, err)
		}
	}
	bad := map[string]string{
		"unknown placeholder":            "=== A ===\n{{persona}}\n",
		"unclosed":                       "=== A ===\n{{tools\n",
		"not alone on its line":          "=== AVAILABLE TOOLS ===\nTools: {{tools}}\n",
		"used twice":                     "=== AVAILABLE TOOLS ===\n{{tools}}\n=== MORE TOOLS ===\n{{tools}}\n",
		"two in one section":             "=== RULES ===\n{{protocol_rules}}\n{{application_instructions}}\n",
		"context under a trusted header": "=== PROTOCOL RULES ===\n{{runtime_context}}\n",
		"context without header":         "{{runtime_context}}\n",
		"layered without context":        "=== SYSTEM CORE ===\nx\n\n=== PROTOCOL RULES ===\n{{protocol_rules}}\n",
	}
	for name, s := range bad {
		if err := ValidateTemplate(s); err == nil || !strings.HasPrefix(err.Error(), "assembly: template: ") {
			t.Errorf("%s: ValidateTemplate(%q) = %v, want an error", name, s, err)
		}
	}
	// The contract's RUNTIME CONTEXT block is always there: the error says where the placeholder
	// goes.
	if err := ValidateTemplate(bad["layered without context"]); err == nil || !strings.Contains(err.Error(), PhContext) || !strings.Contains(err.Error(), ContextHeader) {
		t.Errorf("layered without context: %v", err)
	}
}

// TestValidateTemplateHeadersExact: each placeholder sits under its own block's header line,
// exactly; a header that merely mentions UNTRUSTED, or another block's header, is refused with a
// message naming the field and the header to use. The built-in templates pass.
func TestValidateTemplateHeadersExact(t *testing.T) {
	t.Parallel()
	core := "=== SYSTEM CORE ===\nrules\n\n"
	ctx := ContextHeader + "\n{{runtime_context}}\n"
	for name, tc := range map[string]struct{ text, want string }{
		"context under a core header that mentions UNTRUSTED": {
			"=== SYSTEM CORE (trusted, never UNTRUSTED) ===\n{{runtime_context}}\n", `under the header "=== SYSTEM CORE (trusted, never UNTRUSTED) ===", not its own`},
		"context under a look-alike header": {
			"=== RUNTIME CONTEXT (UNTRUSTED) ===\n{{runtime_context}}\n", ContextHeader},
		"a line between the context header and its placeholder": {
			core + ContextHeader + "\nfollow these rules\n{{runtime_context}}\n", "on the line right after its header"},
		"application instructions under SYSTEM CORE": {
			core + "{{application_instructions}}\n\n" + ctx, `{{application_instructions}} is under the header "=== SYSTEM CORE ==="`},
		"tools under SYSTEM CORE": {
			core + "{{tools}}\n\n" + ctx, `put it alone on the line after "=== AVAILABLE TOOLS ==="`},
		"rules under the directives header": {
			core + "=== RUNTIME DIRECTIVES ===\n{{protocol_rules}}\n\n" + ctx, `"=== PROTOCOL RULES ==="`},
		"tools before any header": {
			"{{tools}}\n" + core + ctx, "{{tools}} is under no header"},
		"header with leading blanks": {
			core + "  === AVAILABLE TOOLS ===\n{{tools}}\n" + ctx, "not its own"},
	} {
		err := ValidateTemplate(tc.text)
		if err == nil || !strings.HasPrefix(err.Error(), "assembly: template: text: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ValidateTemplate = %v, want an error naming text and %q", name, err, tc.want)
		}
	}
	ok := core + "=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n=== APPLICATION INSTRUCTIONS ===\nThe app says:\n{{application_instructions}}\n\n" +
		"=== RUNTIME DIRECTIVES ===\n{{runtime_directives}}\n\n" + ctx + "\n=== AVAILABLE TOOLS ===\n{{tools}}\n"
	if err := ValidateTemplate(ok); err != nil {
		t.Errorf("every placeholder under its own header: %v", err)
	}
	for _, d := range builtin.Templates() {
		if err := ValidateTemplate(gjson.GetBytes(d.Body, "text").String()); err != nil {
			t.Errorf("built-in %s: %v", d.Name, err)
		}
	}
}
