package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
	"github.com/promptgate/promptgate/proxy/owners"
)

// With PROMPTGATE_UPSTREAM_API_KEY set every client reaches the upstream as the operator. These
// tests hold that a stored response or chat completion created through promptgate is its creator's
// alone: another credential naming it (in a path or as previous_response_id) gets the API's answer
// for an id that does not exist, before anything goes upstream, and a listing is refused. Gemini is
// not among their surfaces: its rewritten routes store nothing (a responseId names no object a
// later request can reach).

// storeUpstream is an OpenAI stand-in that stores what it creates: every create gets a new id
// (resp_N, chatcmpl-N), streamed or not (each event split across two writes); any other request
// under a stored id answers 200 with that id, an unknown one 404. It records the method and path of
// every request.
type storeUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	n     int
	ids   map[string]bool
	calls []string
}

func newStoreUpstream(t *testing.T) *storeUpstream {
	t.Helper()
	u := &storeUpstream{ids: map[string]bool{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *storeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.calls = append(u.calls, r.Method+" "+r.URL.RequestURI())
	u.mu.Unlock()
	turn := scriptedTurn{text: "Stored.", in: 1, out: 1}
	var sf flowtest.Surface
	switch r.URL.Path {
	case "/v1/responses":
		sf = flowtest.Responses
	case "/v1/chat/completions":
		if r.Method == http.MethodPost {
			sf = flowtest.Chat
		}
	}
	if sf == "" {
		rest := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/v1/responses/"), "/v1/chat/completions/")
		id, _, _ := strings.Cut(rest, "/")
		u.mu.Lock()
		known := u.ids[id]
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !known && !strings.HasSuffix(r.URL.Path, "/input_tokens") && !strings.HasSuffix(r.URL.Path, "/compact") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"message":"not found upstream","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		_, _ = fmt.Fprintf(w, `{"id":%q,"object":"response","status":"completed","instructions":null,"output":[],"data":[],"usage":null}`, id)
		return
	}
	u.mu.Lock()
	u.n++
	n := u.n
	prefix := map[flowtest.Surface]string{flowtest.Responses: "resp_", flowtest.Chat: "chatcmpl-"}[sf]
	u.ids[fmt.Sprintf("%s%d", prefix, n)] = true
	u.mu.Unlock()
	if !gjson.GetBytes(b, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, turn.body(sf, n))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range turn.events(sf, n) {
		writeSplit(w, ev, len(ev)/2+1)
	}
}

// count is how many requests reached the upstream.
func (u *storeUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.calls)
}

// keyedServer is promptgate in front of up with the operator key bound to it (or none, when key is
// ""), with the given record (nil: its own).
func keyedServer(t *testing.T, up, key string, rec *owners.Record) *httptest.Server {
	t.Helper()
	e := testEngine(t, "", nil, nil, nil)
	u, err := url.Parse(up + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	openai := Upstream{URL: u}
	if key != "" {
		openai.Key = bindKey(t, key, u)
	}
	o := Options{Engine: e, Upstreams: map[string]Upstream{"openai": openai}, Owners: rec}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

// sendAs sends a request with the client's credential headers (name, value pairs) and returns its
// status and body.
func sendAs(t *testing.T, ts *httptest.Server, method, path, body string, cred ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(cred); i += 2 {
		req.Header.Set(cred[i], cred[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// createdID creates a stored object on surface sf (stream or not) as the client with credential
// cred and returns its id as the client read it.
func createdID(t *testing.T, ts *httptest.Server, sf flowtest.Surface, stream bool, cred ...string) string {
	t.Helper()
	return createdWith(t, ts, sf, stream, map[string]any{"store": true}, cred...)
}

// createdWith is createdID with the request's extra fields.
func createdWith(t *testing.T, ts *httptest.Server, sf flowtest.Surface, stream bool, extra map[string]any, cred ...string) string {
	t.Helper()
	body := flowRequest(t, sf, []flowtest.Turn{{User: "Remember this."}}, nil, stream, extra)
	status, b := sendAs(t, ts, http.MethodPost, flowPaths[sf], string(body), cred...)
	if status != http.StatusOK {
		t.Fatalf("create: %d %s", status, b)
	}
	got := read(t, sf, stream, b)
	if len(got.ids) == 0 {
		t.Fatalf("no id in %s", b)
	}
	id := got.ids[len(got.ids)-1]
	if i := strings.LastIndexAny(id, ":@"); i >= 0 && sf == flowtest.Responses {
		id = id[i+1:]
	} else if i >= 0 {
		id = id[:i]
	}
	return id
}

var (
	alice = []string{"Authorization", "Bearer sk-alice"}
	bob   = []string{"Authorization", "Bearer sk-bob"}
)

// foreignRequests are the requests that name a stored response or completion by id, in the path or
// the body, with the answer the API gives for an id that does not exist.
func foreignRequests(sf flowtest.Surface, id string) []struct{ method, path, body, code string } {
	type req = struct{ method, path, body, code string }
	if sf == flowtest.Chat {
		return []req{
			{"GET", "/v1/chat/completions/" + id, "", "not_found"},
			{"GET", "/v1/chat/completions/" + id + "/messages", "", "not_found"},
			{"POST", "/v1/chat/completions/" + id, `{"metadata":{"k":"v"}}`, "not_found"},
			{"DELETE", "/v1/chat/completions/" + id, "", "not_found"},
			{"GET", "/v1/chat/completions/" + id + "/", "", "not_found"},
			{"GET", "/v1/CHAT/Completions/" + id, "", "not_found"},
		}
	}
	continued := func(key string, stream bool) string {
		b, _ := sjson.Set(`{"model":"m","input":"What did I say?"}`, key, id)
		b, _ = sjson.Set(b, "stream", stream)
		return b
	}
	return []req{
		{"GET", "/v1/responses/" + id, "", "not_found"},
		{"GET", "/v1/responses/" + id + "?stream=true", "", "not_found"},
		{"DELETE", "/v1/responses/" + id, "", "not_found"},
		{"POST", "/v1/responses/" + id + "/cancel", "", "not_found"},
		{"GET", "/v1/responses/" + id + "/input_items", "", "not_found"},
		{"GET", "/v1/responses/" + id + "/", "", "not_found"},
		{"GET", "/v1/RESPONSES/" + id, "", "not_found"},
		{"GET", "/v1/responses/other/../" + id, "", "not_found"},
		{"POST", "/v1/responses", continued("previous_response_id", false), "previous_response_not_found"},
		{"POST", "/v1/responses", continued("previous_response_id", true), "previous_response_not_found"},
		{"POST", "/v1/responses", continued("Previous_Response_ID", false), "previous_response_not_found"},
		{"POST", "/v1/responses", continued("previous_reſponse_id", false), "previous_response_not_found"},
		{"POST", "/v1/responses/input_tokens", continued("previous_response_id", false), "previous_response_not_found"},
		{"POST", "/v1/responses/compact", continued("previous_response_id", false), "previous_response_not_found"},
	}
}

// TestSharedKeyObjectsAreTheirCreators: with the operator key shared, a response (stream or not)
// and a stored chat completion (stream or not) created by one client are answered to that client on
// every path and body field that names them, while another credential (another bearer token, none
// at all, another x-api-key) gets the API's not-found answer for each, before anything goes
// upstream; an id this instance never relayed is nobody's; the listings are refused.
func TestSharedKeyObjectsAreTheirCreators(t *testing.T) {
	t.Parallel()
	for _, sf := range []flowtest.Surface{flowtest.Responses, flowtest.Chat} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", sf, stream), func(t *testing.T) {
				t.Parallel()
				up := newStoreUpstream(t)
				ts := keyedServer(t, up.URL, "sk-operator", nil)
				id := createdID(t, ts, sf, stream, alice...)
				for _, rq := range foreignRequests(sf, id) {
					for _, cred := range [][]string{bob, nil, {"X-Api-Key", "sk-alice"}, {"Authorization", "Basic c2stYWxpY2U6"}} {
						before := up.count()
						status, b := sendAs(t, ts, rq.method, rq.path, rq.body, cred...)
						want := http.StatusNotFound
						if rq.code == "previous_response_not_found" {
							want = http.StatusBadRequest
						}
						e := gjson.GetBytes(b, "error")
						if status != want || e.Get("code").Str != rq.code || e.Get("type").Str != "invalid_request_error" || !strings.Contains(e.Get("message").Str, id) {
							t.Errorf("%s %s as %v: %d %s, want %d %s", rq.method, rq.path, cred, status, b, want, rq.code)
						}
						if rq.code == "previous_response_not_found" && e.Get("param").Str != "previous_response_id" {
							t.Errorf("%s %s: param %s", rq.method, rq.path, e.Get("param").Raw)
						}
						if up.count() != before {
							t.Errorf("%s %s as %v reached the upstream", rq.method, rq.path, cred)
						}
					}
					// The creator's request goes upstream (which routes the loose spellings as it
					// will).
					before := up.count()
					status, b := sendAs(t, ts, rq.method, rq.path, rq.body, alice...)
					if up.count() != before+1 {
						t.Errorf("%s %s as its creator did not reach the upstream: %d %s", rq.method, rq.path, status, b)
					}
					if exact := !strings.Contains(rq.path, ".") && rq.path == strings.ToLower(rq.path) && !strings.HasSuffix(rq.path, "/"); exact && status != http.StatusOK {
						t.Errorf("%s %s as its creator: %d %s", rq.method, rq.path, status, b)
					}
				}
				// An id this instance never relayed may be anyone's: refused to everyone, its
				// spellings too.
				for _, rq := range foreignRequests(sf, strings.Replace(id, "1", "9", 1)+"9") {
					if status, b := sendAs(t, ts, rq.method, rq.path, rq.body, alice...); status != http.StatusNotFound && status != http.StatusBadRequest {
						t.Errorf("%s %s (an id never relayed): %d %s", rq.method, rq.path, status, b)
					}
				}
				list := map[flowtest.Surface]string{flowtest.Responses: "/v1/responses", flowtest.Chat: "/v1/chat/completions?limit=100"}[sf]
				before := up.count()
				status, b := sendAs(t, ts, http.MethodGet, list, "", alice...)
				if status != http.StatusForbidden || gjson.GetBytes(b, "error.code").Str != "listing_not_allowed" || up.count() != before {
					t.Errorf("GET %s: %d %s (upstream asked: %v)", list, status, b, up.count() != before)
				}
			})
		}
	}
}

// TestSharedKeyBindsBackgroundAndDefaultStore: a background response (polled later) and a response
// created without a store field (the API stores it by default) are their creator's; a stored chat
// completion is bound whatever true-like value store has, and a completion that is not stored binds
// nothing.
func TestSharedKeyBindsBackgroundAndDefaultStore(t *testing.T) {
	t.Parallel()
	up := newStoreUpstream(t)
	rec := owners.New(0)
	ts := keyedServer(t, up.URL, "sk-operator", rec)
	for _, c := range []struct {
		sf    flowtest.Surface
		extra map[string]any
	}{
		{flowtest.Responses, map[string]any{"background": true}},
		{flowtest.Responses, nil},
		{flowtest.Chat, map[string]any{"store": true}},
	} {
		id := createdWith(t, ts, c.sf, false, c.extra, alice...)
		path := flowPaths[c.sf] + "/" + id
		if status, b := sendAs(t, ts, http.MethodGet, path, "", bob...); status != http.StatusNotFound {
			t.Errorf("%v: GET %s as another: %d %s", c.extra, path, status, b)
		}
		if status, b := sendAs(t, ts, http.MethodGet, path, "", alice...); status != http.StatusOK {
			t.Errorf("%v: GET %s as its creator: %d %s", c.extra, path, status, b)
		}
	}
	n := rec.Len()
	createdWith(t, ts, flowtest.Chat, false, nil, alice...)
	createdWith(t, ts, flowtest.Responses, false, map[string]any{"store": false}, alice...)
	if rec.Len() != n {
		t.Errorf("answers not stored upstream were bound: %d ids, then %d", n, rec.Len())
	}
}

// TestSharedKeyPathReadingsDisagree: a path that one server reads as the client's own response and
// another as someone else's (";params", escaped slashes and dots, backslashes, an escaped letter)
// is refused to everyone, its own client included, before anything goes upstream: every reading
// must name what the client owns.
func TestSharedKeyPathReadingsDisagree(t *testing.T) {
	t.Parallel()
	for _, sf := range []flowtest.Surface{flowtest.Responses, flowtest.Chat} {
		t.Run(string(sf), func(t *testing.T) {
			t.Parallel()
			up := newStoreUpstream(t)
			ts := keyedServer(t, up.URL, "sk-operator", nil)
			victim := createdID(t, ts, sf, false, alice...)
			own := createdID(t, ts, sf, false, bob...)
			base := flowPaths[sf] + "/"
			for _, path := range []string{
				base + own + ";x/../" + victim,
				base + own + "%3Bx/..%2F" + victim,
				base + own + "%2F..%2F" + victim,
				base + own + "%252F..%252F" + victim,
				base + own + `\..\` + victim,
				base + own + "%5C..%5C" + victim,
				base + "%" + fmt.Sprintf("%02X", own[0]) + own[1:] + "/..%2F" + victim,
			} {
				for _, cred := range [][]string{bob, alice} {
					if strings.Contains(path, "/../") && cred[1] == alice[1] {
						continue // the listener's mux redirects to the clean path, which is hers
					}
					before := up.count()
					status, b := sendAs(t, ts, http.MethodGet, path, "", cred...)
					if status != http.StatusNotFound || gjson.GetBytes(b, "error.code").Str != "not_found" || up.count() != before {
						t.Errorf("GET %s as %v: %d %s (reached the upstream: %v)", path, cred, status, b, up.count() != before)
					}
				}
			}
			if status, b := sendAs(t, ts, http.MethodGet, base+own, "", bob...); status != http.StatusOK {
				t.Errorf("GET %s as its creator: %d %s", base+own, status, b)
			}
		})
	}
}

// TestSharedKeyBindsEveryRound: a continued answer (onViolation "continue") has the upstream store
// a response per round; each is its creator's, the first (which a stream's response.created names)
// and the last (which the client continues from).
func TestSharedKeyBindsEveryRound(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	sf := flowtest.Responses
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			fu := newFlowUpstream(t, scriptedTurn{text: continueText1, calls: []flowtest.Call{cc.evil}, in: 1, out: 1},
				scriptedTurn{text: continueText2, in: 1, out: 1})
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					fu.serve(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = fmt.Fprintf(w, `{"id":%q,"object":"response","instructions":null,"output":[],"usage":null}`, strings.TrimPrefix(r.URL.Path, "/v1/responses/"))
			})
			ts, _ := flowServer(t, up.URL, cc.protocol, func(o *Options) {
				openai := o.Upstreams["openai"]
				openai.Key = bindKey(t, "sk-operator", openai.URL)
				o.Upstreams["openai"] = openai
			})
			status, _, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, stream, nil), http.Header{"Authorization": {"Bearer sk-alice"}})
			if status != http.StatusOK || len(fu.requests()) != 2 {
				t.Fatalf("status %d, %d upstream requests: %s", status, len(fu.requests()), b)
			}
			for _, id := range []string{"resp_1", "resp_2"} {
				if status, b := sendAs(t, ts, http.MethodGet, "/v1/responses/"+id, "", bob...); status != http.StatusNotFound {
					t.Errorf("GET %s as another: %d %s", id, status, b)
				}
				if status, b := sendAs(t, ts, http.MethodGet, "/v1/responses/"+id, "", alice...); status != http.StatusOK {
					t.Errorf("GET %s as its creator: %d %s", id, status, b)
				}
			}
		})
	}
}

// TestSharedRecordAcrossServers: the listener and the HTTPS-proxy door's pipelines are Servers
// given one record (as serve builds them): what a client created through one is its own through the
// other, and another's there too.
func TestSharedRecordAcrossServers(t *testing.T) {
	t.Parallel()
	up := newStoreUpstream(t)
	rec := owners.New(0)
	listener, door := keyedServer(t, up.URL, "sk-operator", rec), keyedServer(t, up.URL, "sk-operator", rec)
	id := createdID(t, listener, flowtest.Responses, false, alice...)
	if status, b := sendAs(t, door, http.MethodGet, "/v1/responses/"+id, "", alice...); status != http.StatusOK {
		t.Errorf("its creator through the other Server: %d %s", status, b)
	}
	if status, b := sendAs(t, door, http.MethodGet, "/v1/responses/"+id, "", bob...); status != http.StatusNotFound {
		t.Errorf("another through the other Server: %d %s", status, b)
	}
}

// TestWithoutSharedKeyNothingIsRefused: without an operator key the upstream checks each client's
// own key: promptgate refuses no id and no listing, and binds nothing.
func TestWithoutSharedKeyNothingIsRefused(t *testing.T) {
	t.Parallel()
	up := newStoreUpstream(t)
	rec := owners.New(0)
	ts := keyedServer(t, up.URL, "", rec)
	id := createdID(t, ts, flowtest.Responses, false, alice...)
	before := up.count()
	for _, path := range []string{"/v1/responses/" + id, "/v1/responses/" + id + "/input_items"} {
		if status, b := sendAs(t, ts, http.MethodGet, path, "", bob...); status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, status, b)
		}
	}
	status, b := sendAs(t, ts, http.MethodPost, PathResponses, `{"model":"m","input":"hi","previous_response_id":"`+id+`"}`, bob...)
	if status != http.StatusOK {
		t.Errorf("continued by another: %d %s", status, b)
	}
	if status, b := sendAs(t, ts, http.MethodGet, "/v1/chat/completions", "", bob...); status != http.StatusOK && status != http.StatusNotFound {
		t.Errorf("listing: %d %s", status, b)
	} else if gjson.GetBytes(b, "error.code").Str == "listing_not_allowed" {
		t.Errorf("listing refused without a shared key: %s", b)
	}
	if up.count() != before+4 || rec.Len() != 0 {
		t.Errorf("%d of 4 requests reached the upstream; %d ids bound", up.count()-before, rec.Len())
	}
	up.mu.Lock()
	calls := fmt.Sprint(up.calls)
	up.mu.Unlock()
	if !bytes.Contains([]byte(calls), []byte("GET /v1/chat/completions")) {
		t.Errorf("the listing did not reach the upstream: %v", calls)
	}
}
