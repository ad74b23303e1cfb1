package chat

import (
	"io"
	"strings"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// Path is Chat Completions' rewritten route.
const Path = "/v1/chat/completions"

// Surface is Chat Completions (POST /v1/chat/completions). It holds no state.
type Surface struct{}

var _ surface.Surface = Surface{}

func (Surface) Name() string                       { return "chat" }
func (Surface) Path() string                       { return Path }
func (Surface) Upstream() surface.Upstream         { return surface.OpenAI }
func (Surface) Owns(p string) bool                 { return p == Path || strings.HasPrefix(p, Path+"/") }
func (Surface) ContextInPrompt() bool              { return false }
func (Surface) BlockedError(d vet.Decision) []byte { return surface.BlockedErrorJSON(d) }

func (Surface) Parse(b *assembly.Body) (surface.Request, error) { return parse(b) }

func (Surface) CheckToolChoice(b *assembly.Body, kept []policy.Tool) error {
	return checkToolChoice(b, kept)
}

func (Surface) Rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	return rewrite(b, p, kept, removedAny)
}

// Continue leaves the body as it is: a chat request carries its whole conversation.
func (Surface) Continue(_ *assembly.Body, upstream []byte) ([]byte, string, error) {
	return upstream, "", nil
}

// Flow reads the body as a Chat Completions request.
func (Surface) Flow() flow.Surface { return flow.SurfaceChat }

// History is nil: the request carries its whole conversation.
func (Surface) History(*assembly.Body) []byte { return nil }

// Begin starts the response side: nothing to remember, the answers vetted by Body and Stream.
func (Surface) Begin(surface.Start) surface.Exchange {
	return surface.Stateless{VetBody: Body, VetStream: func(up io.ReadCloser, c *vet.Checker, rec relay.Recorder) io.ReadCloser {
		return NewStream(up, c, rec)
	}}
}
