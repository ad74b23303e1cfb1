package responses

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
)

func TestBlockedMemoryBoundedAndDeduplicated(t *testing.T) {
	m := newBlockedMemory(2)
	m.remember("resp_a", blockedCall{CallID: "c1", Tool: "t"})
	m.remember("resp_a", blockedCall{CallID: "c1", Tool: "t"})
	m.remember("resp_a", blockedCall{CallID: "c2", Tool: "t"})
	m.remember("", blockedCall{CallID: "c3"})
	m.remember("resp_b", blockedCall{CallID: ""})
	if got := m.lookup("resp_a"); len(got) != 2 || got[0].CallID != "c1" || got[1].CallID != "c2" {
		t.Fatalf("resp_a: %+v", got)
	}
	if m.lookup("resp_b") != nil || m.lookup("") != nil {
		t.Fatal("a call without an id or a response without an id was kept")
	}
	m.remember("resp_b", blockedCall{CallID: "c4"})
	m.remember("resp_c", blockedCall{CallID: "c5"})
	if m.lookup("resp_a") != nil || m.lookup("resp_b") == nil || m.lookup("resp_c") == nil {
		t.Fatal("the oldest response was not the one forgotten")
	}
	got := m.lookup("resp_c")
	got[0].CallID = "changed"
	if m.lookup("resp_c")[0].CallID != "c5" {
		t.Fatal("lookup hands out the memory's own slice")
	}
	// What it let go of is known as forgotten (its retrieval is refused), within a bound of its
	// own.
	if !m.forgottenResponse("resp_a") || m.forgottenResponse("resp_b") || m.forgottenResponse("resp_never") {
		t.Fatal("forgotten responses: resp_a was let go, resp_b is kept, resp_never was never seen")
	}
	for i := range 3 * forgottenFactor * 2 {
		m.remember("resp_x"+strings.Repeat("y", i), blockedCall{CallID: "c"})
	}
	if n := m.forgotten.order.Len(); n != forgottenFactor*2 || len(m.forgotten.ids) != n || m.forgottenResponse("resp_a") {
		t.Fatalf("the forgotten ids are not bounded: %d kept, resp_a still among them: %v", n, m.forgottenResponse("resp_a"))
	}
}

func TestAnswerBlocked(t *testing.T) {
	calls := []blockedCall{{CallID: "call_1", Tool: "web_fetch", Reason: "not allowed"}, {CallID: "call_2", Tool: "x\ny", Reason: "r"}}
	out1 := `{"type":"function_call_output","call_id":"call_1","output":"[promptgate] blocked tool call web_fetch: not allowed (the call was not run)"}`
	for _, tc := range []struct{ name, in, want string }{
		{"string", `{"model":"m","input":"hi \"there\"","z":1}`,
			`{"model":"m","input":[` + out1 + `,{"type":"function_call_output","call_id":"call_2","output":"[promptgate] blocked tool call \"x\\ny\": r (the call was not run)"},{"role":"user","content":"hi \"there\""}],"z":1}`},
		{"array, one answered by the client", `{"input":[{"type":"function_call_output","call_id":"call_2","output":"mine"},{"role":"user","content":"u"}]}`,
			`{"input":[` + out1 + `,{"type":"function_call_output","call_id":"call_2","output":"mine"},{"role":"user","content":"u"}]}`},
		{"no input", `{"model":"m"}`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := answerBlocked([]byte(tc.in), calls)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if !gjson.ValidBytes(got) || gjson.GetBytes(got, "input.#").Int() < 1 || n < 1 {
				t.Fatalf("%d %s", n, got)
			}
		})
	}
	// All answered: untouched.
	in := `{"input":[{"type":"function_call_output","call_id":"call_1","output":"a"},{"type":"function_call_output","call_id":"call_2","output":"b"}]}`
	if got, n, err := answerBlocked([]byte(in), calls); err != nil || n != 0 || string(got) != in {
		t.Fatalf("%d %v %s", n, err, got)
	}
	// The bad form: an input that is neither a string nor an array is an error, not a silent pass.
	if _, _, err := answerBlocked([]byte(`{"input":{"role":"user"}}`), calls); err == nil {
		t.Fatal("an object input was accepted")
	}
}

