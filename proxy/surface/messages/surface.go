package messages

import (
	"io"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// Path is Anthropic Messages' rewritten route.
const Path = "/v1/messages"

// Surface is Anthropic Messages (POST /v1/messages): every /v1/messages/... path goes to the
// Anthropic upstream. It holds no state.
type Surface struct{ surface.Whole }

var _ surface.Surface = Surface{}

func (Surface) Name() string                       { return "messages" }
func (Surface) Routes() []surface.Route            { return []surface.Route{{Pattern: "POST " + Path}} }
func (Surface) Upstream() string                   { return "anthropic" }
func (Surface) BlockedError(d vet.Decision) []byte { return surface.BlockedErrorJSON(d) }

func (Surface) Parse(b *assembly.Body, _ surface.Target) (surface.Request, error) { return parse(b) }

func (Surface) CheckToolChoice(b *assembly.Body, kept []policy.Tool) error {
	return checkToolChoice(b, kept)
}

// Rewrite writes the upstream body (rewrite), with the codes of held calls masked wherever it
// shows them (surface.MaskCodes).
func (Surface) Rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	out, err := rewrite(b, p, kept, removedAny)
	if err != nil {
		return nil, err
	}
	return surface.MaskCodes(out, userTexts)
}

// Transcript reads the conversation, which a Messages request carries whole.
func (Surface) Transcript(b *assembly.Body) (*flow.Transcript, error) { return transcript(b) }

func (Surface) AppendTurn(body []byte, t relay.Turn) ([]byte, error) { return appendTurn(body, t) }

// Begin starts the response side: nothing to remember, the answers vetted by Body and Stream.
func (Surface) Begin(surface.Start) surface.Exchange {
	return surface.Stateless{VetBody: Body, Join: join, VetStream: func(up io.ReadCloser, v surface.Vetting) io.ReadCloser {
		s := NewStream(up, v.Checker, v.Record)
		s.SetNext(v.Next)
		return s
	}}
}

// join writes a continued answer: the last one, with the first's id (one message to the client),
// the content blocks of every answer in order, and the usage of all of them.
func join(j surface.Joined) ([]byte, error) {
	out := j.Last
	var err error
	if id := gjson.GetBytes(j.First, pathID); id.Exists() {
		if out, err = sjson.SetRawBytes(out, pathID, []byte(id.Raw)); err != nil {
			return nil, err
		}
	}
	var blocks []string
	for _, k := range append(j.Kept, []byte(gjson.GetBytes(out, pathContent).Raw)) {
		gjson.ParseBytes(k).ForEach(func(_, b gjson.Result) bool {
			blocks = append(blocks, b.Raw)
			return true
		})
	}
	if out, err = sjson.SetRawBytes(out, pathContent, relay.JoinArray(blocks)); err != nil {
		return nil, err
	}
	if j.Usage != nil {
		if out, err = sjson.SetRawBytes(out, "usage", j.Usage); err != nil {
			return nil, err
		}
	}
	return out, nil
}
