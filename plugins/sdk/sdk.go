package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/promptgate/promptgate/policy/modules"
)

// Source is what a context source implements. The host calls Describe and Configure once, after
// the process starts (and again after every restart), then Gather once per request that needs
// the source. Gather is called concurrently and must be safe for that.
type Source interface {
	// Describe says who the source is. It is logged by the host; nothing in it is trusted.
	Describe() Description
	// Configure receives the plugin entry's `config:` map from the proxy's YAML (nil when the
	// entry has none). An error stops the plugin from starting; say which key is wrong and why.
	Configure(config map[string]any) error
	// Gather answers one request. ctx carries the entry's `timeout` as its deadline: stop when it
	// is done, the host has given up by then. An error skips the source for this request; its
	// message is shown to the model in meta.skipped ("error: <message>", cut to 120 characters),
	// so it must not hold secrets.
	Gather(ctx context.Context, req Request) (Response, error)
}

// Description is what Describe returns.
type Description struct {
	// Name of the program, e.g. "filememory". The key in the runtime context is the plugin
	// entry's `name:`, not this.
	Name string `json:"name"`
	// Version of the program, e.g. "1.2.0".
	Version string `json:"version"`
	// Module is the prompt module the source belongs to, e.g. "memory"; operators switch it off
	// with prompt_modules:<module>_off. The entry's `module:` in the YAML is what counts; the host
	// warns when the two differ.
	Module string `json:"module,omitempty"`
	// Fields lists the top-level fields the source may return, for documentation.
	Fields []string `json:"fields,omitempty"`
}

// Mode is how much runtime context the request's protocol takes in: the module mode of the whole of
// promptgate (policy/modules), named here for plugin authors.
type Mode = modules.Mode

// The module modes, in increasing order; Mode.AtLeast compares them.
const (
	ModeMinimal  = modules.Minimal
	ModeStandard = modules.Standard
	ModeFull     = modules.Full
)

// Request is what Gather is told about one request. Every field is data from the client or the
// operator's routing; none of it is authenticated beyond what the proxy's routes enforce.
type Request struct {
	// Protocol is the id of the request's protocol (the workflow protocol when there is one).
	Protocol string `json:"protocol"`
	// BaseProtocol is the protocol a workflow protocol extends; equal to Protocol otherwise.
	BaseProtocol string `json:"baseProtocol,omitempty"`
	// Workflow is the workflow id, when the request named one.
	Workflow string `json:"workflow,omitempty"`
	// Mode is the protocol's module mode; the host only calls a source whose minMode it reaches,
	// but a source may still return less in a lower mode.
	Mode Mode `json:"mode"`
	// User and Conversation come from promptgate.user / X-Promptgate-User and
	// promptgate.conversation / X-Promptgate-Conversation; either may be empty.
	User         string `json:"user,omitempty"`
	Conversation string `json:"conversation,omitempty"`
	// Model is the model the client asked for.
	Model string `json:"model,omitempty"`
	// LatestUser is the text of the latest user message, sent only where the plugin entry sets
	// receiveUserMessage: true; empty otherwise.
	LatestUser string `json:"latestUser,omitempty"`
}

// Response is what Gather returns.
type Response struct {
	// Fields is the context the source contributes: anything encoding/json encodes as a JSON
	// object (a map, a struct, a json.RawMessage holding an object). nil means {}. It is
	// untrusted data: it is placed, JSON-encoded, inside the RUNTIME CONTEXT block, and may be
	// shortened to fit the context budget.
	Fields any
	// Directives are one-line hints for the RUNTIME DIRECTIVES block. They are trusted text, so
	// the host drops them unless the plugin entry sets trustedDirectives: true.
	Directives []string
	// Notes are debug notes, shown only when the proxy runs with
	// PROMPT_INCLUDE_COGNITIVE_NOTES=true.
	Notes []string
}

// DecodeConfig decodes a Configure map into the struct that dst points to, the way
// encoding/json would decode the same YAML written as JSON, and refuses keys dst has no field for.
// Durations arrive as strings ("150ms"); parse them with time.ParseDuration.
func DecodeConfig(config map[string]any, dst any) error {
	if config == nil {
		config = map[string]any{}
	}
	raw, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
