package assembly

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

// BuiltinAliases are the other type names of a built-in tool's versions: without a date suffix
// (web_search_preview_2025_03_11), with and without _preview (web_search, web_search_preview), and
// the computer tool's names (computer_use_preview, computer_use, computer), as the Responses
// surface knows them for computer_call items.
func BuiltinAliases(typ string) []string {
	base := typ
	if n := len(base) - len("_2006_01_02"); n > 0 && isDateSuffix(base[n:]) {
		base = base[:n]
	}
	base = strings.TrimSuffix(base, "_preview")
	names := []string{base, base + "_preview"}
	if base == "computer" || base == "computer_use" {
		names = []string{"computer", "computer_use", "computer_use_preview"}
	}
	var out []string
	for _, n := range names {
		if n != typ && n != "" {
			out = append(out, n)
		}
	}
	return out
}

// isDateSuffix reports whether s is "_YYYY_MM_DD".
func isDateSuffix(s string) bool {
	for i, c := range []byte(s) {
		switch i {
		case 0, 5, 8:
			if c != '_' {
				return false
			}
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return len(s) == len("_2006_01_02")
}

// ToolChoiceError is the refusal of a tool_choice that names a tool the request may not use
// (policy.CodeToolChoiceNotAllowed).
func ToolChoiceError(param, format string, args ...any) error {
	return &policy.Error{Code: policy.CodeToolChoiceNotAllowed, Param: param, Message: fmt.Sprintf(format, args...)}
}

// NameSet is the set of the tools' names.
func NameSet(tools []policy.Tool) map[string]bool {
	s := make(map[string]bool, len(tools))
	for _, t := range tools {
		s[t.Name] = true
	}
	return s
}

// KeptTools is the tools array arr with only the entries whose name is kept: the first entry of
// each name, and every entry of a name whose first entry is shared (several entries of one built-in
// tool type); n is how many it holds.
func KeptTools(arr gjson.Result, kept []policy.Tool, name func(gjson.Result) (n string, shared bool)) (tools []byte, n int) {
	keptSet := NameSet(kept)
	first := map[string]bool{} // name -> whether its first entry is shared
	var b bytes.Buffer
	b.Grow(len(arr.Raw))
	b.WriteByte('[')
	arr.ForEach(func(_, v gjson.Result) bool {
		nm, shared := name(v)
		firstShared, seen := first[nm]
		if !seen {
			first[nm] = shared
		}
		if !keptSet[nm] || (seen && !(shared && firstShared)) {
			return true
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(v.Raw)
		n++
		return true
	})
	b.WriteByte(']')
	return b.Bytes(), n
}

func RawOrNil(r gjson.Result) []byte {
	if !r.Exists() || r.Type == gjson.Null {
		return nil
	}
	return []byte(r.Raw)
}

// ContentText is the text of a message content (ContentParts' text).
func ContentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	text, _ := ContentParts(c)
	return text
}

// ContentParts reads a message content, the one reader of it for the prompt and the
// information-flow rules: a string is all text; of an array of parts, the "text" strings of the
// text parts (type text, input_text, output_text, or none) are the text, joined by line breaks,
// refusals are left out, and every other part is an attachment (an image, a file, a document, a
// text part without a string).
func ContentParts(c gjson.Result) (text string, attachments []gjson.Result) {
	if c.Type == gjson.String {
		return c.Str, nil
	}
	if !c.IsArray() {
		return "", nil
	}
	var parts []string
	c.ForEach(func(_, p gjson.Result) bool {
		switch p.Get("type").String() {
		case "text", "input_text", "output_text", "":
			if t := p.Get("text"); t.Type == gjson.String {
				parts = append(parts, t.Str)
				return true
			}
		case "refusal":
			return true
		}
		attachments = append(attachments, p)
		return true
	})
	return strings.Join(parts, "\n"), attachments
}

// JSONString encodes s as a JSON string without HTML escaping.
func JSONString(s string) []byte {
	return AppendJSONString(make([]byte, 0, len(s)+len(s)/8+2), s)
}

// WriteJSONString writes s to b as JSON string, without HTML escaping, as encoding/json would.
func WriteJSONString(b *bytes.Buffer, s string) {
	b.Grow(len(s) + 2)
	b.Write(AppendJSONString(b.AvailableBuffer(), s))
}

// AppendJSONString appends s as a JSON string, byte for byte as encoding/json's Encoder with
// SetEscapeHTML(false) writes it: ", \ and control characters escaped (\b \f \n \r \t, else
// \u00XX), U+2028 and U+2029 as \u2028 and \u2029, and each byte of invalid UTF-8 as \ufffd.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

// appendEscaped appends the inside of s's JSON string (AppendJSONString without the quotes). For
// strings that are each valid UTF-8, the escaping of a concatenation is the concatenation of their
// escapings.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}

// Roles is what a role-tagged array (chat messages, Responses input items) says to the pipeline,
// read in one pass over it.
type Roles struct {
	// Application are the texts of its system and developer messages, in order.
	Application []string
	// LatestUser is the text of its last user message.
	LatestUser string
	// Others are its other elements, in order, as raw JSON sharing the body's memory: what the
	// rewrite keeps once the system and developer messages have become the layered prompt.
	Others []string
}

// ReadRoles reads a role-tagged array, appending its Others to others. An element that is not an
// object is an invalid_request naming it as field[i]. It reads the array in one walk that goes into
// each element where it is (EachElement), as readRolesGJSON reads it on a body jsoncheck accepted;
// where the walk cannot follow arr (or arr is not an array), readRolesGJSON reads it.
func ReadRoles(arr gjson.Result, field string, others []string) (Roles, error) {
	var (
		r         = Roles{Others: others}
		err       error
		i         int
		last      string // the last user message's content (only its text is read)
		lastFound bool
	)
	s := arr.Raw
	end := EachElement(s, 0, func(v int) int {
		if s[v] != '{' {
			err = Invalid(fmt.Sprintf("%s[%d]", field, i), "%s[%d] must be an object", field, i)
			return -1
		}
		role, content, end := roleAndContent(s, v)
		if end < 0 {
			return -1
		}
		switch rawString(role) {
		case "system", "developer":
			r.Application = append(r.Application, ContentText(rawValue(content)))
		case "user":
			last, lastFound = content, true
			r.Others = append(r.Others, s[v:end])
		default:
			r.Others = append(r.Others, s[v:end])
		}
		i++
		return end
	})
	switch {
	case err != nil:
		return Roles{}, err
	case end < 0:
		return readRolesGJSON(arr, field, others)
	}
	if lastFound {
		r.LatestUser = ContentText(rawValue(last))
	}
	return r, nil
}

// roleAndContent are the raw texts of the first "role" and "content" members of the object at s[i]
// ("" where it has none), as gjson's Get finds them, and the offset past the object.
func roleAndContent(s string, i int) (role, content string, end int) {
	end = EachMember(s, i, func(k string, at int) int {
		e := valueEnd(s, at)
		switch {
		case k == "role" && role == "" && e >= 0:
			role = s[at:e]
		case k == "content" && content == "" && e >= 0:
			content = s[at:e]
		}
		return e
	})
	return role, content, end
}

// rawValue is the value whose raw text is raw, as gjson gives it ("" is none).
func rawValue(raw string) gjson.Result {
	if raw == "" {
		return gjson.Result{}
	}
	return gjson.Parse(raw)
}

// rawString is the text gjson's String gives the value whose raw text is raw.
func rawString(raw string) string { return rawValue(raw).String() }

// readRolesGJSON is ReadRoles read with gjson: each element skipped, then read again for its role
// and content.
func readRolesGJSON(arr gjson.Result, field string, others []string) (Roles, error) {
	var (
		r    = Roles{Others: others}
		err  error
		i    int
		last gjson.Result // the last user message: only its text is read (a conversation's earlier turns are not)
	)
	arr.ForEach(func(_, m gjson.Result) bool {
		if !m.IsObject() {
			err = Invalid(fmt.Sprintf("%s[%d]", field, i), "%s[%d] must be an object", field, i)
			return false
		}
		switch m.Get("role").String() {
		case "system", "developer":
			r.Application = append(r.Application, ContentText(m.Get("content")))
		case "user":
			last = m
			r.Others = append(r.Others, m.Raw)
		default:
			r.Others = append(r.Others, m.Raw)
		}
		i++
		return true
	})
	if err != nil {
		return Roles{}, err
	}
	if last.Exists() {
		r.LatestUser = ContentText(last.Get("content"))
	}
	return r, nil
}
