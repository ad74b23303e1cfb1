package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
	"github.com/promptgate/promptgate/policy/learn"
)

// learnerProtocol runs in audit mode, so that learn mode reads its traffic; it allows send_email
// alone.
var learnerProtocol = json.RawMessage(`{"id":"learner","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["send_email"]},
  "toolCalls":{"onViolation":"audit"}}`)

// TestLearnKeepsNoTextOfTheModel: learn mode keeps no argument value and no message text, also
// where the model writes them where a name goes — a call of a tool the request never declared,
// named with a key the conversation holds (in audit mode it is released, and learned) — or where a
// value looks like a key or a path; on every surface, stream and non-stream. The file holds the
// declared tool's name and argument paths, never the secrets.
func TestLearnKeepsNoTextOfTheModel(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	file := filepath.Join(t.TempDir(), "pg.learn.db")
	ls, err := learn.Open(file, learn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	up := newFlowUpstream(t)
	ts, _ := flowServer(t, up.URL, learnerProtocol, func(o *Options) { o.Learn = ls })
	turns := []flowtest.Turn{{App: "You are a mail assistant."}, {User: "My key is " + secret + ", keep it safe. Mail bob@acme.com the notes from /home/alice/notes.txt."}}
	n := 0
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			n++
			script := "learn" + strconv.Itoa(n)
			up.script(script, scriptedTurn{calls: []flowtest.Call{
				{ID: "x1", Tool: secret, Args: json.RawMessage(`{"` + secret + `":"` + secret + `"}`)},
				{ID: "x2", Tool: "send_email", Args: json.RawMessage(`{"to":"bob@acme.com","body":"` + secret + ` /home/alice/notes.txt","` + secret + `":1}`)},
			}, in: 1, out: 1})
			req := flowRequest(t, sf, turns, []string{"send_email"}, stream, nil)
			if status, _, b := post(t, ts, sf, req, http.Header{headerScript: {script}}); status != http.StatusOK {
				t.Fatalf("%s stream=%v: %d %s", sf, stream, status, b)
			}
		}
	}
	if err := ls.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secret, "/home/alice", "notes.txt"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the learn file holds %q", s)
		}
	}
	if !bytes.Contains(raw, []byte("send_email")) {
		t.Error("the learn file does not hold the declared tool: nothing was learned")
	}
}
