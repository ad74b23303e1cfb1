// Package surface defines what the proxy needs of each API it rewrites — Chat Completions, the
// Responses API, Anthropic Messages, Google's Gemini API — so that everything that differs between
// them lives in one package per surface (surface/chat, surface/responses, surface/messages,
// surface/gemini) and nowhere else: its routes and the name of its upstream, how its request is
// read and its tool_choice checked, how the layered prompt and the kept tools are written back, how
// a conversation continues across requests, how its answers are vetted (body and stream) and how a
// refusal is written. The proxy holds the table of surfaces and iterates it; it never asks which
// surface a request is on.
//
// It also holds what surfaces share on the response side: the errors an answer can fail with and
// the edits of an http.Response. It does not decide policy (policy/), build the prompt (assembly/)
// or judge a call (policy/vet).
package surface

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Request is what the pipeline needs of a client request, on any surface.
type Request struct {
	Model  string
	Stream bool
	// Application are the client's own system texts (system and developer messages, instructions),
	// in order.
	Application []string
	// Tools are the declared tools, each by the name it is governed by.
	Tools []policy.Tool
	// NativeTools is true when the client declared tools.
	NativeTools bool
	// LatestUser is the text of the latest user message.
	LatestUser string
	// StoredPrompt is the id of a stored prompt the request names (Responses), "" when none: its
	// tools and instructions are applied upstream, out of promptgate's sight.
	StoredPrompt string
}

// Surface is one rewritten API. Its methods are safe for concurrent use.
type Surface interface {
	// Name is the surface's short name: the route label of metrics and logs ("chat").
	Name() string
	// Routes are the surface's rewritten routes (see Route).
	Routes() []Route
	// Upstream names the line of the proxy's upstream table that the surface's requests go to
	// ("openai").
	Upstream() string

	// Parse reads a validated client body; t is what its route's path says of it (see
	// Route.Target).
	Parse(b *assembly.Body, t Target) (Request, error)
	// CheckToolChoice refuses a tool_choice that names a tool not kept
	// (policy.CodeToolChoiceNotAllowed).
	CheckToolChoice(b *assembly.Body, kept []policy.Tool) error
	// ContextInPrompt keeps the runtime context JSON in the layered prompt even with the structured
	// channel on (the Responses API stores input items with the conversation).
	ContextInPrompt() bool
	// Rewrite writes the upstream body: the layered prompt in its place, the kept tools, the
	// extension removed; every other byte as the client sent it. removedAny says whether a tool was
	// removed.
	Rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error)
	// Continue edits the rewritten body for the conversation it continues upstream (the Responses
	// API answers the calls that promptgate blocked in the previous response); note, when not "",
	// says what it did, for the log.
	Continue(b *assembly.Body, upstream []byte) (out []byte, note string, err error)
	// Transcript reads the request's conversation for the information-flow rules (policy/flow): its
	// texts by role, calls and outputs, with the history the request continues out of the body's
	// sight where the surface keeps a record of it (else marked unseen).
	Transcript(b *assembly.Body) (*flow.Transcript, error)
	// AppendTurn returns an upstream body with the model's turn and promptgate's answers to its
	// calls appended, for asking the upstream again in onViolation "continue".
	AppendTurn(body []byte, t relay.Turn) ([]byte, error)

	// Begin starts the response side of a prepared request.
	Begin(s Start) Exchange
	// BlockedError is the body of the 403 tool_call_blocked that answers a non-stream response in
	// error mode.
	BlockedError(d vet.Decision) []byte
}

// Start is what the response side of a request starts from.
type Start struct {
	// Client is the body the client sent; Upstream the body sent upstream.
	Client, Upstream []byte
	// Policy vets the request's calls.
	Policy vet.Policy
	// Protocol and ProtocolVersion name the request's protocol.
	Protocol        string
	ProtocolVersion int
	// Record asks the surface to keep what History needs to show a later request that continues
	// this one: the protocol has information-flow rules.
	Record bool
	// VetHostedMCP: the protocol has promptgate answer the approval requests of the calls the
	// upstream runs (the Responses API's hosted MCP; policy's mcp.vetHostedCalls).
	VetHostedMCP bool
	// Created, when not nil, is told the id of every object the answer has the upstream store (each
	// round's response; a stored chat completion), before the client can learn it: the request went
	// with a shared upstream key, and the object is bound to the client's credential (see Stored).
	Created func(id string)
}

// Exchange is the response side of one request on a surface.
type Exchange interface {
	// Decided is told every decision on the answer's calls, before it is recorded.
	Decided(d vet.Decision)
	// Body vets a non-stream answer, read whole, and returns the body the client gets. An error
	// means the answer is not the API's shape (wrap it in ErrUpstreamMalformed).
	Body(body []byte, v Vetting) ([]byte, relay.Result, error)
	// Stream vets a streamed answer as it is relayed.
	Stream(up io.ReadCloser, v Vetting) io.ReadCloser
}

