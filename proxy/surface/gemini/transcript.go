package gemini

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/proxy/surface"
)

// transcript reads a Gemini body for the information-flow rules: systemInstruction's text parts as
// the app's, then contents whose role is user (or none) or model, each part a text (thoughts left
// out), a functionCall {name, args, id}, a functionResponse {name, response, id} (in a user
// content; in the model's, it is untrusted text: the model wrote it), Google's code execution (its
// result is the output of code_execution) or, in a user content, an attachment. A content of
// another role is output of an unknown call.
//
// Gemini matches a functionResponse to its call by name and order, or by the optional id where both
// carry one (matchResponses): an output whose call cannot be told for certain reads as tool:?, the
// source no rule trusts.
func transcript(b *assembly.Body) (*flow.Transcript, error) {
	root := gjson.ParseBytes(b.Raw())
	contents, ok := get(root, fContents)
	if !ok {
		return nil, invalidBoth(fContents)
	}
	if !contents.IsArray() {
		return nil, assembly.Invalid(fContents.camel(), "contents must be an array of contents")
	}
	t := flow.NewTranscript()
	if sys, _ := get(root, fSystem); sys.IsObject() {
		parts, _ := get(sys, fParts)
		parts.ForEach(func(_, p gjson.Result) bool {
			if tx, _ := get(p, fText); tx.Type == gjson.String && tx.Str != "" {
				t.Text(flow.RoleApp, tx.Str, -1)
			}
			return true
		})
	}
	sources := matchResponses(contents)
	i := 0
	contents.ForEach(func(_, c gjson.Result) bool {
		readContent(t, c, i, sources)
		i++
		return true
	})
	return t, nil
}

// readContent reads the parts of content i.
func readContent(t *flow.Transcript, c gjson.Result, i int, sources map[[2]int]responseRef) {
	role := flow.RoleUser
	switch r, _ := get(c, fRole); r.String() {
	case "user", "":
	case "model":
		role = flow.RoleAssistant
	default:
		t.Untrusted(surface.JSONText(c, false), i)
		return
	}
	var text []string
	flush := func() {
		if len(text) > 0 {
			t.Text(role, strings.Join(text, "\n"), i)
			text = text[:0]
		}
	}
	parts, _ := get(c, fParts)
	j := 0
	parts.ForEach(func(_, p gjson.Result) bool {
		defer func() { j++ }()
		if fc, _ := get(p, fFunctionCall); fc.IsObject() {
			flush()
			nm, _ := get(fc, fName)
			id, _ := get(fc, fID)
			args, _ := get(fc, fArgs)
			t.Call(nm.String(), id.String(), argsOf(args), "", i)
			return true
		}
		if fr, _ := get(p, fFunctionResp); fr.IsObject() {
			flush()
			if role == flow.RoleAssistant {
				// The model's own content: whatever it says, it is no tool's output.
				t.Untrusted(surface.JSONText(fr, false), i)
				return true
			}
			r, _ := get(fr, fResponse)
			call := sources[[2]int{i, j}]
			t.CallOutput(call.name, call.args, outputOf(r), i)
			return true
		}
		if th, _ := get(p, fThought); th.Type == gjson.True {
			return true
		}
		if tx, _ := get(p, fText); tx.Type == gjson.String {
			text = append(text, tx.Str)
			return true
		}
		readOther(t, role, p, i, flush)
		return true
	})
	flush()
}

// readOther reads a part that is neither text nor a call or its response: the result of Google's
// code execution is that tool's output; the model's code is its own; anything else of the user's is
// an attachment.
func readOther(t *flow.Transcript, role flow.Role, p gjson.Result, i int, flush func()) {
	if r, _ := get(p, "codeExecutionResult code_execution_result"); r.Exists() {
		flush()
		t.ToolOutput(ToolCodeExecution, flow.Output{Text: surface.JSONText(r, false)}, i)
		return
	}
	if role == flow.RoleUser {
		flush()
		t.Attachment(surface.JSONText(p, false), i)
	}
}

// ToolCodeExecution is the built-in tool whose results a conversation carries as
// codeExecutionResult parts.
const ToolCodeExecution = "code_execution"

