package surface

import (
	"fmt"
	"io"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/relay"
)

// Joined is what a continued non-stream answer is made of (onViolation "continue"), for a surface
// to write the one answer the client gets.
type Joined struct {
	// First is the upstream's first answer, as it sent it.
	First []byte
	// Kept is what the client keeps of each answer that was continued, in order
	// (relay.Continuation.Kept).
	Kept [][]byte
	// Last is the last answer, vetted: the continuation the client gets, or the last round's answer
	// with its refusals written as refuse writes them when no round was left.
	Last []byte
	// Usage is the usage of every answer, summed (relay.AddUsage); nil when none had one.
	Usage []byte
}

// Rounds vets a non-stream answer and continues it while it asks to be (onViolation "continue"): as
// long as the vetted answer is a relay.Continuation and v.Next gives the upstream's next answer,
// promptgate answers the calls itself and vets the next answer, whose calls the checker sees as a
// new round. join writes the client's one answer from them. Without v.Next, or when the first
// answer does not ask to be continued, the answer is vetBody's alone. The result counts the calls
// blocked in every round; a next answer that is not the API's shape is an error, as the first would
// be.
func Rounds(body []byte, v Vetting, vetBody func([]byte) ([]byte, relay.Result, error), join func(Joined) ([]byte, error)) ([]byte, relay.Result, error) {
	return RoundsUsage(member("usage"), body, v, vetBody, join)
}

// member reads an answer's member name, raw.
func member(name string) func([]byte) []byte {
	return func(answer []byte) []byte { return []byte(gjson.GetBytes(answer, name).Raw) }
}

// RoundsUsage is Rounds for an API whose answers carry their usage elsewhere: usage reads it
// (Gemini's usageMetadata, by either of its names).
func RoundsUsage(usage func(answer []byte) []byte, body []byte, v Vetting, vetBody func([]byte) ([]byte, relay.Result, error), join func(Joined) ([]byte, error)) ([]byte, relay.Result, error) {
	out, res, err := vetBody(body)
	if err != nil || res.Continue == nil || v.Next == nil {
		return out, res, err
	}
	j := Joined{First: body, Usage: relay.AddUsage(nil, usage(body))}
	total := res.Blocked
	for res.Continue != nil {
		rc, err := v.Next(res.Continue.Turn)
		if err != nil {
			break // no round left, or the upstream failed: the refusals stand, as refuse writes them
		}
		next, err := readNext(rc)
		if err != nil {
			return nil, relay.Result{}, err
		}
		j.Kept = append(j.Kept, res.Continue.Kept)
		j.Usage = relay.AddUsage(j.Usage, usage(next))
		v.Checker.NewRound()
		if out, res, err = vetBody(next); err != nil {
			return nil, relay.Result{}, err
		}
		total += res.Blocked
	}
	if len(j.Kept) == 0 {
		return out, res, nil
	}
	j.Last = out
	if out, err = join(j); err != nil {
		return nil, relay.Result{}, fmt.Errorf("%w: joining the continued answers: %v", ErrUpstreamMalformed, err)
	}
	res.Blocked, res.Continue, res.Rounds = total, nil, len(j.Kept)
	return out, res, nil
}

// readNext reads a next answer whole, at most MaxBody bytes, and closes it.
func readNext(rc io.ReadCloser) ([]byte, error) {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the continued answer: %v", ErrUpstreamMalformed, err)
	}
	if len(b) > MaxBody {
		return nil, fmt.Errorf("%w: continued answer larger than %d bytes", ErrUpstreamMalformed, MaxBody)
	}
	return b, nil
}
