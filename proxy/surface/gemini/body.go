package gemini

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Body vets a non-stream GenerateContentResponse (raw bytes) and returns it, edited with sjson
// where needed. Its calls are the functionCall parts of every candidate's content.
//
// refuse: a blocked call's part is removed; where no call is left in a candidate, a text part with
// the notices (`[promptgate] blocked tool call NAME: REASON`, one line each) is appended, and where
// one is left, a text part with its notice takes the place of a call held for confirmation.
// finishReason stays as the upstream sent it (Gemini answers STOP whether or not it called a
// function). error: the body is returned unchanged and Result.ErrorCall is set. audit: unchanged;
// violations recorded as audited. A body that is not one valid JSON object with unique keys, whose
// keys differ from known ones in case alone, or that gives a field by both its names, is an error.
func Body(body []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error) {
	var res relay.Result
	if err := jsoncheck.Object(body, jsoncheck.Limits{MaxDepth: maxDepth}); err != nil {
		return body, res, fmt.Errorf("gemini: response body: %w", err)
	}
	if relay.FoldedKeyOutside(body, answerKeys(), fArgs.camel()) {
		return body, res, fmt.Errorf("gemini: response body: a key differs from a known one in case only")
	}
	root := gjson.ParseBytes(body)
	cands, ok := get(root, fCandidates)
	if !ok {
		return body, res, bothErr("response body", fCandidates)
	}
	out := body
	n := len(cands.Array())
	for pos, cand := range cands.Array() {
		cc, err := readCandidate(cand, pos)
		if err != nil {
			return body, res, err
		}
		if len(cc.calls) == 0 {
			continue
		}
		ds := res.Vet(c, rec, cc.calls)
		if res.ErrorCall != nil {
			return body, res, nil // the caller answers with an error; the rest of the body does not matter
		}
		if n == 1 {
			res.Continue = continuation(c, cc, ds)
		}
		parts, changed := vettedParts(cc, ds)
		if !changed {
			continue
		}
		path := key(root, fCandidates) + "." + strconv.Itoa(pos) + "." + cc.contentKey + "." + cc.partsKey
		if out, err = sjson.SetRawBytes(out, path, relay.JoinArray(parts)); err != nil {
			return body, res, fmt.Errorf("gemini: edit candidate %d: %w", pos, err)
		}
	}
	return out, res, nil
}

// candidate is a candidate's content as the vetting reads it.
type candidate struct {
	index                int
	parts                []gjson.Result
	calls                []*vet.Call
	at                   []int // the part of each call
	contentKey, partsKey string
}

// readCandidate reads the functionCall parts of a candidate's content. A part that gives a field
// both ways makes the answer an error.
func readCandidate(cand gjson.Result, pos int) (candidate, error) {
	cc := candidate{index: pos}
	if idx, ok := relay.IntField(cand.Get(fIndex.camel())); ok {
		cc.index = idx
	}
	content, ok := get(cand, fContent)
	parts, ok2 := get(content, fParts)
	if !ok || !ok2 {
		return cc, bothErr("a candidate", fParts)
	}
	cc.contentKey, cc.partsKey = key(cand, fContent), key(content, fParts)
	cc.parts = parts.Array()
	for j, p := range cc.parts {
		fc, ok := get(p, fFunctionCall)
		if !ok {
			return cc, bothErr("a part", fFunctionCall)
		}
		if !fc.Exists() {
			continue
		}
		call, err := readCall(fc, cc.index, j)
		if err != nil {
			return cc, err
		}
		cc.calls = append(cc.calls, call)
		cc.at = append(cc.at, j)
	}
	return cc, nil
}

// readCall reads a functionCall {name, args, id}: a call without an id is answered by its name
// (Legacy); args must be an object (none is {}). A call with any other member is blocked: the
// vetting reads name and args alone, while a client may build the arguments from another (Vertex's
// streamed partialArgs, which Google's Go client hands over with willContinue).
func readCall(fc gjson.Result, choice, index int) (*vet.Call, error) {
	call := &vet.Call{Choice: choice, Index: index}
	nm, ok1 := get(fc, fName)
	args, ok2 := get(fc, fArgs)
	id, ok3 := get(fc, fID)
	if !ok1 || !ok2 || !ok3 {
		return nil, bothErr("a functionCall", fName)
	}
	if !fc.IsObject() {
		call.Fail(vet.ReasonUnsupportedType)
	}
	fc.ForEach(func(k, _ gjson.Result) bool {
		if k.Str != fName.camel() && k.Str != fArgs.camel() && k.Str != fID.camel() {
			call.Fail(vet.ReasonUnreadMember)
		}
		return true
	})
	if nm.Type == gjson.String {
		call.AddName(strings.Clone(nm.Str))
	}
	call.Args = append([]byte(nil), argsOf(args)...)
	switch {
	case id.Type == gjson.String && id.Str != "":
		call.ID = strings.Clone(id.Str)
	case id.Exists() && id.Type != gjson.Null && id.Type != gjson.String:
		call.Fail(vet.ReasonUnsupportedType)
	default:
		call.Legacy = true
	}
	return call, nil
}

// vettedParts are a candidate's parts once its calls are decided (see Body); changed is false when
// they are the parts as they were.
func vettedParts(cc candidate, ds []vet.Decision) (parts []string, changed bool) {
	drop := map[int]string{} // part -> notice of a blocked call
	var notices []string
	for i, d := range ds {
		if d.Blocked() {
			drop[cc.at[i]] = vet.Notice(d)
			notices = append(notices, vet.Notice(d))
		}
	}
	if len(drop) == 0 {
		return nil, false
	}
	callLeft := len(drop) < len(cc.calls)
	for j, p := range cc.parts {
		n, dropped := drop[j]
		switch {
		case !dropped:
			parts = append(parts, p.Raw)
		case callLeft && held(ds, cc.at, j):
			// A held call's notice takes its place in any case: it carries the code that releases
			// the call.
			parts = append(parts, string(textPart(n)))
		}
	}
	if !callLeft {
		parts = append(parts, string(textPart(strings.Join(notices, "\n"))))
	}
	return parts, true
}

// held reports whether the call at part j was held for confirmation.
func held(ds []vet.Decision, at []int, j int) bool {
	for i, a := range at {
		if a == j {
			return ds[i].Verdict == vet.VerdictHeld
		}
	}
	return false
}

// continuation is the candidate's turn for promptgate to answer itself (onViolation "continue"),
// when every call of it was blocked or held and can be answered; nil otherwise. What the client
// keeps of it is its other parts, and the notices of its held calls (which carry the codes).
func continuation(c *vet.Checker, cc candidate, ds []vet.Decision) *relay.Continuation {
	var raw []string
	for _, p := range cc.parts {
		raw = append(raw, p.Raw)
	}
	t := relay.Turn{Raw: relay.JoinArray(raw)}
	calls := map[int]bool{}
	var held []string
	for i, call := range cc.calls {
		if !relay.Answerable(c, call, ds[i]) {
			return nil
		}
		a := relay.Answer(call, ds[i], false)
		t.Calls = append(t.Calls, a)
		calls[cc.at[i]] = true
		if a.Notice != "" {
			held = append(held, string(textPart(a.Notice)))
		}
	}
	var kept []string
	for j, p := range cc.parts {
		if !calls[j] {
			kept = append(kept, p.Raw)
		}
	}
	return &relay.Continuation{Turn: t, Kept: relay.JoinArray(append(kept, held...))}
}
