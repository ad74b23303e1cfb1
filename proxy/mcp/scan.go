package mcp

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"golang.org/x/text/unicode/norm"

	"github.com/promptgate/promptgate/proxy/mcppin"
)

// A tool's description is text the MCP server wrote, and the model reads it as the app's own: a
// "tool poisoning" attack hides instructions in it (read a file and pass it as an argument, mail a
// copy to an address, do not tell the user). The door reads descriptions as promptgate reads
// untrusted context: it looks for what the context defenses neutralise there (text that starts a
// section header of the system prompt, hidden characters, line-break tricks) and for the markers
// and phrases of published injections. A finding is a decision of the log, and it keeps a
// first-seen definition from being pinned without an operator's approval.

// instructionPatterns are the markers and phrases of published prompt injections (the corpus the
// tests read) that a tool's description has no reason to hold.
var instructionPatterns = []struct {
	name string
	re   *regexp.Regexp
}{
	{"an instruction block", regexp.MustCompile(`(?i)<\s*/?\s*(important|information|instructions?|system|admin|secret|hidden|assistant|user|context)\s*>`)},
	{"an instruction to drop earlier instructions", regexp.MustCompile(`(?i)\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|above|earlier|preceding|all|any|other|system)\b[^.\n]{0,20}\b(instructions?|rules|prompts?|directions|guidelines|context|messages?|tasks?)\b`)},
	{"an instruction to keep something from the user", regexp.MustCompile(`(?i)\b(do not|don't|never|without)\b[^.\n]{0,30}\b(tell|telling|inform|informing|mention|mentioning|notify|notifying|reveal|revealing|alert|asking)\b[^.\n]{0,20}\b(the user|users?|anyone|them|me)\b`)},
	{"a message to the model", regexp.MustCompile(`(?i)\b(this is an important message|to you,? the ai|you are now|new instructions?|as an ai (language )?model|ai assistant,? (you )?must)\b`)},
	{"an instruction to act before the task", regexp.MustCompile(`(?i)\bbefore (you (can )?(solve|do|answer|use|call|continue)|using this tool|calling (this|any) tool|answering)\b`)},
	{"a chat-template marker", regexp.MustCompile(`(?i)(\[/?inst\]|<\|im_(start|end)\|>|<\|(system|user|assistant)\|>|^\s*#{2,}\s*(system|instruction|response)\b)`)},
	{"a request to print or leak the prompt", regexp.MustCompile(`(?i)\b(print|repeat|reveal|output|show|spell(ed)? check)\b[^.\n]{0,30}\b(system prompt|previous (text|instructions)|above (text|prompt)|instructions above|prompt (text|above))\b`)},
	{"an instruction to drop the text around it", regexp.MustCompile(`(?i)\b(ignore|disregard|forget)\b\s+((your|the|all|any|my|other|previous|prior|above|these|those)\s+){0,2}(i?u?nstruc\w*|rest|content|data|everything|text)`)},
	{"a role marker", regexp.MustCompile(`(?im)((^|[\]>)]|--)\s*(system|assistant|user|admin)( message)?\s*:|\[(system|admin)\b|#{2,}\s*\(?system|<\|endoftext\|>|<end of session>|\bTODO:\s)`)},
	{"a note to the model", regexp.MustCompile(`(?i)\b(note to (automated|the) (analysis|ai|assistant|model|software)|follow (this |these |the )?instructions?|core instruction|stop everything|it is critical to my)\b`)},
	{"a text the model is told to repeat", regexp.MustCompile(`(?i)(\b(just|now|instead|and)\s+print\b|\bprint\s+"|\brepeat\b[^.\n]{0,30}(following|sentence|<))`)},
	{"a text the model is told to say", regexp.MustCompile(`(?i)\b(say|print|output|respond with|reply with|write)\b[^.\n]{0,12}\b(exactly|only|verbatim)\b`)},
}

// scanDefinition returns the findings of a definition: of its description, and of every text of its
// input schema and of its other members (titles, descriptions, defaults, enums, examples: a model
// or a user reads them as the tool's), each said where it is.
func scanDefinition(d mcppin.Definition) []string {
	out := scanDescription(d.Description)
	for _, part := range []struct {
		name string
		raw  []byte
	}{{"the input schema", d.InputSchema}, {"the other members", d.Extra}} {
		walkTexts(gjson.ParseBytes(part.raw), "", 0, func(key, s string) {
			for _, f := range scanText(s, key == "description" || key == "title") {
				out = append(out, f+" in "+part.name)
			}
		})
	}
	return out
}

// notText are the keys of a schema whose strings are not read as text (patterns, references,
// formats, types): they are not scanned.
var notText = []string{"pattern", "$ref", "$id", "$schema", "$anchor", "$dynamicRef", "$dynamicAnchor", "format",
	"contentEncoding", "contentMediaType", "type"}

// maxScanDepth bounds how deep a definition's texts are looked for.
const maxScanDepth = 32

// walkTexts calls f with every string of v and the key it is under (an array's strings are under
// the array's key), but the strings under notText keys.
func walkTexts(v gjson.Result, key string, depth int, f func(key, s string)) {
	switch {
	case depth > maxScanDepth:
	case v.Type == gjson.String:
		f(key, v.Str)
	case v.IsObject():
		v.ForEach(func(k, e gjson.Result) bool {
			if !slices.Contains(notText, k.Str) {
				walkTexts(e, k.Str, depth+1, f)
			}
			return true
		})
	case v.IsArray():
		v.ForEach(func(_, e gjson.Result) bool {
			walkTexts(e, key, depth+1, f)
			return true
		})
	}
}

// scanDescription returns the findings of one description: where and what, never the text found.
func scanDescription(s string) []string { return scanText(s, true) }

// scanText returns the findings of one text; headers says whether a line that starts like a
// section header counts (in a description or a title, not in a value such as an enum's "==").
func scanText(s string, headers bool) []string {
	var out []string
	if off, ok := hiddenAt(s); ok {
		out = append(out, fmt.Sprintf("hidden or bidi characters at offset %d", off))
	}
	if off, ok := headerLineAt(s); ok && headers {
		out = append(out, fmt.Sprintf("a line that starts like a section header of the system prompt at offset %d", off))
	}
	for _, p := range instructionPatterns {
		if loc := p.re.FindStringIndex(s); loc != nil {
			out = append(out, fmt.Sprintf("%s at offset %d", p.name, loc[0]))
		}
	}
	return out
}

// hiddenAt finds the first character a reader does not see but a model reads: tag characters (ASCII
// smuggling), bidi embeddings, overrides and isolates, and other format characters (zero-width
// spaces and joiners), and line breaks other than LF.
func hiddenAt(s string) (int, bool) {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			return i, true
		case r >= 0xE0000 && r <= 0xE007F, r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
			return i, true
		case unicode.Is(unicode.Cf, r):
			return i, true
		case r == '\r' || r == '\v' || r == '\f' || r == 0x85 || r == 0x2028 || r == 0x2029:
			return i, true
		}
	}
	return 0, false
}

// headerLineAt finds a line whose first visible character is '=' after NFKC folding (the form the
// system prompt's section headers take).
func headerLineAt(s string) (int, bool) {
	off := 0
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimLeftFunc(line, func(r rune) bool { return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) })
		if t != "" {
			r, _ := utf8.DecodeRuneInString(t)
			if strings.HasPrefix(norm.NFKC.String(string(r)), "=") {
				return off, true
			}
		}
		off += len(line) + 1
	}
	return 0, false
}
