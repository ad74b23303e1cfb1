package surface

import (
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
)

// What the surfaces' transcript readers share: a message's content and a tool output read once, the same way
// on every surface.

// AddMessage adds a message's text under role, and each attachment (a part that is not text) as untrusted
// context; the model's own attachments are not sources and are left out.
func AddMessage(t *flow.Transcript, r flow.Role, content gjson.Result, msg int) {
	text, attachments := assembly.ContentParts(content)
	t.Text(r, text, msg)
	if r == flow.RoleAssistant {
		return
	}
	for _, a := range attachments {
		t.Attachment(flow.JSONText(a, false), msg)
	}
}

// OutputOf reads a tool output's content (a string, or an array of parts or blocks): every string of it as
// text, and its text parts as the document the tool returned.
func OutputOf(content gjson.Result) flow.Output {
	return flow.Output{Text: flow.JSONText(content, false), Doc: assembly.ContentText(content)}
}

// RawJSON is a value's raw JSON text, nil when it is absent.
func RawJSON(v gjson.Result) []byte {
	if !v.Exists() {
		return nil
	}
	return []byte(v.Raw)
}
