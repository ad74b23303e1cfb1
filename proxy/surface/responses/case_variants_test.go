package responses

import (
	"bytes"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// caseVariantEvents are Responses stream events that a client with a case-insensitive JSON reader
// (Go's encoding/json, System.Text.Json with the web defaults, Jackson with
// ACCEPT_CASE_INSENSITIVE_PROPERTIES) reads as carrying a call of delete_all, while an exact reader
// sees none: the later of two keys that fold together wins there.
func caseVariantEvents() map[string][2]string {
	evil := fnItem("fc_EVIL", "call_EVIL", "delete_all", `{"k":"SECRET"}`, "completed")
	typeOnly := `{"id":"fc_EVIL","type":"message","Type":"function_call","status":"completed","arguments":"{\"k\":\"SECRET\"}","call_id":"call_EVIL","name":"delete_all","role":"assistant","content":[]}`
	return map[string][2]string{
		"Item instead of item":                {"response.output_item.done", `{"output_index":1,"Item":` + evil + `}`},
		"ITEM beside a message item":          {"response.output_item.done", `{"output_index":1,"item":{"id":"msg_2","type":"message","status":"completed","role":"assistant","content":[]},"ITEM":` + evil + `}`},
		"Type beside type in the item":        {"response.output_item.done", `{"output_index":1,"item":` + typeOnly + `}`},
		"Name beside name in a good call":     {"response.output_item.done", `{"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"SECRET\"}","call_id":"call_EVIL","name":"get_weather","Name":"delete_all"}}`},
		"Arguments beside arguments":          {"response.output_item.done", `{"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Oslo\"}","Arguments":"{\"k\":\"SECRET\"}","call_id":"call_EVIL","name":"get_weather"}}`},
		"CALL_ID and Name beside a good call": {"response.output_item.done", `{"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Oslo\"}","call_id":"call_ok","CALL_ID":"call_EVIL","name":"get_weather","Name":"SECRET"}}`},
		"Response snapshot":                   {"response.in_progress", `{"Response":{"id":"resp_1","object":"response","status":"in_progress","output":[` + evil + `]}}`},
		"Output in a snapshot":                {"response.in_progress", `{"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"OUTPUT":[` + evil + `]}}`},
		"TYPE beside the event type":          {"response.output_text.delta", `{"item_id":"msg_1","output_index":0,"content_index":0,"delta":"x","TYPE":"response.output_item.done","item":` + evil + `}`},
	}
}

func TestCaseVariantKeysStream(t *testing.T) {
	for name, ev := range caseVariantEvents() {
		t.Run(name, func(t *testing.T) {
			r := (&rs{}).created().message(0, "msg_1", "Hi.", 4)
			r.ev(ev[0], ev[1])
			r.completed()
			for _, split := range []int{0, 3} {
				out, _, _ := runStream(t, r.String(), checkerFor(vet.ModeRefuse, false), split, 5)
				if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
					t.Fatalf("split %d reached the client:\n%s", split, out)
				}
			}
		})
	}
	// In the final response.
	for name, item := range map[string]string{
		"Type beside type": `{"id":"fc_EVIL","type":"message","Type":"function_call","status":"completed","arguments":"{\"k\":\"SECRET\"}","call_id":"call_EVIL","name":"delete_all","role":"assistant","content":[]}`,
		"Name beside name": `{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Oslo\"}","call_id":"call_EVIL","name":"get_weather","NAME":"delete_all"}`,
	} {
		t.Run("completed: "+name, func(t *testing.T) {
			r := (&rs{}).created().message(0, "msg_1", "Hi.", 4)
			r.output = append(r.output, item)
			r.completed()
			out, _, _ := runStream(t, r.String(), checkerFor(vet.ModeRefuse, false), 0, 1)
			if bytes.Contains(out, []byte("EVIL")) {
				t.Fatalf("reached the client:\n%s", out)
			}
		})
	}
}

