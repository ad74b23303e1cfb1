package assembly

import (
	"strings"
	"unicode/utf8"

	"github.com/promptgate/promptgate/assembly/ctxjson"
)

// buildReference is Build written straight, section by section, without a frame: the tests hold
// Build to its bytes.
func buildReference(t *Template, l Layers, s Settings) Prompt {
	var p Prompt
	p.ContextJSON, p.ContextTruncated = ctxjson.Build(l.Meta, l.Sources, s.ContextMaxChars, s.Budgets)
	directives, dTrunc := renderDirectives(l.Directives, s.DirectivesMaxChars)
	p.DirectivesTruncated = dTrunc
	p.DatamarkToolOutput = s.DatamarkToolOutput
	values := map[string]string{
		BlockRules:       rulesWithDatamark(strings.TrimSpace(l.Rules), s.DatamarkToolOutput),
		BlockApplication: renderApplication(l.Application),
		BlockDirectives:  directives,
		BlockContext:     string(p.ContextJSON),
		BlockTools:       renderTools(l.Tools, s.ToolDefsMode),
	}
	if s.StructuredChannel {
		p.ContextMessage = ContextHeader + "\n" + string(p.ContextJSON)
		if s.RedactInSystem {
			values[BlockContext] = contextPointer
		}
	}
	p.Sizes = Sizes{TemplateChars: utf8.RuneCountInString(t.Text), Blocks: map[string]int{}}

	var b strings.Builder
	b.Grow(len(t.Text) + len(p.ContextJSON) + 1024)
	for _, sec := range t.sections {
		if sec.outputFormat && l.NativeTools {
			continue
		}
		if sec.ph == "" {
			b.WriteString(sec.text)
			if sec.block == BlockCore {
				p.Sizes.Blocks[BlockCore] += utf8.RuneCountInString(sec.text)
			}
			continue
		}
		v := values[sec.block]
		if v == "" && sec.block != BlockContext {
			continue // an empty block is left out, header included
		}
		b.WriteString(strings.Replace(sec.text, sec.ph, v, 1))
		p.Sizes.Blocks[sec.block] = utf8.RuneCountInString(v)
	}
	if !t.Layered {
		appendLegacyReference(&b, values, l, &p.Sizes)
	}
	sys := NewPrompt(strings.TrimRight(b.String(), " \t\r\n"))
	p.system, p.systemLen, p.systemValid = sys.system, sys.systemLen, sys.systemValid
	p.Sizes.FilledChars = utf8.RuneCountInString(p.System())
	return p
}

// appendLegacyReference adds the layers a legacy template has no placeholders for: the protocol
// rules always (when there are any), then the other non-empty blocks, so that nothing the client or
// operator gave is lost. The runtime context is appended only when there is data in it.
func appendLegacyReference(b *strings.Builder, values map[string]string, l Layers, sz *Sizes) {
	add := func(block, header string) {
		v := values[block]
		if v == "" {
			return
		}
		trimmed := strings.TrimRight(b.String(), " \t\r\n")
		b.Reset()
		b.WriteString(trimmed)
		b.WriteString("\n\n")
		b.WriteString(header)
		b.WriteString("\n")
		b.WriteString(v)
		sz.Blocks[block] = utf8.RuneCountInString(v)
	}
	add(BlockRules, headerRules)
	add(BlockApplication, headerApplication)
	add(BlockDirectives, headerDirectives)
	if len(l.Sources) > 0 {
		add(BlockContext, ContextHeader)
	}
	add(BlockTools, headerTools)
}
