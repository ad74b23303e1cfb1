package admin

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/learn"
)

const (
	shadowV1 = `{"id":"office","promptTemplate":{"base":"base_tool_call_v2"},"allowClientSelection":true,"tools":{"allow":["web_fetch","search_docs"]},"toolCalls":{"onViolation":"audit"}}`
	shadowV2 = `{"id":"office","promptTemplate":{"base":"base_tool_call_v2"},"allowClientSelection":true,"tools":{"allow":["search_docs"]}}`
	otherV1  = `{"id":"other","promptTemplate":{"base":"base_tool_call_v2"}}`
)

// TestShadowEndpoints: a version is put in shadow and taken out of it through the API, each change
// recorded; the summary lists the versions in shadow and the shadow events of the window; bad input
// is refused.
func TestShadowEndpoints(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	for _, body := range []string{shadowV1, shadowV2} {
		f.ok(http.StatusCreated, "POST", "/admin/protocols/office/versions", body)
	}
	f.ok(http.StatusOK, "POST", "/admin/protocols/office/activate", `{"version":1}`)
	f.ok(http.StatusCreated, "POST", "/admin/protocols/other/versions", otherV1)
	f.ok(http.StatusCreated, "POST", "/admin/protocols/other/versions", otherV1)

	// Bad input: an unknown version, the version of another protocol (office has no 3; other has),
	// the active version, no version, a template, an unknown field, a name that is no protocol.
	f.fails(http.StatusNotFound, "not_found", "POST", "/admin/protocols/office/shadow", `{"version":9}`)
	f.ok(http.StatusCreated, "POST", "/admin/protocols/other/versions", otherV1)
	e := f.fails(http.StatusNotFound, "not_found", "POST", "/admin/protocols/office/shadow", `{"version":3}`)
	if msg := e.Get("message").String(); msg == "" || !gjson.Valid(`"`+msg+`"`) {
		t.Fatalf("message %q", msg)
	}
	f.fails(http.StatusBadRequest, "invalid_definition", "POST", "/admin/protocols/office/shadow", `{"version":1}`)
	f.fails(http.StatusBadRequest, "invalid_request", "POST", "/admin/protocols/office/shadow", `{}`)
	f.fails(http.StatusBadRequest, "invalid_request", "POST", "/admin/protocols/office/shadow", `{"version":0}`)
	f.fails(http.StatusBadRequest, "invalid_request", "POST", "/admin/protocols/office/shadow", `{"version":"2"}`)
	f.fails(http.StatusBadRequest, "invalid_request", "POST", "/admin/protocols/office/shadow", `{"version":2,"x":1}`)
	f.fails(http.StatusNotFound, "not_found", "POST", "/admin/templates/base_tool_call_v2/shadow", `{"version":1}`)
	f.fails(http.StatusNotFound, "not_found", "POST", "/admin/protocols/nope/shadow", `{"version":1}`)
	f.fails(http.StatusNotFound, "not_found", "DELETE", "/admin/protocols/office/shadow", ``)

	b := f.ok(http.StatusOK, "POST", "/admin/protocols/office/shadow", `{"version":2}`, "X-Promptgate-Actor", "ann")
	if gjson.GetBytes(b, "shadow").Int() != 2 || gjson.GetBytes(b, "previous").Int() != 0 {
		t.Fatalf("shadow: %s", b)
	}
	if got := gjson.GetBytes(f.ok(http.StatusOK, "GET", "/admin/protocols/office", ""), "shadow").Int(); got != 2 {
		t.Fatalf("entry's shadow %d", got)
	}
	sum := f.ok(http.StatusOK, "GET", "/admin/shadow", "")
	if gjson.GetBytes(sum, "shadows.#").Int() != 1 || gjson.GetBytes(sum, "shadows.0.protocol").String() != "office" ||
		gjson.GetBytes(sum, "shadows.0.shadow").Int() != 2 || gjson.GetBytes(sum, "shadows.0.active").Int() != 1 {
		t.Fatalf("summary: %s", sum)
	}
	// A request through the proxy: the shadow removes web_fetch, which the active version keeps.
	up := newRecordingUpstream(t)
	ts := f.proxyFor(up)
	if resp, out := chat(t, ts, chatRequest, map[string]string{"X-Promptgate-Protocol": "office"}); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %v %s", resp, out)
	}
	sum = f.ok(http.StatusOK, "GET", "/admin/shadow?window=1h&protocol=office", "")
	ch := gjson.GetBytes(sum, "changes.0")
	if gjson.GetBytes(sum, "changes.#").Int() != 1 || ch.Get("tool").String() != "web_fetch" || ch.Get("activeVerdict").String() != "allowed" ||
		ch.Get("shadowVerdict").String() != "removed" || ch.Get("shadowVersion").Int() != 2 || ch.Get("count").Int() != 1 || ch.Get("requests.#").Int() != 1 {
		t.Fatalf("changes: %s", sum)
	}
	if evs := f.events("?kind=shadow"); len(evs) != 1 || evs[0].ActiveVerdict != "allowed" || evs[0].ShadowVersion != 2 {
		t.Fatalf("shadow events %+v", evs)
	}
	f.fails(http.StatusBadRequest, "invalid_request", "GET", "/admin/shadow?window=2d", "")
	f.fails(http.StatusBadRequest, "invalid_request", "GET", "/admin/shadow?since=1h", "")

	b = f.ok(http.StatusOK, "DELETE", "/admin/protocols/office/shadow", ``, "X-Promptgate-Actor", "bob")
	if gjson.GetBytes(b, "shadow").Int() != 0 || gjson.GetBytes(b, "previous").Int() != 2 {
		t.Fatalf("unshadow: %s", b)
	}
	changes := f.events("?kind=" + audit.KindShadowChanged)
	if len(changes) != 2 || changes[0].Actor != "bob" || changes[0].Version != 0 || changes[1].Actor != "ann" || changes[1].Version != 2 ||
		changes[1].Target != "protocols/office" {
		t.Fatalf("change events %+v", changes)
	}
	// Activating the version in shadow takes it out of shadow.
	f.ok(http.StatusOK, "POST", "/admin/protocols/office/shadow", `{"version":2}`)
	f.ok(http.StatusOK, "POST", "/admin/protocols/office/activate", `{"version":2}`)
	if got := gjson.GetBytes(f.ok(http.StatusOK, "GET", "/admin/protocols/office", ""), "shadow").Int(); got != 0 {
		t.Fatalf("the activated version is still in shadow: %d", got)
	}
}

