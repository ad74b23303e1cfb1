package surface

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
)

// What the surfaces' transcript readers share: a message's content and a tool output read once, the
// same way on every surface.

// JSONText is the text of a JSON value of a request (a tool output, an attachment, the runtime
// context) for the information-flow rules: every string and number (and key, with keys set) but the
// members of the APIs' content parts that are identifiers, media types or binary payloads (base64
// data, data: URLs, encrypted content), to a depth of 32.
func JSONText(v gjson.Result, keys bool) string {
	return flow.JSONStrings(v, keys, maxTextDepth, notText)
}

// maxTextDepth is how deep JSONText reads a value.
const maxTextDepth = 32

// notText reports whether a member of a content part (key in obj) or a string is no text a reader
// acts on.
func notText(obj gjson.Result, key string, v gjson.Result) bool {
	if v.Type == gjson.String && strings.HasPrefix(v.Str, "data:") {
		return true
	}
	switch key {
	case "type", "id", "call_id", "tool_use_id", "media_type", "mime_type", "file_id", "signature",
		"encrypted_content", "cache_control", "status", "file_data":
		return obj.Exists()
	case "data":
		return obj.Get("type").Str == "base64"
	}
	return false
}

// AddMessage adds a message's text under role, and each attachment (a part that is not text) as
// untrusted context; the model's own attachments are not sources and are left out.
func AddMessage(t *flow.Transcript, r flow.Role, content gjson.Result, msg int) {
	text, attachments := assembly.ContentParts(content)
	t.Text(r, text, msg)
	if r == flow.RoleAssistant {
		return
	}
	for _, a := range attachments {
		t.Attachment(JSONText(a, false), msg)
	}
}

// OutputOf reads a tool output's content (a string, or an array of parts or blocks): every string
// of it as text, and its text parts as the document the tool returned.
func OutputOf(content gjson.Result) flow.Output {
	return flow.Output{Text: JSONText(content, false), Doc: assembly.ContentText(content)}
}

// RawJSON is a value's raw JSON text, nil when it is absent.
func RawJSON(v gjson.Result) []byte {
	if !v.Exists() {
		return nil
	}
	return []byte(v.Raw)
}

// MaskCodes masks the confirmation codes of held calls in an upstream body that holds a notice
// (flow.NoticeMarker) anywhere: every code-shaped token of every string (flow.MaskCodeTokens), but
// in the user's own texts (userTexts calls its function with each, and its path) only the notices
// they quote (flow.MaskCodes), so a code the user types still reaches the model as typed. The code
// is the user's decision, and apps move the model's earlier text anywhere: into a summary in the
// system message, re-wrapped, split over messages. A body without a notice is returned as it is.
func MaskCodes(body []byte, userTexts func(body []byte, each func(path string, text gjson.Result))) ([]byte, error) {
	if !bytes.Contains(body, []byte(flow.NoticeMarker)) {
		return body, nil
	}
	user := map[string]bool{}
	userTexts(body, func(path string, _ gjson.Result) { user[path] = true })
	type edit struct{ path, text string }
	var edits []edit
	eachString(gjson.ParseBytes(body), "", 0, func(path, s string) {
		mask := flow.MaskCodeTokens
		if user[path] {
			mask = flow.MaskCodes
		}
		if masked, ok := mask(s); ok {
			edits = append(edits, edit{path, masked})
		}
	})
	var err error
	for _, e := range edits {
		if body, err = sjson.SetBytes(body, e.path, e.text); err != nil {
			return nil, fmt.Errorf("surface: mask codes: %w", err)
		}
	}
	return body, nil
}

// maxMaskDepth bounds the nesting MaskCodes reads (a body is nested less deep: limits.maxJSONDepth).
const maxMaskDepth = 256

// eachString calls f with every string value under v and its path (keys escaped as paths need).
// A string under an empty key, which a path cannot name, is left out.
func eachString(v gjson.Result, path string, depth int, f func(path, s string)) {
	switch {
	case depth > maxMaskDepth:
	case v.Type == gjson.String:
		if path != "" {
			f(path, v.Str)
		}
	case v.IsArray():
		i := 0
		v.ForEach(func(_, e gjson.Result) bool {
			eachString(e, join(path, strconv.Itoa(i)), depth+1, f)
			i++
			return true
		})
	case v.IsObject():
		v.ForEach(func(k, e gjson.Result) bool {
			if k.Str != "" {
				eachString(e, join(path, gjson.Escape(k.Str)), depth+1, f)
			}
			return true
		})
	}
}

func join(path, comp string) string {
	if path == "" {
		return comp
	}
	return path + "." + comp
}

// ContentTexts calls each with the text strings of a message content at path: the content itself
// when it is a string, else the "text" of each of its parts.
func ContentTexts(content gjson.Result, path string, each func(path string, text gjson.Result)) {
	if content.Type == gjson.String {
		each(path, content)
		return
	}
	i := 0
	content.ForEach(func(_, p gjson.Result) bool {
		each(path+"."+strconv.Itoa(i)+".text", p.Get("text"))
		i++
		return true
	})
}
