package responses

import (
	"bytes"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

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
