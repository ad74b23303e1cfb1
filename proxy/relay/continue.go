package relay

import (
	"bytes"
	"io"
	"maps"
	"slices"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
)

// Next asks the upstream again in onViolation "continue": promptgate answered every call of the
// model's turn t itself, with a refusal as each call's result, and the upstream's new answer
// follows in the same client exchange. It returns the new answer's body (an SSE stream for a
// stream, JSON otherwise), or an error when there is no round left or the upstream failed: the
// turn's calls are then refused as in refuse mode.
type Next func(t Turn) (io.ReadCloser, error)

// Continuation is an answer whose every call was blocked in continue mode, each one promptgate can
// answer itself: the model's turn with the refusals, and what the client keeps of the answer when
// it is continued.
type Continuation struct {
	Turn Turn
	// Kept is the answer without its refused calls and without notices, in the surface's form (the
	// text of a chat message, a Messages content array, a Responses output array).
	Kept []byte
}

// Answer is promptgate's answer to a call blocked or held in continue mode, as the call's result:
// the refusal, which names the tool and the reason (never the arguments), or, for a held call, that
// it waits for the user's confirmation (never the code), with the notice the client must still be
// shown. custom marks a custom tool's call (free-form input).
func Answer(call *vet.Call, d vet.Decision, custom bool) Answered {
	a := Answered{ID: call.ID, Tool: call.Name, Args: bytes.Clone(call.Args), Custom: custom,
		Result: flow.RefusalText(call.Name, d.Reason)}
	if d.Verdict == vet.VerdictHeld {
		a.Result, a.Notice = flow.HoldText(call.Name), vet.Notice(d)
	}
	return a
}

// Answerable reports whether promptgate may answer a call itself in continue mode: it was blocked,
// or held for confirmation (the model is told it waits for the user, the client gets the notice
// with its code), and has an id to answer by (legacy Chat function calls have none, and are
// answered by name).
func Answerable(c *vet.Checker, call *vet.Call, d vet.Decision) bool {
	return c.Mode() == vet.ModeContinue && (d.Verdict == vet.VerdictBlocked || d.Verdict == vet.VerdictHeld) &&
		(call.ID != "" || call.Legacy)
}

// A stream in continue mode goes in rounds. When a call of a round is blocked and promptgate can
// answer it (Refuse), the round may end up continued: then nothing the round writes from there on
// reaches the client — the refusal's notice, the calls and text after it, the round's end — since
// the upstream is asked again and its next answer follows in the same stream. That output is
// parked, not handed out, until the round's fate is known: a call of the round that reaches the
// client, or is held for confirmation, or cannot be answered (Spoil) sends the parked output on at
// once and the round goes on as in refuse mode; at the round's end (EndRound), the upstream is
// asked again and the parked output dropped, or, when that fails, sent on. An answer to a call that
// never reaches the client either way (an approval request of a hosted MCP call, Reply) parks
// nothing: what follows it goes out as it comes.

// rounds is a stream's state in continue mode.
type rounds struct {
	next    Next
	parking bool
	mark    int // where the parked part of Out starts in the current step
	parked  []byte
	answers []Answered
	spoiled bool
	n       int
	// kept are the notices of the held calls of the last round continued, for the surface to show
	// again in the next round (Kept): they went out with the parked output that the continuation
	// dropped.
	kept []string
}

// SetNext puts the stream in continue mode; nil (the default) refuses as refuse mode does.
func (r *Relay) SetNext(next Next) { r.round.next = next }

// Continuing reports whether the stream is in continue mode.
func (r *Relay) Continuing() bool { return r.round.next != nil }

// Round is how many rounds the stream has been continued: 0 in the upstream's first answer.
func (r *Relay) Round() int { return r.round.n }

// Parking reports whether the round waits to be continued: a refused call's answer is pending and
// what is written is parked.
func (r *Relay) Parking() bool { return r.round.parking }

// Refuse records promptgate's answer to a call blocked in continue mode, before the surface writes
// the call's notice (which is then parked with what follows). It does nothing outside continue mode
// or once the round cannot be continued: the notice goes out as in refuse mode.
func (r *Relay) Refuse(a Answered) {
	if r.round.next == nil || r.round.spoiled {
		return
	}
	r.round.answers = append(r.round.answers, a)
	if !r.round.parking {
		r.round.parking, r.round.mark = true, len(r.Out)
	}
}

// Reply records promptgate's answer to a call the client is never shown, whatever becomes of the
// round (an approval request of a hosted MCP call, which only promptgate answers): it goes upstream
// if the round is continued. Unlike Refuse it parks nothing. It reports false, and does nothing,
// outside continue mode or once the round cannot be continued.
func (r *Relay) Reply(a Answered) bool {
	if r.round.next == nil || r.round.spoiled {
		return false
	}
	r.round.answers = append(r.round.answers, a)
	return true
}

// Continuable reports whether the round may still be continued at its end: answers wait and no
// call of the round spoiled it.
func (r *Relay) Continuable() bool {
	return r.round.next != nil && !r.round.spoiled && len(r.round.answers) > 0
}

// Spoil says that the round cannot be continued (a call of it reaches the client, is held, or
// cannot be answered): what was parked goes out now.
func (r *Relay) Spoil() {
	if r.round.next == nil {
		return
	}
	r.round.spoiled = true
	r.flushRound()
}

