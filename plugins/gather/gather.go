// Package gather holds what the pipeline asks the context sources of a request and what they
// answer: the one query and result type that the proxy (which asks, through its ContextSource) and
// the plugin host (which answers) share. It does not call sources (plugins does) or place their
// answers in the prompt (assembly does).
package gather

import (
	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy/modules"
)

// NotesSource is the context key under which the sources' debug notes reach the model, where
// PROMPT_INCLUDE_COGNITIVE_NOTES=true.
const NotesSource = "debugNotes"

// Query is what the pipeline knows about one request.
type Query struct {
	// Protocol is the effective protocol (the workflow when one applies), BaseProtocol its base,
	// and Workflow the workflow id or "".
	Protocol, BaseProtocol, Workflow string
	// Mode is the protocol's module mode; a source runs only when its minMode is at most Mode (so a
	// zero Mode runs nothing).
	Mode modules.Mode
	// ModulesOff are the modules switched off by prompt_modules:<module>_off.
	ModulesOff                []string
	User, Conversation, Model string
	// LatestUser is the text of the latest user message; only sources whose entry allows it
	// (receiveUserMessage: true) are sent it.
	LatestUser string
}

// Result is what the sources of one request returned.
type Result struct {
	// Sources holds one entry per source that answered, named by its plugin entry's name, in config
	// order. Values may be shared with a cache: never mutate them.
	Sources []ctxjson.Source
	// Skipped lists, in config order, the sources switched off ("module off") or failed ("timeout",
	// "unavailable", "error: ...", ...). Sources below the request's mode are simply absent.
	Skipped []ctxjson.Skip
	// Directives are the trusted directives of the sources whose entry allows them, in config
	// order.
	Directives []string
	// Notes holds each source's debug notes, by source name (only sources that sent some).
	Notes map[string][]string
	// Lists are the operator lists the sources' answers hold (their entries' lists fields), by list
	// name: trusted values for the information-flow rules (list:NAME).
	Lists map[string][]string
}
