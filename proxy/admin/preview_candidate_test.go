package admin

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// candidateRule is the rule a candidate version of the protocol tech adds.
const candidateRule = "- CANDIDATE RULE: quote the ticket."

// addCandidateRule stores a version of tech that adds candidateRule to the active one, not active,
// and returns its number.
func addCandidateRule(f *fixture) int64 {
	f.t.Helper()
	v1 := gjson.GetBytes(f.ok(http.StatusOK, "GET", "/admin/protocols/tech/versions/1", ""), "body").Raw
	v2, err := sjson.Set(v1, "promptTemplate.overrides.rules", gjson.Get(v1, "promptTemplate.overrides.rules").String()+"\n"+candidateRule)
	if err != nil {
		f.t.Fatal(err)
	}
	return gjson.GetBytes(f.ok(http.StatusCreated, "POST", "/admin/protocols/tech/versions", v2), "version").Int()
}

// TestPreviewOfACandidateIsWhatActivationSends: a preview with a candidate protocol version, not
// active, shows that version's prompt while the proxy keeps serving the active one; once the
// version is activated, the upstream receives, byte for byte, the body the candidate's preview
// showed.
func TestPreviewOfACandidateIsWhatActivationSends(t *testing.T) {
	f := newFixture(t, fixtureOpts{token: "t"})
	up := newRecordingUpstream(t)
	ts := f.proxyFor(up)
	v := addCandidateRule(f)
	headers := map[string]string{"X-Promptgate-Protocol": "tech", "Authorization": "Bearer sk-client"}
	hj, _ := json.Marshal(headers)

	cand := f.preview(chatRequest, "headers", string(hj), "candidate", `{"kind":"protocols","name":"tech","version":2}`)
	prompt := gjson.GetBytes(cand, "upstreamRequest.messages.0.content").String()
	if v != 2 || gjson.GetBytes(cand, "protocolVersion").Int() != 2 || !strings.Contains(prompt, candidateRule) {
		t.Fatalf("candidate preview (version %d): %s", v, cand)
	}
	active := f.preview(chatRequest, "headers", string(hj))
	if gjson.GetBytes(active, "protocolVersion").Int() != 1 || strings.Contains(string(active), "CANDIDATE RULE") {
		t.Fatalf("the preview without a candidate: %s", active)
	}
	// The candidate's preview activated nothing.
	if resp, b := chat(t, ts, chatRequest, headers); resp == nil || resp.StatusCode != 200 || strings.Contains(string(up.all()[0]), "CANDIDATE RULE") {
		t.Fatalf("proxy before activation: %v %s / %s", resp, b, up.all())
	}
	if got := gjson.GetBytes(f.ok(http.StatusOK, "GET", "/admin/protocols/tech", ""), "active").Int(); got != 1 {
		t.Fatalf("active %d after a candidate's preview", got)
	}

	f.ok(http.StatusOK, "POST", "/admin/protocols/tech/activate", `{"version":2}`)
	if resp, b := chat(t, ts, chatRequest, headers); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("proxy after activation: %v %s", resp, b)
	}
	sent := up.all()
	if got := gjson.GetBytes(cand, "upstreamRequest").Raw; len(sent) != 2 || got != string(sent[1]) {
		t.Fatalf("the candidate's preview differs from what the upstream received once it was active:\npreview:  %s\nupstream: %s", got, sent[len(sent)-1])
	}
}

// TestPreviewOfACandidateTemplate: a candidate template version replaces the active one for every
// protocol based on it; the version itself stays inactive.
func TestPreviewOfACandidateTemplate(t *testing.T) {
	f := newFixture(t, fixtureOpts{token: "t"})
	text := gjson.GetBytes(f.ok(http.StatusOK, "GET", "/admin/templates/base_tool_call_v2/versions/1", ""), "body.text").String()
	def, _ := json.Marshal(map[string]string{"name": "base_tool_call_v2",
		"text": strings.Replace(text, "=== SYSTEM CORE ===\n", "=== SYSTEM CORE ===\nThe candidate speaks first.\n", 1)})
	f.ok(http.StatusCreated, "POST", "/admin/templates/base_tool_call_v2/versions", string(def))

	cand := f.preview(chatRequest, "protocol", `"tech"`, "candidate", `{"kind":"templates","name":"base_tool_call_v2","version":2}`)
	if gjson.GetBytes(cand, "templateVersion").Int() != 2 || gjson.GetBytes(cand, "protocolVersion").Int() != 1 ||
		!strings.Contains(gjson.GetBytes(cand, "upstreamRequest.messages.0.content").String(), "The candidate speaks first.") {
		t.Fatalf("candidate preview: %s", cand)
	}
	if after := f.preview(chatRequest, "protocol", `"tech"`); gjson.GetBytes(after, "templateVersion").Int() != 1 || strings.Contains(string(after), "The candidate speaks") {
		t.Fatalf("the template's active version changed: %s", after)
	}
	// The active version as the candidate previews what is served.
	same := f.preview(chatRequest, "protocol", `"tech"`, "candidate", `{"kind":"templates","name":"base_tool_call_v2","version":1}`)
	if string(same) != string(f.preview(chatRequest, "protocol", `"tech"`)) {
		t.Fatalf("the active version as candidate differs from the preview:\n%s", same)
	}
}

