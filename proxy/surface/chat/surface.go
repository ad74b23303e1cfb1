package chat

import (
	"io"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// Path is Chat Completions' rewritten route.
const Path = "/v1/chat/completions"

// Surface is Chat Completions (POST /v1/chat/completions). Its only state is the memory of the
// completions it relayed with store: true (see stored.go); the zero value remembers none (New
// does).
type Surface struct {
	surface.Whole
	stored *storedMemory
}

var (
	_ surface.Surface     = Surface{}
	_ surface.Passthrough = Surface{}
)

func (Surface) Name() string                       { return "chat" }
func (Surface) Routes() []surface.Route            { return []surface.Route{{Pattern: "POST " + Path}} }
func (Surface) Upstream() string                   { return "openai" }
func (Surface) BlockedError(d vet.Decision) []byte { return surface.BlockedErrorJSON(d) }

func (Surface) Parse(b *assembly.Body, _ surface.Target) (surface.Request, error) { return parse(b) }

func (Surface) CheckToolChoice(b *assembly.Body, kept []policy.Tool) error {
	return checkToolChoice(b, kept)
}

// Rewrite writes the upstream body, with the codes of held calls masked wherever it shows them
// (surface.MaskCodes).
func (Surface) Rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	out, err := rewrite(b, p, kept, removedAny)
	if err != nil {
		return nil, err
	}
	return surface.MaskCodes(out, userTexts)
}

// Transcript reads the conversation, which a chat request carries whole.
func (Surface) Transcript(b *assembly.Body) (*flow.Transcript, error) { return transcript(b) }

func (Surface) AppendTurn(body []byte, t relay.Turn) ([]byte, error) { return appendTurn(body, t) }

// Begin starts the response side: nothing to remember, the answers vetted by Body and Stream; where
// the upstream stores the completion under a shared key, its ids are bound to the client (see
// stored). An answer with several choices (n above 1) is not continued in continue mode: promptgate
// cannot answer the calls of choices the client has to choose between.
func (s Surface) Begin(st surface.Start) surface.Exchange {
	var m [2]gjson.Result
	assembly.GetEach(st.Upstream, []string{"n", "store"}, m[:]) // one walk for both members
	several := m[0].Int() > 1
	if store := m[1]; store.Exists() && store.Type != gjson.False && store.Type != gjson.Null {
		return s.storedExchange(st, several) // a loose reader may take any other value for true: remembering costs little
	}
	vetStream := vetOneChoice
	if several {
		vetStream = vetSeveralChoices
	}
	return surface.Stateless{VetBody: Body, Join: join, VetStream: vetStream}
}

// vetOneChoice and vetSeveralChoices are newStream of an answer with one choice and with several:
// functions, not a closure, so that Begin makes none per request.
func vetOneChoice(up io.ReadCloser, v surface.Vetting) io.ReadCloser { return newStream(up, v, false) }

func vetSeveralChoices(up io.ReadCloser, v surface.Vetting) io.ReadCloser {
	return newStream(up, v, true)
}

// newStream is the stream vetter of an answer, continued in continue mode unless it has several
// choices.
func newStream(up io.ReadCloser, v surface.Vetting, several bool) *Stream {
	s := NewStream(up, v.Checker, v.Record)
	if !several {
		s.SetNext(v.Next)
	}
	return s
}

// join writes a continued answer: the last one, with the first's id and created (one completion to
// the client), the text of every answer in order, and the usage of all of them.
func join(j surface.Joined) ([]byte, error) {
	out := j.Last
	first := gjson.ParseBytes(j.First)
	var err error
	for _, k := range []string{pathID, "created"} {
		if v := first.Get(k); v.Exists() {
			if out, err = sjson.SetRawBytes(out, k, []byte(v.Raw)); err != nil {
				return nil, err
			}
		}
	}
	var text strings.Builder
	for _, k := range j.Kept {
		if v := gjson.ParseBytes(k); v.Type == gjson.String {
			text.WriteString(v.Str)
		}
	}
	path := pathChoices + ".0." + pathMessage + "." + pathContent
	if text.Len() > 0 && gjson.GetBytes(out, pathChoices+".0."+pathMessage).IsObject() {
		switch last := gjson.GetBytes(out, path); {
		case last.Type == gjson.String:
			out, err = sjson.SetBytes(out, path, text.String()+last.Str)
		case last.IsArray():
			part, _ := sjson.SetBytes([]byte(`{"type":"text","text":""}`), "text", text.String())
			parts := []string{string(part)}
			for _, p := range last.Array() {
				parts = append(parts, p.Raw)
			}
			out, err = sjson.SetRawBytes(out, path, relay.JoinArray(parts))
		default:
			out, err = sjson.SetBytes(out, path, text.String())
		}
		if err != nil {
			return nil, err
		}
	}
	if j.Usage != nil {
		if out, err = sjson.SetRawBytes(out, "usage", j.Usage); err != nil {
			return nil, err
		}
	}
	return out, nil
}
