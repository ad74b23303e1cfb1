package gemini

import (
	"io"
	"net/url"
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

// The methods of the rewritten routes, the last part of the path after the model and a colon.
const (
	MethodGenerate = "generateContent"
	MethodStream   = "streamGenerateContent"
)

// Surface is Google's Gemini API: POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent (and the same on tunedModels/{model}); its other methods and paths go to
// the Gemini upstream unchanged. It holds no state.
type Surface struct{ surface.Whole }

var _ surface.Surface = Surface{}

func (Surface) Name() string     { return "gemini" }
func (Surface) Upstream() string { return "gemini" }

// Routes are the models' and the tuned models' methods: the wildcard is the path's last segment,
// MODEL:METHOD.
func (Surface) Routes() []surface.Route {
	return []surface.Route{
		{Pattern: "POST /v1beta/models/{model_method}", Target: target("")},
		{Pattern: "POST /v1beta/tunedModels/{model_method}", Target: target("tunedModels/")},
	}
}

// target reads a route's last segment as Google's router does, MODEL:METHOD split at the last colon
// (a colon within the segment, escaped as %3A or not, is read so too): :generateContent and
// :streamGenerateContent are rewritten, any other method passes through. A model name that is not
// letters, digits, '.', '-' and '_' is refused: a name holding a colon, a slash or a percent sign
// could be read otherwise by the upstream. The stream is relayed as SSE only: it needs alt=sse, and
// the answer of a non-stream call must be JSON (no alt, or alt=json).
func target(prefix string) func(func(string) string, url.Values) (surface.Target, bool, error) {
	return func(value func(string) string, q url.Values) (surface.Target, bool, error) {
		seg := value("model_method")
		i := strings.LastIndexByte(seg, ':')
		if i < 0 {
			return surface.Target{}, false, nil
		}
		model, method := seg[:i], seg[i+1:]
		var t surface.Target
		switch {
		case strings.EqualFold(method, MethodGenerate):
		case strings.EqualFold(method, MethodStream):
			t.Stream = true
		default:
			return t, false, nil
		}
		if !modelName(model) {
			return t, true, assembly.Invalid("model", "the model in the path must be letters, digits, '.', '-' and '_', got %q", model)
		}
		t.Model = prefix + model
		alt := append(q["alt"], q["$alt"]...)
		switch {
		case t.Stream && (len(alt) != 1 || alt[0] != "sse"):
			return t, true, assembly.Invalid("alt", "%s is relayed as server-sent events only: add ?alt=sse", MethodStream)
		case !t.Stream && (len(alt) > 1 || len(alt) == 1 && alt[0] != "json"):
			return t, true, assembly.Invalid("alt", "%s answers JSON only: leave alt out (or alt=json)", MethodGenerate)
		}
		return t, true, nil
	}
}

// modelName reports whether s is a model id as Google names them.
func modelName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (Surface) Parse(b *assembly.Body, t surface.Target) (surface.Request, error) { return parse(b, t) }

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

// Transcript reads the conversation, which a Gemini request carries whole.
func (Surface) Transcript(b *assembly.Body) (*flow.Transcript, error) { return transcript(b) }

func (Surface) AppendTurn(body []byte, t relay.Turn) ([]byte, error) { return appendTurn(body, t) }

// BlockedError is the 403 in Google's shape (see ErrorJSON).
func (Surface) BlockedError(d vet.Decision) []byte { return blockedJSON(d) }

// Begin starts the response side: nothing to remember, the answers vetted by Body and Stream. An
// answer with several candidates (candidateCount above 1) is not continued in continue mode:
// promptgate cannot answer the calls of candidates the client has to choose between.
func (Surface) Begin(st surface.Start) surface.Exchange {
	several := false
	if gc, ok := get(assembly.Parse(st.Upstream), fGenConfig); ok {
		n, ok := get(gc, fCandidateN)
		several = !ok || n.Int() > 1
	}
	return surface.Stateless{VetBody: Body, Join: join, Usage: usageOf, VetStream: func(up io.ReadCloser, v surface.Vetting) io.ReadCloser {
		s := NewStream(up, v.Checker, v.Record)
		if !several {
			s.SetNext(v.Next)
		}
		return s
	}}
}

// usageOf is an answer's usageMetadata, by either of its names (nil when it gives both).
func usageOf(answer []byte) []byte {
	if u, ok := get(gjson.ParseBytes(answer), fUsage); ok {
		return []byte(u.Raw)
	}
	return nil
}

// join writes a continued answer: the last one, with the first's responseId (one answer to the
// client), the parts of every answer's candidate in order, and the usage of all of them; each
// member under the name the last answer gives it.
func join(j surface.Joined) ([]byte, error) {
	out := j.Last
	last := gjson.ParseBytes(out)
	var err error
	if id, _ := get(gjson.ParseBytes(j.First), fResponseID); id.Exists() {
		if out, err = sjson.SetRawBytes(out, key(last, fResponseID), []byte(id.Raw)); err != nil {
			return nil, err
		}
	}
	path := "candidates.0.content.parts"
	var parts []string
	for _, k := range append(j.Kept, []byte(gjson.GetBytes(out, path).Raw)) {
		gjson.ParseBytes(k).ForEach(func(_, p gjson.Result) bool {
			parts = append(parts, p.Raw)
			return true
		})
	}
	if gjson.GetBytes(out, "candidates.0.content").IsObject() {
		if out, err = sjson.SetRawBytes(out, path, relay.JoinArray(parts)); err != nil {
			return nil, err
		}
	}
	if j.Usage != nil {
		if out, err = sjson.SetRawBytes(out, key(last, fUsage), j.Usage); err != nil {
			return nil, err
		}
	}
	return out, nil
}
