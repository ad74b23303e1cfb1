package mcp_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcp"
)

// confirmProtocol holds every call of crm_send_email for the user's confirmation, its address
// shown.
const confirmProtocol = `{"id":"confirming","promptTemplate":{"base":"base_tool_call_v2"},"allowClientSelection":true,
 "tools":{"allow":["crm_lookup","crm_send_email"]},
 "toolCalls":{"flows":[{"id":"confirm-mail","after":["untrusted"],"tools":["crm_send_email"],"verdict":"confirm","keyArgs":["to"]}]}}`

// asker is an SDK client's elicitation handler that answers with action (and confirm) and remembers
// what it was asked.
type asker struct {
	mu      sync.Mutex
	asked   []string
	action  string
	confirm bool
}

func (a *asker) handle(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, req.Params.Message)
	if a.action != "accept" {
		return &sdk.ElicitResult{Action: a.action}, nil
	}
	return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": a.confirm}}, nil
}

// connectAsking is an SDK client of the door that declares elicitation and answers with a.
func connectAsking(t *testing.T, f *fixture, version string, a *asker) *sdk.ClientSession {
	t.Helper()
	h := http.Header{"X-Promptgate-Protocol": {"confirming"}}
	c := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1"}, &sdk.ClientOptions{ElicitationHandler: a.handle})
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: f.url + mcp.PathPrefix + "crm",
		HTTPClient: &http.Client{Transport: headerTransport{h}}, DisableStandaloneSSE: true}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestHeldCallConfirmedOverMCP: a call that a rule holds is put to the user of a client that
// declared elicitation (the official SDK's, on each session version that has it): the question
// names the tool and its key argument and holds no code; accepting runs exactly that call on the
// server, once; declining, cancelling or answering confirm: false refuses it and the server never
// runs it. A client without the capability gets the held result: the model reads that the call
// waits, the code is in _meta.
func TestHeldCallConfirmedOverMCP(t *testing.T) {
	t.Parallel()
	for _, version := range []string{mcp.Version20250618, mcp.Version20251125} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			var ran sync.Map // addresses the server mailed
			s := sdk.NewServer(&sdk.Implementation{Name: "crm", Version: "1"}, nil)
			type mail struct {
				To string `json:"to"`
			}
			sdk.AddTool(s, &sdk.Tool{Name: "send_email", Description: "Sends an email."}, func(_ context.Context, _ *sdk.CallToolRequest, in mail) (*sdk.CallToolResult, any, error) {
				n, _ := ran.LoadOrStore(in.To, new(int))
				*n.(*int)++
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "sent to " + in.To}}}, nil, nil
			})
			up := serveSDK(t, s)
			st := openStore(t)
			addProtocol(t, st, confirmProtocol)
			f := newFixtureOn(t, st, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up, ToolPrefix: "crm_"}}}, proxy.Limits{})

			for _, c := range []struct {
				to, action string
				confirm    bool
				runs       bool
				want       string
			}{
				{"ann@acme.com", "accept", true, true, "sent to ann@acme.com"},
				{"bob@acme.com", "accept", false, false, "the user did not confirm it"},
				{"cy@acme.com", "decline", false, false, "the user answered decline"},
				{"di@acme.com", "cancel", false, false, "the user answered cancel"},
			} {
				a := &asker{action: c.action, confirm: c.confirm}
				cs := connectAsking(t, f, version, a)
				text, isErr := callText(t, cs, "send_email", map[string]any{"to": c.to})
				if isErr == c.runs || !strings.Contains(text, c.want) {
					t.Errorf("%s %v: %q (error %v)", c.action, c.confirm, text, isErr)
				}
				_, didRun := ran.Load(c.to)
				if didRun != c.runs {
					t.Errorf("%s %v: the server ran the call: %v", c.action, c.confirm, didRun)
				}
				if len(a.asked) != 1 || !strings.Contains(a.asked[0], "crm_send_email") || !strings.Contains(a.asked[0], c.to) ||
					strings.Contains(a.asked[0], "code") {
					t.Errorf("%s: asked %q", c.action, a.asked)
				}
			}
			if n, _ := ran.Load("ann@acme.com"); *n.(*int) != 1 {
				t.Errorf("the confirmed call ran %d times", *n.(*int))
			}
			if got := len(f.ev.find(audit.KindConfirm, audit.VerdictConfirmed)); got != 1 {
				t.Errorf("%d confirm decisions confirmed, want 1", got)
			}

			// A client that cannot be asked gets the held result, the code beside the text the
			// model reads.
			cs := connectStream(t, f, "crm", version, http.Header{"X-Promptgate-Protocol": {"confirming"}, "X-Promptgate-Conversation": {"c-1"}}, false)
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "send_email", Arguments: map[string]any{"to": "eve@acme.com"}})
			if err != nil {
				t.Fatal(err)
			}
			hold, _ := res.Meta["promptgate/hold"].(map[string]any)
			if !res.IsError || !strings.Contains(resultText(res), "waiting for the user's confirmation") || strings.Contains(resultText(res), "code") ||
				!strings.Contains(hold["notice"].(string), "reply with the code") {
				t.Errorf("held result: %q %v", resultText(res), res.Meta)
			}
			if _, didRun := ran.Load("eve@acme.com"); didRun {
				t.Error("a held call ran")
			}
		})
	}
}

