package responses

import (
	"bytes"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// shellItem is a local_shell_call item: the client runs its command. The policy allows no
// local_shell tool.
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

// TestDifferentialResponses: SSE framings that some client reads as a call item the relay did not
// see.
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

// TestCallInOtherEvents: a call item inside an event that is neither the item's added/done nor a
// terminal event (a snapshot that also names an output_index, an item event of a type this package
// does not know).
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