func TestCaseVariantKeysBody(t *testing.T) {
	for name, body := range map[string]string{
		"Type beside type":       `{"id":"resp_1","object":"response","status":"completed","output":[{"id":"fc_EVIL","type":"message","Type":"function_call","status":"completed","arguments":"{}","call_id":"call_EVIL","name":"delete_all","role":"assistant","content":[]}]}`,
		"Output beside output":   `{"id":"resp_1","object":"response","status":"completed","output":[],"Output":[` + fnItem("fc_EVIL", "call_EVIL", "delete_all", `{}`, "completed") + `]}`,
		"CALL_ID beside call_id": `{"id":"resp_1","object":"response","status":"completed","output":[{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Oslo\"}","call_id":"call_ok","CALL_ID":"call_EVIL","name":"get_weather"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := Body([]byte(body), checkerFor(vet.ModeRefuse, false), nil); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// TestCaseVariantKeysElsewhere: keys that are the app's or a tool's own — metadata, a tool's schema
// echoed in the response, a built-in call's action, the text of arguments — are not the call's,
// whatever their case.
func TestCaseVariantKeysElsewhere(t *testing.T) {
	body := `{"id":"resp_1","object":"response","status":"completed","metadata":{"Type":"x","NAME":"y"},` +
		`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"Name":{"type":"string"},"Type":{"type":"string"}}}}],` +
		`"output":[{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","Query":"q","Type":"z"}},` +
		fnItem("fc_1", "call_1", "get_weather", `{"city":"Oslo","Type":"t"}`, "completed") + `]}`
	out, res, err := Body([]byte(body), checkerFor(vet.ModeRefuse, false), nil)
	if err != nil || res.Blocked != 0 || string(out) != body {
		t.Fatalf("%v %+v\n%s", err, res, out)
	}
	r := (&rs{}).created()
	r.ev("response.output_item.added", `{"output_index":0,"item":{"id":"ws_1","type":"web_search_call","status":"in_progress","action":{"type":"search","Query":"q"}}}`)
	r.ev("response.output_item.done", `{"output_index":0,"item":{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","Query":"q"}}}`)
	r.output = append(r.output, `{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","Query":"q"}}`)
	r.completed()
	in := strings.Replace(r.String(), `"tools":[]`, `"tools":[],"metadata":{"Output":"x"}`, -1)
	out2, ds, blocked := runStream(t, in, checkerFor(vet.ModeRefuse, false), 0, 1)
	if blocked != 0 || len(ds) != 0 || string(out2) != in {
		t.Fatalf("blocked %d %+v\n%s", blocked, ds, out2)
	}
}

// TestCaseVariantTypes: an item whose type differs from a call type in case only is a call to a
// client that reads enums without regard to case (System.Text.Json's JsonStringEnumConverter does):
// it is vetted as a call, and blocked, since a client that reads types exactly would not run it as
// one.
func TestCaseVariantTypes(t *testing.T) {
	for _, typ := range []string{"FUNCTION_CALL", "Function_Call", "function_caLL", "CUSTOM_TOOL_CALL", "Local_Shell_Call"} {
		item := `{"id":"fc_EVIL","type":"` + typ + `","status":"completed","arguments":"{\"k\":\"SECRET\"}","call_id":"call_EVIL","name":"get_weather","action":{"type":"exec","command":["SECRET"]}}`
		t.Run(typ, func(t *testing.T) {
			body := `{"id":"resp_1","object":"response","status":"completed","output":[` + item + `]}`
			got, res, err := Body([]byte(body), checkerFor(vet.ModeRefuse, false), nil)
			if err != nil || res.Blocked != 1 || bytes.Contains(got, []byte("EVIL")) || bytes.Contains(got, []byte("SECRET")) {
				t.Fatalf("body: %v %+v\n%s", err, res, got)
			}
			r := (&rs{}).created().message(0, "msg_1", "Hi.", 4)
			r.ev("response.output_item.added", `{"output_index":1,"item":`+strings.Replace(item, `"completed"`, `"in_progress"`, 1)+`}`)
			r.ev("response.output_item.done", `{"output_index":1,"item":`+item+`}`)
			r.output = append(r.output, item)
			r.completed()
			for _, split := range []int{0, 3} {
				out, _, blocked := runStream(t, r.String(), checkerFor(vet.ModeRefuse, false), split, 5)
				if blocked != 1 || bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
					t.Fatalf("split %d: blocked %d\n%s", split, blocked, out)
				}
			}
			// In a snapshot that is not final.
			r2 := (&rs{}).created()
			r2.ev("response.in_progress", `{"response":{"id":"resp_1","object":"response","status":"in_progress","output":[`+item+`]}}`)
			r2.completed()
			if out, _, _ := runStream(t, r2.String(), checkerFor(vet.ModeRefuse, false), 0, 1); bytes.Contains(out, []byte("EVIL")) {
				t.Fatalf("snapshot:\n%s", out)
			}
		})
	}
}