// serveSDK serves an SDK server over Streamable HTTP with event-stream answers.
func serveSDK(t *testing.T, s *sdk.Server) string {
	t.Helper()
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// rawSession opens a session on the door with a hand-written client that declares form elicitation,
// and returns its Mcp-Session-Id.
func rawSession(t *testing.T, u string) string {
	t.Helper()
	resp, body := post(t, u, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",`+
		`"capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"raw","version":"1"}}}`,
		map[string]string{"X-Promptgate-Protocol": "confirming"})
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	h := map[string]string{"X-Promptgate-Protocol": "confirming", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": mcp.Version20251125}
	if resp, body := post(t, u, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", resp.StatusCode, body)
	}
	return sid
}

// TestElicitationAnswerBound: an answer to the door's question counts only from the session it was
// asked in: one from another session, and one to an id the door never used, are the door's to
// refuse (202, an audit decision) and neither reaches the server nor releases the call; the answer
// of the session it was asked in does.
func TestElicitationAnswerBound(t *testing.T) {
	t.Parallel()
	_, up := crmServer(t, true)
	st := openStore(t)
	addProtocol(t, st, confirmProtocol)
	f := newFixtureOn(t, st, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up, ToolPrefix: "crm_"}}}, proxy.Limits{})
	u := f.url + mcp.PathPrefix + "crm"
	s1, s2 := rawSession(t, u), rawSession(t, u)
	h := func(sid string) map[string]string {
		return map[string]string{"X-Promptgate-Protocol": "confirming", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": mcp.Version20251125}
	}

	// The call's POST: its event stream carries the question, then the call's answer.
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send_email","arguments":{"to":"ann@acme.com","body":"hi"}}}`))
	for k, v := range h(s1) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	question := nextData(t, rd)
	id := gjson.Get(question, "id").Raw
	if gjson.Get(question, "method").String() != "elicitation/create" || !strings.HasPrefix(id, `"promptgate-confirm-`) {
		t.Fatalf("first event: %s", question)
	}
	accept := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"action":"accept","content":{"confirm":true}}}`
	}
	for _, c := range []struct{ name, sid, id, reason string }{
		{"another session", s2, id, "another session"},
		{"an id the door never used", s1, `"promptgate-confirm-00"`, "no question the door asked"},
	} {
		if r, body := post(t, u, accept(c.id), h(c.sid)); r.StatusCode != http.StatusAccepted {
			t.Errorf("%s: %d %s", c.name, r.StatusCode, body)
		}
		found := false
		for _, e := range f.ev.find(audit.KindConfirm, audit.VerdictBlocked) {
			found = found || strings.Contains(e.Reason, c.reason)
		}
		if !found {
			t.Errorf("%s: no blocked confirm decision saying %q", c.name, c.reason)
		}
	}
	if len(f.ev.find(mcp.KindCall, audit.VerdictConfirmed)) != 0 {
		t.Fatal("an answer from elsewhere released the call")
	}
	if r, body := post(t, u, accept(id), h(s1)); r.StatusCode != http.StatusAccepted {
		t.Fatalf("the session's answer: %d %s", r.StatusCode, body)
	}
	answer := nextData(t, rd)
	if gjson.Get(answer, "id").Raw != "7" || gjson.Get(answer, "result.isError").Bool() || !strings.Contains(answer, "sent to ann@acme.com") {
		t.Fatalf("the released call's answer: %s", answer)
	}
	// The same answer again finds no question: the call ran once.
	if r, _ := post(t, u, accept(id), h(s1)); r.StatusCode != http.StatusAccepted {
		t.Errorf("a second answer: %d", r.StatusCode)
	}
	if n := len(f.ev.find(mcp.KindCall, audit.VerdictConfirmed)); n != 1 {
		t.Errorf("%d calls confirmed, want 1", n)
	}
}

// nextData reads the next event's data of a stream.
func nextData(t *testing.T, rd *bufio.Reader) string {
	t.Helper()
	var data strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v (%q)", err, data.String())
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" && data.Len() > 0 {
			return data.String()
		}
		if d, ok := strings.CutPrefix(line, "data:"); ok {
			data.WriteString(strings.TrimPrefix(d, " "))
		}
	}
}
