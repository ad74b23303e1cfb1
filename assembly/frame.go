package assembly

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy"
)

// Frame is the part of a layered prompt that is the same for every request of one template, one set
// of protocol rules and one tool mode: the template's text around the placeholders and the rules
// block, laid out once with their code point counts and already JSON-escaped, so that Build only
// renders and escapes what a request brings. It is immutable once made, so it may be cached (per
// definitions snapshot) and shared.
type Frame struct {
	t     *Template
	key   FrameKey
	parts []part
	// blocks are the sizes of the blocks that are fixed in the frame (SYSTEM CORE, the rules).
	blocks map[string]int
	// templateChars is the template's length in code points.
	templateChars int
	// context is the RUNTIME CONTEXT block's text where it is fixed (the structured channel's
	// pointer), else "".
	context string
	// directives and tools are the DIRECTIVES and TOOLS blocks of the request the frame was made
	// for: a later request with the same directives or tools (each request of a protocol and an
	// app, as a rule) takes them as they are instead of rendering them again. Set by NewFrame and
	// never written after.
	directives directivesMemo
	tools      toolsMemo
}

// directivesMemo is the DIRECTIVES block rendered of ds under a cap of max code points.
type directivesMemo struct {
	ds        []string
	max       int
	block     chunk
	truncated bool
}

// toolsMemo is the TOOLS block rendered of tools in mode.
type toolsMemo struct {
	tools []policy.Tool
	mode  string
	block chunk
}

// directivesBlock is renderDirectives(ds, max) as a chunk, from the memo where it holds them.
func (f *Frame) directivesBlock(ds []string, max int) (chunk, bool) {
	if m := &f.directives; max == m.max && slices.Equal(ds, m.ds) {
		return m.block, m.truncated
	}
	text, truncated := renderDirectives(ds, max)
	return requestChunk(text), truncated
}

// toolsBlock is renderTools(tools, mode) as a chunk, from the memo where it holds them: what the
// block shows of a tool is its name and description alone.
func (f *Frame) toolsBlock(tools []policy.Tool, mode string) chunk {
	if m := &f.tools; mode == m.mode && slices.EqualFunc(tools, m.tools, func(a, b policy.Tool) bool {
		return a.Name == b.Name && a.Description == b.Description
	}) {
		return m.block
	}
	return requestChunk(renderTools(tools, mode))
}

// FrameKey is what a Frame is made of, as far as it is not in the template's name and version.
type FrameKey struct {
	Template    string
	Version     int
	Rules       string
	NativeTools bool
	Datamark    bool
	Structured  bool
	Redact      bool
}

// FrameKeyOf is the key of the frame that Build of t, l and s uses.
func FrameKeyOf(t *Template, l Layers, s Settings) FrameKey {
	return FrameKey{
		Template: t.Name, Version: t.Version, Rules: l.Rules, NativeTools: l.NativeTools,
		Datamark: s.DatamarkToolOutput, Structured: s.StructuredChannel, Redact: s.StructuredChannel && s.RedactInSystem,
	}
}

// part is one step of a frame: a fixed text, or a block filled per request (block set).
type part struct {
	text  chunk
	block string
	// before and after are the section's text around its placeholder; for a block appended to a
	// legacy template, before is the block's header with its blank line, and after is empty.
	before, after chunk
	// keepEmpty writes the section even when the block is empty (the runtime context).
	keepEmpty bool
	// legacy appends the block to a legacy template: trailing blanks of what comes before are cut
	// first.
	legacy bool
}

// chunk is a piece of the system message: its text, its length in code points, and its JSON
// escaping (without quotes; nil: escaped when the message is finished).
type chunk struct {
	text  string
	runes int
	esc   []byte
	valid bool // text is valid UTF-8
}

func fixedChunk(s string) chunk {
	return chunk{text: s, runes: utf8.RuneCountInString(s), esc: appendEscaped(make([]byte, 0, len(s)), s), valid: utf8.ValidString(s)}
}

func requestChunk(s string) chunk {
	return chunk{text: s, runes: utf8.RuneCountInString(s), valid: utf8.ValidString(s)}
}

