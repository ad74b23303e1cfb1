package policytest

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/promptgate/promptgate/proxy"
)

// The placeholders of a follow-up step's request and headers.
const (
	// fillCode is the code of the call held last before the step, as its notice shows it
	// (XXXX-XXXX).
	fillCode = "{{code}}"
	// fillNotice is that call's notice: the text that replaced it in the client's answer.
	fillNotice = "{{notice}}"
)

// hasFill reports whether s holds a placeholder.
func hasFill(s string) bool {
	return strings.Contains(s, fillCode) || strings.Contains(s, fillNotice)
}

// heldCall is a call the proxy held: its notice, and the code the notice shows.
type heldCall struct {
	tool, id, notice, code string
}

// heldOf is the held call of a decision's notice; ok is false when the notice shows no code.
func heldOf(tool, id, notice string) (heldCall, bool) {
	code := proxy.NoticeCode(notice)
	return heldCall{tool: tool, id: id, notice: notice, code: code}, code != ""
}

// fillRequest puts h's code and notice in place of the placeholders of a request body: JSON text,
// where a placeholder stands inside a string, so each value goes in escaped as a JSON string's
// content.
func fillRequest(body []byte, h heldCall) []byte {
	if !hasFill(string(body)) {
		return body
	}
	r := strings.NewReplacer(fillCode, jsonContent(h.code), fillNotice, jsonContent(h.notice))
	return []byte(r.Replace(string(body)))
}

// fillHeader puts h's code in place of {{code}} in every header value ({{notice}}, text of
// several lines, is the body's only).
func fillHeader(hdr http.Header, h heldCall) http.Header {
	out := hdr.Clone()
	for k, vs := range out {
		for i, v := range vs {
			vs[i] = strings.ReplaceAll(v, fillCode, h.code)
		}
		out[k] = vs
	}
	return out
}

// jsonContent is s written as a JSON string, without its quotes.
func jsonContent(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b[1 : len(b)-1])
}