// Deliver writes b out at once, ahead of what the round parks in the current step: output that the
// client gets whatever becomes of the round (the text an event holds before a refused call, where
// one event holds both). Outside a parked round it is an append to Out.
func (r *Relay) Deliver(b []byte) {
	if !r.round.parking {
		r.Out = append(r.Out, b...)
		return
	}
	r.Out = slices.Insert(r.Out, r.round.mark, b...)
	r.round.mark += len(b)
}

// flushRound sends on what was parked.
func (r *Relay) flushRound() {
	if r.round.parking {
		r.round.parked = append(r.round.parked, r.Out[r.round.mark:]...)
		r.Out = append(r.Out[:r.round.mark], r.round.parked...)
	}
	r.round.parking, r.round.parked = false, r.round.parked[:0]
}

// EndRound is called at the clean end of a round: when refused calls wait and the round can be
// continued, it asks for the next round with t (its Calls are the refused calls' answers) and, when
// it comes, reads it in place of the upstream, which is closed, drops what was parked and reports
// true; the surface then starts its next round, keeping what the client was shown. Otherwise what
// was parked goes out, the round state is cleared for the stream's end, and it reports false.
func (r *Relay) EndRound(t Turn) bool {
	defer func() {
		r.round.answers, r.round.spoiled = nil, false
	}()
	if r.round.next == nil || r.round.spoiled || len(r.round.answers) == 0 {
		r.flushRound()
		return false
	}
	t.Calls = r.round.answers
	up, err := r.round.next(t)
	if err != nil {
		r.flushRound()
		return false
	}
	_ = r.closeUpstream()
	r.up = up
	r.rd = newReader(up)
	if r.round.parking {
		r.Out = r.Out[:r.round.mark]
	}
	r.round.parking, r.round.parked = false, r.round.parked[:0]
	r.round.n++
	r.round.kept = r.round.kept[:0]
	for _, a := range t.Calls {
		if a.Notice != "" {
			r.round.kept = append(r.round.kept, a.Notice)
		}
	}
	return true
}

// Kept returns, once a round was continued (EndRound reported true), the notices of the calls of
// that round that are held for confirmation, which the surface writes again at the start of the
// next round: the client must see each with its code. It empties the list.
func (r *Relay) Kept() []string {
	k := r.round.kept
	r.round.kept = nil
	return k
}

// AddUsage adds the numbers of usage object b to those of a, member by member at any depth (a
// member of one only is kept as it is; lists of counts are added as addCounts says; any other value
// that is not a number is b's): the usage of every round of an answer summed into what the client
// is shown. Either may be empty; the result is a JSON object, or nil when both are.
func AddUsage(a, b []byte) []byte {
	ua, ub := gjson.ParseBytes(a), gjson.ParseBytes(b)
	switch {
	case !ub.IsObject():
		if ua.IsObject() {
			return a
		}
		return nil
	case !ua.IsObject():
		return b
	}
	out := bytes.Clone(a)
	ub.ForEach(func(k, vb gjson.Result) bool {
		va := ua.Get(gjson.Escape(k.Str))
		key := gjson.Escape(k.Str)
		var err error
		switch {
		case vb.Type == gjson.Number && va.Type == gjson.Number:
			if va.Raw == "0" || vb.Raw == "0" || isInt(va.Raw) && isInt(vb.Raw) {
				out, err = sjson.SetBytes(out, key, va.Int()+vb.Int())
			} else {
				out, err = sjson.SetBytes(out, key, va.Float()+vb.Float())
			}
		case vb.IsObject() && va.IsObject():
			out, err = sjson.SetRawBytes(out, key, AddUsage([]byte(va.Raw), []byte(vb.Raw)))
		case vb.IsArray() && va.IsArray():
			out, err = sjson.SetRawBytes(out, key, addCounts(va, vb))
		case vb.Type == gjson.Null && va.Exists():
		default:
			out, err = sjson.SetRawBytes(out, key, []byte(vb.Raw))
		}
		return err == nil
	})
	return out
}

// addCounts adds two lists of counts (Gemini's promptTokensDetails,
// [{"modality":"TEXT","tokenCount":7}]): each object of b is added to the object of a whose members
// other than numbers are the same (its modality), or appended. A list with an element that is not
// an object is not a list of counts: b's is kept whole.
func addCounts(a, b gjson.Result) []byte {
	var elems []gjson.Result
	objects := true
	a.ForEach(func(_, e gjson.Result) bool {
		objects = e.IsObject()
		elems = append(elems, e)
		return objects
	})
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = e.Raw
	}
	b.ForEach(func(_, e gjson.Result) bool {
		if objects = objects && e.IsObject(); !objects {
			return false
		}
		for i, ea := range elems {
			if sameLabels(ea, e) {
				out[i] = string(AddUsage([]byte(out[i]), []byte(e.Raw)))
				return true
			}
		}
		elems, out = append(elems, e), append(out, e.Raw)
		return true
	})
	if !objects {
		return []byte(b.Raw)
	}
	return JoinArray(out)
}

// sameLabels reports whether two objects have the same members other than numbers, with the same
// values.
func sameLabels(a, b gjson.Result) bool {
	labels := func(o gjson.Result) map[string]string {
		m := map[string]string{}
		o.ForEach(func(k, v gjson.Result) bool {
			if v.Type != gjson.Number {
				m[k.Str] = v.Raw
			}
			return true
		})
		return m
	}
	return maps.Equal(labels(a), labels(b))
}

// isInt reports whether a JSON number is written as an integer.
func isInt(raw string) bool { return !bytes.ContainsAny([]byte(raw), ".eE") }