// TestPreviewOfACandidateInShadow: the version in shadow, previewed as the candidate, leaves the
// shadow as its activation would (the report has no shadow part); another candidate keeps it.
func TestPreviewOfACandidateInShadow(t *testing.T) {
	f := newFixture(t, fixtureOpts{token: "t"})
	for _, body := range []string{shadowV1, shadowV2, shadowV1} {
		f.ok(http.StatusCreated, "POST", "/admin/protocols/office/versions", body)
	}
	f.ok(http.StatusOK, "POST", "/admin/protocols/office/activate", `{"version":1}`)
	f.ok(http.StatusOK, "POST", "/admin/protocols/office/shadow", `{"version":2}`)

	r := f.preview(chatRequest, "protocol", `"office"`, "candidate", `{"kind":"protocols","name":"office","version":2}`)
	if gjson.GetBytes(r, "protocolVersion").Int() != 2 || gjson.GetBytes(r, "shadow").Exists() || gjson.GetBytes(r, "tools.kept").String() != `["search_docs"]` {
		t.Fatalf("the version in shadow as candidate: %s", r)
	}
	r = f.preview(chatRequest, "protocol", `"office"`, "candidate", `{"kind":"protocols","name":"office","version":3}`)
	if gjson.GetBytes(r, "protocolVersion").Int() != 3 || gjson.GetBytes(r, "shadow.protocolVersion").Int() != 2 {
		t.Fatalf("another candidate: %s", r)
	}
}

// TestPreviewCandidateBadInput: a candidate that is not an object of kind, name and version, names
// another kind, or names a version that does not exist is refused, naming the field.
func TestPreviewCandidateBadInput(t *testing.T) {
	f := newFixture(t, fixtureOpts{token: "t"})
	for _, c := range []struct {
		candidate string
		status    int
		code      string
		param     string
	}{
		{`"tech"`, 400, "invalid_request", "candidate"},
		{`[1]`, 400, "invalid_request", "candidate"},
		{`{"kind":"protocols","name":"tech","version":1,"active":true}`, 400, "invalid_request", "candidate.active"},
		{`{"kind":"protocols","name":"tech","version":"1"}`, 400, "invalid_request", "candidate.version"},
		{`{"kind":"mcppins","name":"crm","version":1}`, 400, "invalid_request", "candidate.kind"},
		{`{"kind":"protocol","name":"tech","version":1}`, 400, "invalid_request", "candidate.kind"},
		{`{"name":"tech","version":1}`, 400, "invalid_request", "candidate.kind"},
		{`{"kind":"protocols","version":1}`, 400, "invalid_request", "candidate.name"},
		{`{"kind":"protocols","name":"tech"}`, 400, "invalid_request", "candidate.version"},
		{`{"kind":"protocols","name":"tech","version":0}`, 400, "invalid_request", "candidate.version"},
		{`{"kind":"protocols","name":"tech","version":9}`, 404, "not_found", "candidate"},
		{`{"kind":"protocols","name":"nope","version":1}`, 404, "not_found", "candidate"},
		{`{"kind":"templates","name":"tech","version":1}`, 404, "not_found", "candidate"},
	} {
		e := f.fails(c.status, c.code, "POST", "/admin/prompts/preview", `{"request":`+chatRequest+`,"candidate":`+c.candidate+`}`)
		if got := e.Get("param").String(); got != c.param || !strings.HasPrefix(e.Get("message").String(), "candidate") {
			t.Errorf("candidate %s: param %q, message %q; want param %q", c.candidate, got, e.Get("message").String(), c.param)
		}
	}
	// A duplicate key anywhere in the body refuses the body.
	e := f.fails(400, "invalid_json", "POST", "/admin/prompts/preview", `{"request":`+chatRequest+`,"candidate":{"kind":"protocols","name":"tech","version":1,"version":2}}`)
	if !strings.Contains(e.Get("message").String(), `duplicate key "version"`) {
		t.Errorf("duplicate key: %s", e.Raw)
	}
	// A null candidate is none.
	if r := f.preview(chatRequest, "candidate", `null`); gjson.GetBytes(r, "protocolVersion").Int() != 1 {
		t.Fatalf("null candidate: %s", r)
	}
}
