package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// memObserver keeps what an Observer is told.
type memObserver struct {
	mu        sync.Mutex
	tools     []string
	prompt    string
	decisions []vet.Decision
}

func (o *memObserver) Prepared(_ context.Context, p *Prepared) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range p.Kept {
		o.tools = append(o.tools, t.Name)
	}
	o.prompt = p.Prompt.System()
}

func (o *memObserver) Decided(_ context.Context, d vet.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d.Args = append([]byte(nil), d.Args...)
	o.decisions = append(o.decisions, d)
}

// TestObserverSeesWhatWasDecided: the Observer is told the prepared request (its kept tools and
// layered prompt) and every decision on the answer's calls, with the call's id, in the order of the
// calls — the same decisions the decision log gets.
func TestObserverSeesWhatWasDecided(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[`+
			`{"id":"call_ok","type":"function","function":{"name":"web_fetch","arguments":"{\"url\":\"https://docs.example.com/a\"}"}},`+
			`{"id":"call_bad","type":"function","function":{"name":"web_fetch","arguments":"{\"url\":\"https://evil.example/\"}"}}]}}]}`)
	}))
	t.Cleanup(up.Close)
	o, rec := vetOptions(t, up.URL, "refuse", "")
	obs := &memObserver{}
	o.Observer = obs
	ts := serveProxy(t, o)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"read the docs"}],"tools":[{"type":"function","function":{"name":"web_fetch"}},{"type":"function","function":{"name":"shell"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if strings.Join(obs.tools, ",") != "web_fetch" || !strings.Contains(obs.prompt, "- guarded") {
		t.Errorf("prepared: tools %q, prompt %q", obs.tools, obs.prompt)
	}
	if len(obs.decisions) != 2 || obs.decisions[0].CallID != "call_ok" || obs.decisions[0].Verdict != vet.VerdictAllowed ||
		obs.decisions[1].CallID != "call_bad" || obs.decisions[1].Verdict != vet.VerdictBlocked || obs.decisions[1].Rule != "docs-only" ||
		string(obs.decisions[1].Args) != `{"url":"https://evil.example/"}` {
		t.Errorf("decisions %+v", obs.decisions)
	}
	if v := rec.verdicts(); v["tool_call/web_fetch"] != "blocked" {
		t.Errorf("the decision log: %v", v)
	}
}