// Vetting is how an answer's calls are judged and recorded, and, in onViolation "continue", how the
// answer goes on once promptgate has answered its calls itself.
type Vetting struct {
	Checker *vet.Checker
	Record  relay.Recorder
	// Next asks the upstream again (see relay.Next); nil when the answer cannot be continued
	// (another mode, a retrieval), whose refusals are then written as refuse writes them.
	Next relay.Next
}

// Passthrough is implemented by a surface that must see some answers of the passthrough path (the
// Responses API's retrievals and cancels).
type Passthrough interface {
	// Intercepts reports whether the answer to r (as the client sent it) goes through Passed; its
	// body is then read decoded.
	Intercepts(r *http.Request) bool
	// Passed edits the answer to such a request in (as the client sent it: the upstream's base path
	// is not in its path), with what the host gives.
	Passed(in *http.Request, resp *http.Response, h Host) error
}

// Stored is implemented by a surface whose upstream keeps what it answers under ids that later
// requests name (the Responses API's responses, Chat Completions' stored completions). Where
// promptgate sends a shared upstream key, every client reaches the upstream as the operator: the
// proxy binds each id it relayed to the credential of the client that created it (Start.Created)
// and answers a request of another credential that names it, or names an id it does not know, as
// the upstream answers an id that does not exist.
type Stored interface {
	// Names reads what a passed-through request names of the surface's stored objects.
	Names(r *http.Request) Naming
	// BodyNames are the stored objects a request body names (a Responses previous_response_id,
	// under any spelling of its key that a reader could take for it): of the rewritten route, and
	// of a passed-through request whose Naming has Body.
	BodyNames(body []byte) []Name
	// NotFound is the answer to a request that names n, as the upstream answers an id it does not
	// have.
	NotFound(n Name) (status int, body []byte)
	// NoListing is the answer to a request that lists the stored objects (Naming.List): the
	// upstream would list every client's.
	NoListing() (status int, body []byte)
}

// Name is a stored object a request names: its id, and the body field that names it ("" for the
// path).
type Name struct {
	ID, Param string
}

// Naming is what a passed-through request names of a surface's stored objects: those in its path
// (one per reading of it that a server may make, LoosePaths), whether it lists them, and whether
// its body names some (Stored.BodyNames). The zero value names none.
type Naming struct {
	Names []Name
	List  bool
	Body  bool
}

// Host is what the proxy gives a surface on the passthrough path.
type Host interface {
	// Recorder records decisions of protocol (at protocolVersion) in the decision log, with the id
	// of the request of ctx.
	Recorder(ctx context.Context, protocol string, protocolVersion int) relay.Recorder
	// Relayed wraps a vetted stream of the request of ctx: its end is logged, and a client gone
	// counts as 499.
	Relayed(ctx context.Context, body io.ReadCloser) io.ReadCloser
	// Log is the logger of the request of ctx.
	Log(ctx context.Context) *slog.Logger
}

// Stateless is the response side of a surface that remembers nothing between requests: its answers
// are vetted by its body and stream vetters (continued as Rounds and the stream vetter do, joined
// by Join), and its decisions need no bookkeeping.
type Stateless struct {
	VetBody   func(body []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error)
	VetStream func(up io.ReadCloser, v Vetting) io.ReadCloser
	Join      func(Joined) ([]byte, error)
	// Usage reads an answer's usage object (nil: its member "usage").
	Usage func(answer []byte) []byte
}

var _ Exchange = Stateless{}

func (Stateless) Decided(vet.Decision) {}

func (s Stateless) Body(body []byte, v Vetting) ([]byte, relay.Result, error) {
	usage := s.Usage
	if usage == nil {
		usage = member("usage")
	}
	return RoundsUsage(usage, body, v, func(b []byte) ([]byte, relay.Result, error) { return s.VetBody(b, v.Checker, v.Record) }, s.Join)
}

func (s Stateless) Stream(up io.ReadCloser, v Vetting) io.ReadCloser {
	return s.VetStream(up, v)
}

// Whole is embedded by a surface whose request carries its whole conversation (chat, Messages,
// Gemini): the runtime context follows the prompt settings, and nothing is added to continue.
type Whole struct{}

func (Whole) ContextInPrompt() bool { return false }

// Continue leaves the body as it is: the request carries its whole conversation.
func (Whole) Continue(_ *assembly.Body, upstream []byte) ([]byte, string, error) {
	return upstream, "", nil
}