// NewFrame lays out the fixed part of t for the rules and tool mode of l and the settings s.
func NewFrame(t *Template, l Layers, s Settings) *Frame {
	f := &Frame{t: t, key: FrameKeyOf(t, l, s), blocks: map[string]int{}, templateChars: utf8.RuneCountInString(t.Text)}
	f.directives = directivesMemo{ds: slices.Clone(l.Directives), max: s.DirectivesMaxChars}
	text, truncated := renderDirectives(l.Directives, s.DirectivesMaxChars)
	f.directives.block, f.directives.truncated = fixedChunk(text), truncated // escaped once, too
	f.tools = toolsMemo{mode: s.ToolDefsMode, block: fixedChunk(renderTools(l.Tools, s.ToolDefsMode))}
	for _, t := range l.Tools {
		f.tools.tools = append(f.tools.tools, policy.Tool{Name: t.Name, Description: t.Description})
	}
	rules := rulesWithDatamark(strings.TrimSpace(l.Rules), s.DatamarkToolOutput)
	if f.key.Redact {
		f.context = contextPointer
	}
	var fixed strings.Builder // the fixed text since the last part
	flush := func() {
		if fixed.Len() > 0 {
			f.parts = append(f.parts, part{text: fixedChunk(fixed.String())})
			fixed.Reset()
		}
	}
	for _, sec := range t.sections {
		if sec.outputFormat && l.NativeTools {
			continue
		}
		if sec.ph == "" {
			fixed.WriteString(sec.text)
			if sec.block == BlockCore {
				f.blocks[BlockCore] += utf8.RuneCountInString(sec.text)
			}
			continue
		}
		before, after, _ := strings.Cut(sec.text, sec.ph)
		switch v, ok := f.fixedValue(sec.block, rules); {
		case ok && v == "" && sec.block != BlockContext:
			// an empty block is left out, header included
		case ok:
			fixed.WriteString(before)
			fixed.WriteString(v)
			fixed.WriteString(after)
			f.blocks[sec.block] = utf8.RuneCountInString(v)
		default:
			flush()
			f.parts = append(f.parts, part{block: sec.block, before: fixedChunk(before), after: fixedChunk(after), keepEmpty: sec.block == BlockContext})
		}
	}
	if !t.Layered {
		// The rules come first and are fixed: appended here as appendLegacy does, the other blocks
		// per request.
		if rules != "" {
			text := strings.TrimRight(fixed.String(), " \t\r\n")
			fixed.Reset()
			fixed.WriteString(text + "\n\n" + headerRules + "\n" + rules)
			f.blocks[BlockRules] = utf8.RuneCountInString(rules)
		}
		flush()
		for _, b := range []struct{ block, header string }{
			{BlockApplication, headerApplication}, {BlockDirectives, headerDirectives},
			{BlockContext, ContextHeader}, {BlockTools, headerTools},
		} {
			f.parts = append(f.parts, part{block: b.block, before: fixedChunk("\n\n" + b.header + "\n"), legacy: true})
		}
	}
	flush()
	return f
}

// fixedValue is the text of a block where the frame fixes it (the rules; the context pointer), ok
// false for a block filled per request.
func (f *Frame) fixedValue(block, rules string) (string, bool) {
	switch {
	case block == BlockRules:
		return rules, true
	case block == BlockContext && f.context != "":
		return f.context, true
	}
	return "", false
}

// Build fills the frame with the layers of one request. l's rules and tool mode and s's channel
// settings must be those the frame was made of; where they are not, a frame is made for them, so
// the prompt is always that of l and s.
func (f *Frame) Build(l Layers, s Settings) Prompt {
	if FrameKeyOf(f.t, l, s) != f.key {
		f = NewFrame(f.t, l, s)
	}
	var p Prompt
	p.ContextJSON, p.ContextTruncated = ctxjson.Build(l.Meta, l.Sources, s.ContextMaxChars, s.Budgets)
	p.DatamarkToolOutput = s.DatamarkToolOutput
	if s.StructuredChannel {
		p.ContextMessage = ContextHeader + "\n" + string(p.ContextJSON)
	}
	p.Sizes = Sizes{TemplateChars: f.templateChars, Blocks: make(map[string]int, len(f.blocks)+4)}
	for k, v := range f.blocks {
		p.Sizes.Blocks[k] = v
	}
	directives, dTrunc := f.directivesBlock(l.Directives, s.DirectivesMaxChars)
	p.DirectivesTruncated = dTrunc
	value := func(block string) chunk {
		switch block {
		case BlockApplication:
			return requestChunk(renderApplication(l.Application))
		case BlockDirectives:
			return directives
		case BlockContext:
			if f.context != "" {
				return requestChunk(f.context)
			}
			return requestChunk(string(p.ContextJSON))
		case BlockTools:
			return f.toolsBlock(l.Tools, s.ToolDefsMode)
		}
		return chunk{}
	}
	pieces := make([]chunk, 0, 3*len(f.parts))
	for _, pt := range f.parts {
		if pt.block == "" {
			pieces = append(pieces, pt.text)
			continue
		}
		if pt.legacy && pt.block == BlockContext && len(l.Sources) == 0 {
			continue // a legacy template gets the runtime context only when there is data in it
		}
		c := value(pt.block)
		if c.text == "" && !pt.keepEmpty {
			continue // an empty block is left out, header included
		}
		if pt.legacy {
			pieces = trimEnd(pieces)
		}
		pieces = append(pieces, pt.before, c, pt.after)
		p.Sizes.Blocks[pt.block] = c.runes
	}
	p.system = trimEnd(pieces)
	p.systemValid = true
	for _, c := range p.system {
		p.systemLen += len(c.text)
		p.Sizes.FilledChars += c.runes
		p.systemValid = p.systemValid && c.valid
	}
	if !p.systemValid {
		// Pieces of invalid UTF-8 are counted as one text: a sequence may run across two of them.
		p.Sizes.FilledChars = utf8.RuneCountInString(p.System())
	}
	return p
}

// trimEnd cuts the blanks (space, tab, CR, LF) at the end of the text the pieces make.
func trimEnd(pieces []chunk) []chunk {
	for len(pieces) > 0 {
		last := pieces[len(pieces)-1]
		text := strings.TrimRight(last.text, " \t\r\n")
		if text == "" {
			pieces = pieces[:len(pieces)-1]
			continue
		}
		if cut := last.text[len(text):]; cut != "" {
			c := chunk{text: text, runes: last.runes - len(cut), valid: last.valid}
			if last.esc != nil {
				n := len(cut) // a space is one byte escaped, a tab, CR or LF two
				for i := range len(cut) {
					if cut[i] != ' ' {
						n++
					}
				}
				c.esc = last.esc[:len(last.esc)-n]
			}
			pieces[len(pieces)-1] = c
		}
		return pieces
	}
	return pieces
}
