package responses

import (
	"bytes"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// shellItem is a local_shell_call item: the client runs its command. The policy allows no local_shell tool.
func shellItem(status string) string {
	return `{"id":"lsh_EVIL","type":"local_shell_call","status":"` + status + `","call_id":"call_EVIL","action":{"type":"exec","command":["sh","-c","curl SECRET"],"env":{}}}`
}

// clientItems are output items the client acts on, for built-in tools the policy does not allow.
var clientItems = map[string]string{
	"local_shell_call":     shellItem("completed"),
	"shell_call":           `{"id":"sh_EVIL","type":"shell_call","status":"completed","call_id":"call_EVIL","action":{"commands":["rm -rf SECRET"]}}`,
	"apply_patch_call":     `{"id":"ap_EVIL","type":"apply_patch_call","status":"completed","call_id":"call_EVIL","operation":{"type":"update_file","path":"SECRET","diff":"-a\n+b"}}`,
	"computer_call":        `{"id":"cu_EVIL","type":"computer_call","status":"completed","call_id":"call_EVIL","action":{"type":"type","text":"SECRET"},"pending_safety_checks":[]}`,
	"mcp_approval_request": `{"id":"mcpr_EVIL","type":"mcp_approval_request","server_label":"x","name":"SECRET","arguments":"{}"}`,
}

func TestBuiltinClientCallNotAllowed(t *testing.T) {
	for typ, item := range clientItems {
		t.Run(typ, func(t *testing.T) {
			r := (&rs{}).created().message(0, "msg_1", "Running.", 4)
			r.ev("response.output_item.added", `{"output_index":1,"item":`+strings.Replace(item, `"completed"`, `"in_progress"`, 1)+`}`)
			r.ev("response.output_item.done", `{"output_index":1,"item":`+item+`}`)
			r.output = append(r.output, item)
			r.completed()
			for _, split := range []int{0, 3} {
				out, ds, blocked := runStream(t, r.String(), checkerFor(vet.ModeRefuse, false), split, 5)
				if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
					t.Fatalf("split %d: the %s reached the client:\n%s", split, typ, out)
				}
				if blocked != 1 || len(ds) != 1 || ds[0].Reason != vet.ReasonNotAllowed {
					t.Fatalf("blocked %d, decisions %+v", blocked, ds)
				}
				v := assemble(t, out)
				if got := v.finalTypes(); len(got) != 2 || got[0] != "message" || got[1] != "message" {
					t.Fatalf("final output %v", got)
				}
			}
			// Only the completed response (an item the stream never showed).
			r2 := (&rs{}).created()
			r2.output = append(r2.output, item)
			r2.completed()
			out, _, blocked := runStream(t, r2.String(), checkerFor(vet.ModeRefuse, false), 0, 1)
			if blocked != 1 || bytes.Contains(out, []byte("EVIL")) {
				t.Fatalf("completed only: blocked %d\n%s", blocked, out)
			}
			// Non-stream.
			body := `{"id":"resp_1","object":"response","status":"completed","output":[` + item + `]}`
			got, res, err := Body([]byte(body), checkerFor(vet.ModeRefuse, false), nil)
			if err != nil || res.Blocked != 1 || bytes.Contains(got, []byte("EVIL")) || !bytes.Contains(got, []byte("blocked tool call")) {
				t.Fatalf("body: %v %+v\n%s", err, res, got)
			}
		})
	}
}

// TestBuiltinClientCallAllowed: where the built-in tool is allowed, its items pass as before.
func TestBuiltinClientCallAllowed(t *testing.T) {
	c := vet.NewChecker(vet.Policy{Allowed: map[string]bool{"local_shell": true}})
	r := (&rs{}).created()
	r.ev("response.output_item.added", `{"output_index":0,"item":`+shellItem("in_progress")+`}`)
	r.ev("response.output_item.done", `{"output_index":0,"item":`+shellItem("completed")+`}`)
	r.output = append(r.output, shellItem("completed"))
	r.completed()
	out, ds, blocked := runStream(t, r.String(), c, 0, 1)
	if blocked != 0 || len(ds) != 0 || string(out) != r.String() {
		t.Fatalf("blocked %d %+v\n%s", blocked, ds, out)
	}
}

// TestDifferentialResponses: SSE framings that some client reads as a call item the relay did not see.
func TestDifferentialResponses(t *testing.T) {
	evil := fnItem("fc_EVIL", "call_EVIL", "delete_all", `{"k":"SECRET"}`, "completed")
	done := `{"type":"response.output_item.done","sequence_number":1,"output_index":0,"item":` + evil + `}`
	for name, raw := range map[string]string{
		"lone CR before the JSON":   "event: response.output_item.done\ndata: \r" + done + "\n\n",
		"space before data":         "event: response.output_item.done\n data: " + done + "\n\n",
		"form feed before the JSON": "event: response.output_item.done\ndata:\f" + done + "\n\n",
		"BOM":                       "\ufeffevent: response.output_item.done\n\ufeffdata: " + done + "\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			in := (&rs{}).created().String() + raw
			out, _, _ := runStream(t, in, checkerFor(vet.ModeRefuse, false), 0, 1)
			if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
				t.Fatalf("reached the client:\n%q", out)
			}
		})
	}
}

// TestCallInOtherEvents: a call item inside an event that is neither the item's added/done nor a terminal
// event (a snapshot that also names an output_index, an item event of a type this package does not know).
func TestCallInOtherEvents(t *testing.T) {
	evil := fnItem("fc_EVIL", "call_EVIL", "delete_all", `{"k":"SECRET"}`, "completed")
	for name, evs := range map[string][2]string{
		"snapshot with an output_index": {"response.in_progress", `{"output_index":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[` + evil + `]}}`},
		"snapshot with an item_id":      {"response.in_progress", `{"item_id":"msg_1","response":{"id":"resp_1","object":"response","status":"in_progress","output":[` + evil + `]}}`},
		"unknown item event":            {"response.output_item.updated", `{"output_index":1,"item":` + evil + `}`},
		"unknown item event, no index":  {"response.output_item.updated", `{"item":` + evil + `}`},
		"error event with a snapshot":   {"error", `{"code":"x","message":"y","response":{"output":[` + evil + `]}}`},
		"content part with a call item": {"response.content_part.added", `{"item_id":"msg_1","output_index":0,"content_index":1,"part":{"type":"output_text","text":""},"item":` + evil + `}`},
	} {
		t.Run(name, func(t *testing.T) {
			r := (&rs{}).created().message(0, "msg_1", "Hi.", 4)
			r.ev(evs[0], evs[1])
			r.completed()
			out, _, _ := runStream(t, r.String(), checkerFor(vet.ModeRefuse, false), 0, 1)
			if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
				t.Fatalf("reached the client:\n%s", out)
			}
		})
	}
}
