// Package plugins is the host of promptgate's context sources: separate programs, written with
// plugins/sdk, that the proxy starts and asks for runtime context (memory, profiles, ...) once per
// request. A crash, a hang or a flood in one of them never takes a request down with it, unless
// the operator marked the source required.
//
// It owns: starting every configured plugin (hashicorp/go-plugin over gRPC, automatic mutual TLS,
// the binary's sha256 checked before each start, a minimal environment); choosing the sources of a
// request by module mode and prompt_modules:<module>_off toggles; calling them in parallel, each
// under its own deadline; capping and checking each answer (plugins/internal/answer); caching
// answers in ristretto; restarting crashed plugins with backoff; readiness and shutdown; and the
// config file's plugins: entries (Spec, their defaults and validation).
//
// It does not own: reading the config file (proxy/config composes and decodes it), where the
// answers go (the assembly stage builds the RUNTIME CONTEXT line and its budgets), or the HTTP
// answer to a failed required source (the proxy turns ErrRequiredFailed into a 503
// context_unavailable).
package plugins
