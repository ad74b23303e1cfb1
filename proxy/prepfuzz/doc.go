// Package prepfuzz holds FuzzPrepare, the fuzz target of the proxy's request path (proxy.Engine's
// PrepareChat, PrepareResponses and PrepareMessages on arbitrary bodies). It has no code of its
// own: it is kept apart from package proxy so that the fuzzer's instrumented build does not include
// the SDK clients that proxy's end-to-end tests use, which would make every CI fuzz pass minutes
// longer.
package prepfuzz
