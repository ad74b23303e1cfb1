package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestRetrievalAfterTheMemoryWasFlooded: the memory of what the proxy blocked in a stored response,
// and of the policy a background response is vetted with, is bounded; another client fills it (many
// background requests, or responses with a blocked call each) to push a victim's response out. The
// victim's retrieval of it is then refused (502), never shown with the call promptgate blocked nor
// unvetted: a background app polls and runs the calls it gets.
func TestRetrievalAfterTheMemoryWasFlooded(t *testing.T) {
	t.Parallel()
	stored := completedJSON("resp_x", goodAndEvil...)
	for _, background := range []bool{true, false} {
		u := &bgUpstream{get: serveJSON(stored)}
		if !background {
			u.queued = func(w http.ResponseWriter, id string, _ bool) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, completedJSON(id, goodAndEvil...))
			}
		}
		up := newUpstream(t, u.ServeHTTP)
		o, _ := vetOptions(t, up.URL, "refuse", "")
		o.Engine.surfaces = surfaces(EngineOptions{StoredResponses: 4})
		ts := serveProxy(t, o)
		req := bgRequest
		if !background {
			req = strings.Replace(bgRequest, `"background":true,`, ``, 1)
		}
		resp, b := postTo(t, ts, PathResponses, req, nil)
		victim := gjson.GetBytes(b, "id").Str
		if resp.StatusCode != 200 || victim == "" || strings.Contains(string(b), "call_evil") {
			t.Fatalf("background=%v: the victim's create: %d %s", background, resp.StatusCode, b)
		}
		if _, got := getFrom(t, ts, PathResponses+"/"+victim); strings.Contains(string(got), "call_evil") {
			t.Fatalf("background=%v: a remembered response shows the blocked call: %s", background, got)
		}
		for range 8 { // the flood: twice the memory
			postTo(t, ts, PathResponses, req, nil)
		}
		resp, got := getFrom(t, ts, PathResponses+"/"+victim)
		if strings.Contains(string(got), "call_evil") || resp.StatusCode != http.StatusBadGateway {
			t.Errorf("background=%v: the victim's retrieval after the flood: %d %s", background, resp.StatusCode, got)
		}
	}
}

// TestInputItemsAfterTheMemoryWasFlooded: after another client pushed a victim's response out of
// the memory (responses with a blocked call each, each call its own id), a listing of input items
// that holds the victim's blocked call (the call, and the refusal that names it) still leaves it
// out.
func TestInputItemsAfterTheMemoryWasFlooded(t *testing.T) {
	t.Parallel()
	u := &bgUpstream{get: func(w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Content-Type", "application/json")
		out := `{"type":"function_call_output","call_id":"call_evil","output":"[promptgate] blocked tool call web_fetch"}`
		_, _ = io.WriteString(w, `{"object":"list","data":[`+fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed")+`,`+out+`],"has_more":false}`)
	}}
	u.queued = func(w http.ResponseWriter, id string, _ bool) {
		w.Header().Set("Content-Type", "application/json")
		if id == "resp_bg_1" {
			_, _ = io.WriteString(w, completedJSON(id, goodAndEvil...))
			return
		}
		_, _ = io.WriteString(w, completedJSON(id, fcItem("fc_"+id, "call_"+id, "web_fetch", respBadArgs, "completed")))
	}
	up := newUpstream(t, u.ServeHTTP)
	o, _ := vetOptions(t, up.URL, "refuse", "")
	o.Engine.surfaces = surfaces(EngineOptions{StoredResponses: 4})
	ts := serveProxy(t, o)
	req := strings.Replace(bgRequest, `"background":true,`, ``, 1)
	if resp, b := postTo(t, ts, PathResponses, req, nil); resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") {
		t.Fatalf("the victim's create: %d %s", resp.StatusCode, b)
	}
	for range 8 { // the flood: twice the memory, each with a call of its own id
		postTo(t, ts, PathResponses, req, nil)
	}
	resp, got := getFrom(t, ts, PathResponses+"/resp_bg_9/input_items")
	if strings.Contains(string(got), "call_evil") {
		t.Errorf("the listing after the flood shows the victim's blocked call: %d %s", resp.StatusCode, got)
	}
}