// TestLearnEndpoints: learned data and a suggestion are served for a protocol; bad windows, unknown
// protocols, an empty window and an instance that does not learn are refused.
func TestLearnEndpoints(t *testing.T) {
	var ls *learn.Store
	f := newFixture(t, fixtureOpts{options: func(o *Options) {
		var err error
		ls, err = learn.Open(filepath.Join(t.TempDir(), "pg.learn.db"), learn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ls.Close() })
		o.Learn = ls
	}})
	f.ok(http.StatusCreated, "POST", "/admin/protocols/office/versions", shadowV1)
	f.ok(http.StatusOK, "POST", "/admin/protocols/office/activate", `{"version":1}`)
	for _, c := range []struct{ path, code string }{
		{"/admin/learn/office?since=0s", "invalid_request"},
		{"/admin/learn/office?since=-1h", "invalid_request"},
		{"/admin/learn/office?since=30d", "invalid_request"},
		{"/admin/learn/office?since=200h", "invalid_request"},
		{"/admin/learn/office?since=abc", "invalid_request"},
		{"/admin/learn/office?window=1h", "invalid_request"},
		{"/admin/protocols/office/suggest?since=x", "invalid_request"},
	} {
		f.fails(http.StatusBadRequest, c.code, "GET", c.path, "")
	}
	f.fails(http.StatusNotFound, "not_found", "GET", "/admin/protocols/nope/suggest", "")
	f.fails(http.StatusConflict, "nothing_learned", "GET", "/admin/protocols/office/suggest?since=1h", "")
	b := f.ok(http.StatusOK, "GET", "/admin/learn/office?since=1h", "")
	if gjson.GetBytes(b, "protocol").String() != "office" || gjson.GetBytes(b, "requests").Int() != 0 || !gjson.GetBytes(b, "tools").IsArray() {
		t.Fatalf("learned: %s", b)
	}
	ls.Offered("office", []string{"web_fetch", "search_docs"})
	b = f.ok(http.StatusOK, "GET", "/admin/learn/office", "")
	if gjson.GetBytes(b, "requests").Int() != 1 || gjson.GetBytes(b, "tools.#").Int() != 2 {
		t.Fatalf("learned after a request: %s", b)
	}
	b = f.ok(http.StatusOK, "GET", "/admin/protocols/office/suggest", "")
	if gjson.GetBytes(b, "basedOnVersion").Int() != 1 || gjson.GetBytes(b, "definition.id").String() != "office" ||
		gjson.GetBytes(b, "requests").Int() != 1 || !gjson.GetBytes(b, "proposals").IsArray() {
		t.Fatalf("suggest: %s", b)
	}

	off := newFixture(t, fixtureOpts{})
	off.fails(http.StatusNotFound, "learn_off", "GET", "/admin/learn/office", "")
}