func TestStoredResponseID(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/responses/resp_1":             "resp_1",
		"/v1/responses/resp_1/input_items": "",
		"/v1/responses/":                   "",
		"/v1/responses":                    "",
		"/v1/chat/completions/x":           "",
		// Spellings a loose upstream router takes for the same retrieval.
		"/v1/responses/resp_1/":     "resp_1",
		"/v1/Responses/resp_1":      "resp_1",
		"/v1/responses/resp_1;x":    "resp_1",
		"/v1/responses//resp_1":     "resp_1",
		"/v1/responses/resp_1%2F":   "resp_1",
		"/v1/responses/resp%5F1":    "resp_1",
		"/v1/responses/resp_1%20":   "resp_1",
		"/v1/responses/resp_1/../x": "x",
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://h"+path, nil)
		if got := storedResponseID(r); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	r, _ := http.NewRequest(http.MethodDelete, "http://h/v1/responses/resp_1", nil)
	if storedResponseID(r) != "" {
		t.Error("DELETE taken for a retrieval")
	}
}

// TestStoredResponseStreamRetrievalRefused: a streamed retrieval of a response with a blocked call
// is refused rather than shown; one without is passed as it is.
func TestStoredResponseStreamRetrievalRefused(t *testing.T) {
	s := New(Options{})
	s.blocked.remember("resp_1", blockedCall{CallID: "call_evil", Tool: "web_fetch", Reason: "r"})
	mk := func(id string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://h/v1/responses/"+id+"?stream=true", nil)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader("data: {\"item\":{\"call_id\":\"call_evil\"}}\n\n")), Request: req}
	}
	resp := mk("resp_1")
	if err := s.stripStored(resp, "resp_1"); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	wantBlockedError(t, resp, b)
	// The content type is parsed as everywhere else: letter case and parameters do not hide a
	// stream.
	for _, ct := range []string{"Text/Event-Stream; charset=utf-8", " text/event-stream;charset=UTF-8"} {
		resp = mk("resp_1")
		resp.Header.Set("Content-Type", ct)
		if err := s.stripStored(resp, "resp_1"); err != nil {
			t.Fatalf("%q: %v", ct, err)
		}
		b, _ = io.ReadAll(resp.Body)
		wantBlockedError(t, resp, b)
	}
	resp = mk("resp_2")
	if err := s.stripStored(resp, "resp_2"); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || !strings.Contains(string(b), "call_evil") {
		t.Fatalf("an unrelated stream was changed: %d %s", resp.StatusCode, b)
	}
	// A malformed stored body of a response with blocked calls fails as a malformed upstream
	// answer.
	req, _ := http.NewRequest(http.MethodGet, "http://h/v1/responses/resp_1", nil)
	resp = &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"output":[{"type":"function_call","call_id":"call_evil"}`)), Request: req}
	if err := s.stripStored(resp, "resp_1"); err == nil {
		t.Fatal("a truncated stored response was passed")
	}
}

func TestBgPolicyFirstTime(t *testing.T) {
	var b bgPolicy
	d := vet.Decision{CallID: "c1", Tool: "t", Verdict: vet.VerdictAllowed, Args: []byte(`{}`)}
	if !b.firstTime(d) || b.firstTime(d) {
		t.Fatal("the same decision was not recognised")
	}
	changed := d
	changed.Args = []byte(`{"a":1}`)
	if !b.firstTime(changed) {
		t.Fatal("a call whose arguments changed was taken for the same decision")
	}
	noID := vet.Decision{Choice: 3, Tool: "t", Verdict: vet.VerdictBlocked}
	other := noID
	other.Choice = 4
	if !b.firstTime(noID) || !b.firstTime(other) || b.firstTime(noID) {
		t.Fatal("calls without an id are not known by their place")
	}
}

func TestBlockedMemoryBackground(t *testing.T) {
	m := newBlockedMemory(2)
	p1, p2 := &bgPolicy{protocol: "a"}, &bgPolicy{protocol: "b"}
	m.rememberBackground("resp_a", p1)
	m.rememberBackground("resp_a", p2)
	m.rememberBackground("", p1)
	m.rememberBackground("resp_n", nil)
	if m.background("resp_a") != p1 || m.background("") != nil || m.background("resp_n") != nil {
		t.Fatal("background policy")
	}
	// One entry per response: a blocked call of a background response does not take a second place.
	m.remember("resp_a", blockedCall{CallID: "c1"})
	m.rememberBackground("resp_b", p2)
	if m.background("resp_a") != p1 || len(m.lookup("resp_a")) != 1 || m.lookup("resp_b") != nil {
		t.Fatal("entries")
	}
	m.remember("resp_c", blockedCall{CallID: "c2"})
	if m.background("resp_a") != nil || m.lookup("resp_a") != nil || m.background("resp_b") != p2 {
		t.Fatal("the oldest response was not the one forgotten")
	}
}

// TestBlockedMemoryBackgroundBytes: the policies kept are bounded in bytes too (oldest forgotten
// first, the newest always kept), and they hold copies, not the request's bytes.
func TestBlockedMemoryBackgroundBytes(t *testing.T) {
	schema := []byte(`{"type":"object"}`)
	pol := newBgPolicy(vet.Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": schema}}, "p", 1)
	schema[0] = 'X'
	if string(pol.policy.Schemas["t"]) != `{"type":"object"}` {
		t.Fatal("the policy shares the request's bytes")
	}
	m := newBlockedMemory(100)
	m.maxBytes = 2*pol.size + 1
	m.remember("resp_0", blockedCall{CallID: "c"})
	m.rememberBackground("resp_a", pol)
	m.rememberBackground("resp_b", newBgPolicy(vet.Policy{}, "p", 1))
	if m.lookup("resp_0") == nil || m.background("resp_a") == nil || m.background("resp_b") == nil {
		t.Fatal("forgotten within the bound")
	}
	m.rememberBackground("resp_c", pol)
	if m.background("resp_a") != nil || m.lookup("resp_0") != nil || m.background("resp_b") == nil || m.background("resp_c") == nil {
		t.Fatal("the oldest were not the ones forgotten")
	}
	big := newBgPolicy(vet.Policy{Schemas: map[string][]byte{"t": make([]byte, 10*m.maxBytes)}}, "p", 1)
	m.rememberBackground("resp_big", big)
	if m.background("resp_big") != big || m.order.Len() != 1 || m.bytes != big.size {
		t.Fatalf("the newest policy was not kept alone: %d entries, %d bytes", m.order.Len(), m.bytes)
	}
	m.remember("resp_x", blockedCall{CallID: "c"})
	m.rememberBackground("resp_y", pol)
	if m.background("resp_big") != nil || m.bytes != pol.size {
		t.Fatalf("bytes %d after forgetting, want %d", m.bytes, pol.size)
	}
}

// wantBlockedError checks a 403 tool_call_blocked answer in the OpenAI error shape.
func wantBlockedError(t *testing.T, resp *http.Response, b []byte) {
	t.Helper()
	if resp.StatusCode != http.StatusForbidden || gjson.GetBytes(b, "error.code").Str != "tool_call_blocked" || gjson.GetBytes(b, "error.type").Str != "permission_error" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestCancelledResponseID: a cancel is POST /v1/responses/{id}/cancel, in any spelling a loose
// router reads as it; nothing else is.
func TestCancelledResponseID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodPost, "/v1/responses/resp_1/cancel", "resp_1"},
		{http.MethodPost, "/v1/Responses/resp_1/cancel/", "resp_1"},
		{http.MethodPost, "/v1/responses/resp_1/cancel;x", "resp_1"},
		{http.MethodGet, "/v1/responses/resp_1/cancel", ""},
		{http.MethodPost, "/v1/responses/resp_1", ""},
		{http.MethodPost, "/v1/responses/resp_1/cancel/more", ""},
		{http.MethodPost, "/v1/responses//cancel", ""},
		{http.MethodPost, "/v1/responses/resp_1/input_items", ""},
	} {
		r, _ := http.NewRequest(tc.method, "http://h"+tc.path, nil)
		if got := cancelledResponseID(r); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// TestInputItemsListing: an input item listing loses every item of a call this instance blocked
// (the call and the answer promptgate sent for it), whichever response lists it; first_id and
// last_id follow; a listing without them is passed unchanged; a malformed one fails; a call
// forgotten with its response is not dropped.
func TestInputItemsListing(t *testing.T) {
	s := New(Options{Remember: 1})
	s.blocked.remember("resp_1", blockedCall{CallID: "call_evil", Tool: "send_money", Reason: "r"})
	list := func(body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://h/v1/Responses/resp_2/Input_Items/", nil)
		if inputItemsResponseID(req) != "resp_2" || !s.Intercepts(req) {
			t.Fatalf("the listing's path is not recognised")
		}
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}
		return resp, s.Passed(req, resp, nil)
	}
	resp, err := list(`{"object":"list","data":[` +
		`{"id":"fc_1","type":"function_call","call_id":"call_evil","name":"send_money","arguments":"{\"iban\":\"GB82\"}"},` +
		`{"id":"msg_1","type":"message","role":"user","content":[]},` +
		`{"id":"fco_1","type":"function_call_output","call_id":"call_evil","output":"refused"},` +
		`{"id":"fco_2","type":"function_call_output","call_id":"call_ok","output":"done"}],` +
		`"first_id":"fc_1","last_id":"fco_2","has_more":true}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(b), "call_evil") || strings.Contains(string(b), "GB82") {
		t.Fatalf("the blocked call is listed: %s", b)
	}
	if ids := gjson.GetBytes(b, "data.#.id").Raw; ids != `["msg_1","fco_2"]` {
		t.Errorf("items kept %s", ids)
	}
	if f, l := gjson.GetBytes(b, "first_id").Str, gjson.GetBytes(b, "last_id").Str; f != "msg_1" || l != "fco_2" || !gjson.GetBytes(b, "has_more").Bool() {
		t.Errorf("first_id %q last_id %q has_more %s", f, l, gjson.GetBytes(b, "has_more").Raw)
	}
	if resp.Header.Get("X-Promptgate-Blocked") != "1" { // one call, two of its items
		t.Errorf("X-Promptgate-Blocked %q", resp.Header.Get("X-Promptgate-Blocked"))
	}
	// Only blocked items: the ids become null.
	resp, err = list(`{"object":"list","data":[{"id":"fc_1","type":"function_call","call_id":"call_evil"}],"first_id":"fc_1","last_id":"fc_1","has_more":false}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	if string(gjson.GetBytes(b, "data").Raw) != "[]" || gjson.GetBytes(b, "first_id").Type != gjson.Null || gjson.GetBytes(b, "last_id").Type != gjson.Null {
		t.Errorf("only blocked items: %s", b)
	}
	// Nothing blocked in it: unchanged.
	plain := `{"object":"list","data":[{"id":"fco_2","type":"function_call_output","call_id":"call_ok"}],"has_more":false}`
	resp, err = list(plain)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ = io.ReadAll(resp.Body); string(b) != plain || resp.Header.Get("X-Promptgate-Blocked") != "" {
		t.Errorf("an unrelated listing changed: %s", b)
	}
	// Malformed: not passed.
	for _, bad := range []string{`{"object":"list","data":[{"call_id":"call_evil"}`, `{"object":"list","data":{}}`, `[]`} {
		if _, err := list(bad); err == nil {
			t.Errorf("malformed listing %q passed", bad)
		}
	}
	// The memory keeps one response: remembering another lets resp_1 go, but its call's id is kept
	// with the ids of the calls of forgotten responses (forgottenFactor per response kept), so a
	// flood of other responses does not bring the call back into a listing.
	s.blocked.remember("resp_3", blockedCall{CallID: "call_other", Tool: "t"})
	if got := s.blocked.blockedCallIDs([]string{"call_evil", "call_other"}); !got["call_evil"] || !got["call_other"] {
		t.Errorf("after eviction: %v", got)
	}
	for i := range forgottenFactor {
		s.blocked.remember(fmt.Sprintf("resp_flood_%d", i), blockedCall{CallID: fmt.Sprintf("call_flood_%d", i), Tool: "t"})
	}
	if got := s.blocked.blockedCallIDs([]string{"call_evil", "call_flood_0"}); got["call_evil"] || !got["call_flood_0"] {
		t.Errorf("the forgotten calls' ids are not bounded, oldest first: %v", got)
	}
}
