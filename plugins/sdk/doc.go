// Package sdk is what the author of a promptgate context source imports. A context source is a
// separate program that promptgate starts (hashicorp/go-plugin over gRPC, with automatic mutual
// TLS) and asks, once per request, for runtime context: a JSON object that lands under the
// source's own key in the RUNTIME CONTEXT block of the system prompt.
//
// An author implements Source (Describe, Configure, Gather) and calls Serve from main:
//
//	func main() { sdk.Serve(&mySource{}) }
//
// The package is also the one place that holds what the host and the plugin share (the
// go-plugin example layout): the handshake, the versioned plugin sets, the hand-written gRPC
// service and both of its adapters. The host in package plugins and the in-process test helper
// sdktest use the same code (and check answers with the same plugins/internal/answer), so a plugin
// that passes its sdktest tests is read the same way by the proxy. It imports nothing of promptgate
// but the module modes, so that a plugin's binary stays small.
//
// # Wire format (protocol version 1)
//
// One gRPC service, promptgate.plugins.v1.ContextSource, with three unary methods. Messages are
// the protobuf well-known types, so no generated code is needed and any gRPC stack can implement
// a source: Describe takes google.protobuf.Empty and returns a google.protobuf.BytesValue;
// Configure and Gather take and return BytesValue (Configure returns Empty). Every BytesValue
// holds one UTF-8 JSON object:
//
//	Describe  → {"name":"filememory","version":"1.0.0","module":"memory","fields":["..."]}
//	Configure ← the plugin entry's config: map, e.g. {"dir":"/var/lib/memory"}
//	Gather    ← {"protocol":"tech","baseProtocol":"tech","workflow":"","mode":"standard",
//	             "user":"u-1","conversation":"c-9","model":"gpt-4o","latestUser":"..."}
//	          → {"fields":{...},"directives":["..."],"notes":["..."]}
//
// A later protocol version adds a new plugin set under VersionedPlugins; go-plugin negotiates the
// highest version both sides speak, so v1 plugins keep working.
//
// The package does not decide whether a source runs, caches, restarts processes or places the
// answer in the prompt: the host (package plugins) and the assembly stage do.
package sdk
