package demo

import (
	"embed"
	"strings"
)

//go:embed defs/*.json
var defs embed.FS

// ProtocolID is the id of the demo protocol.
const ProtocolID = "demo"

// Protocol is the demo protocol's definition: an office assistant's tools under argument and
// information-flow rules (provenance with an operator list, scan, a budget, a flow, confirmation).
func Protocol() []byte { return read("protocol") }

// Example is one request of the demo, with the outcome the model and the demo protocol give it.
type Example struct {
	// Name is the request's file name without ".json" (".messages" or ".responses" before it marks
	// the API).
	Name string
	// Path is the proxy path the request goes to, e.g. /v1/chat/completions.
	Path string
	// Body is the request body as a client sends it (formatted for reading).
	Body []byte
}

// The demo's requests.
const (
	// ExampleLayered asks for no call: the model answers with the layered system prompt it
	// received. It declares run_shell, which the demo protocol does not allow.
	ExampleLayered = "layered"
	// ExampleBlockedStream streams a turn after a fetched page told the model to mail a link to a
	// host the demo protocol does not allow: the text flows, the call is blocked.
	ExampleBlockedStream = "blocked-stream"
	// ExampleHeld (Anthropic Messages) follows an invoice that names a new IBAN: the payment is
	// held for the user's confirmation.
	ExampleHeld = "held.messages"
)

// Examples are the demo's requests, in the order the demo shows them.
func Examples() []Example {
	var out []Example
	for _, name := range []string{ExampleLayered, ExampleBlockedStream, ExampleHeld} {
		out = append(out, Example{Name: name, Path: PathOf(name), Body: read(name)})
	}
	return out
}

// PathOf is the proxy path of a request file named name (without ".json"): ".messages" and
// ".responses" at its end mark those APIs, anything else is a chat completion.
func PathOf(name string) string {
	switch {
	case strings.HasSuffix(name, ".messages"):
		return "/v1/messages"
	case strings.HasSuffix(name, ".responses"):
		return "/v1/responses"
	}
	return "/v1/chat/completions"
}

func read(name string) []byte {
	b, err := defs.ReadFile("defs/" + name + ".json")
	if err != nil {
		panic("demo: " + err.Error()) // embedded at build time: cannot be missing
	}
	return b
}