// argsOf is a call's argument JSON text: its args, {} when it has none.
func argsOf(args gjson.Result) []byte {
	if !args.Exists() || args.Type == gjson.Null {
		return []byte("{}")
	}
	return []byte(args.Raw)
}

// outputOf reads a functionResponse's response: every string of it as text, and as the document the
// tool returned its "output" member when that is a string (as Google asks tools to answer), else
// the response object itself.
func outputOf(r gjson.Result) flow.Output {
	doc := r.Raw
	if o := r.Get("output"); o.Type == gjson.String {
		doc = o.Str
	}
	return flow.Output{Text: surface.JSONText(r, false), Doc: doc}
}

// responseRef is a functionCall or a functionResponse part of a conversation.
type responseRef struct {
	name, id string
	at       [2]int // content, part
	args     []byte // a call's raw arguments
}

// matchResponses gives each functionResponse part of contents (by content and part index) the call
// it is the output of (its tool and arguments), none (tool:?) where that is not certain:
//
//   - Only a user content (or one without a role) answers calls: a functionResponse part in the model's
//     own content is the model's text, and takes no call's id and no call's place.
//   - A response with an id answers the one earlier call with that id and the same name; an id no call has,
//     that two calls have, that an earlier response took already, or whose call has another name: tool:?.
//   - A response without an id answers a call of its name of the latest run of contents that hold calls (a
//     turn of the model, and Gemini's parallel calls), in order. Where such a run has several calls of one
//     name, its responses of that name must be as many; and never more than its calls. Otherwise every
//     response of that name in that run is tool:?: which call it answers cannot be told.
func matchResponses(contents gjson.Result) map[[2]int]responseRef {
	out := map[[2]int]responseRef{}
	ids := map[string]responseRef{} // call id -> the call; no name when two calls have it
	taken := map[string]bool{}
	var run []responseRef    // the calls of the latest run
	var byName []responseRef // the responses without id answering it
	settle := func() {
		settleByName(run, byName, out)
		byName = nil
	}
	inRun := false
	i := 0
	contents.ForEach(func(_, c gjson.Result) bool {
		parts, _ := get(c, fParts)
		role, _ := get(c, fRole)
		answers := role.String() == "user" || role.String() == ""
		calls := false
		j := 0
		parts.ForEach(func(_, p gjson.Result) bool {
			if fc, _ := get(p, fFunctionCall); fc.IsObject() {
				if !inRun {
					settle()
					run, inRun = nil, true
				}
				calls = true
				nm, _ := get(fc, fName)
				id, _ := get(fc, fID)
				args, _ := get(fc, fArgs)
				call := responseRef{name: nm.String(), id: id.String(), at: [2]int{i, j}, args: argsOf(args)}
				run = append(run, call)
				if id := id.String(); id != "" {
					if _, dup := ids[id]; dup {
						ids[id] = responseRef{}
					} else {
						ids[id] = call
					}
				}
			}
			if fr, _ := get(p, fFunctionResp); fr.IsObject() && answers {
				nm, _ := get(fr, fName)
				ref := responseRef{name: nm.String(), at: [2]int{i, j}}
				if id, _ := get(fr, fID); id.String() != "" {
					if call := ids[id.String()]; call.name != "" && call.name == ref.name && !taken[id.String()] {
						out[ref.at] = call
					}
					taken[id.String()] = true
				} else {
					byName = append(byName, ref)
				}
			}
			j++
			return true
		})
		if !calls {
			inRun = false
		}
		i++
		return true
	})
	settle()
	return out
}

// settleByName gives the responses without id of one run the tools of its calls (see
// matchResponses).
func settleByName(run, responses []responseRef, out map[[2]int]responseRef) {
	calls := map[string][]responseRef{}
	for _, c := range run {
		calls[c.name] = append(calls[c.name], c)
	}
	answers := map[string]int{}
	for _, r := range responses {
		answers[r.name]++
	}
	nth := map[string]int{}
	for _, r := range responses {
		n, a := len(calls[r.name]), answers[r.name]
		if r.name != "" && a <= n && (n == 1 || a == n) {
			out[r.at] = calls[r.name][nth[r.name]] // in order: the k-th response answers the k-th call
		}
		nth[r.name]++
	}
}
