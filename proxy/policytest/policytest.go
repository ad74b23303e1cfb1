// Package policytest runs policy test cases: files of cases (*.test.yaml), each a protocol, a
// client's request, the upstream's answers and what must come of them (every call's outcome, checks
// on the layered prompt, the tools kept and removed). A case runs through the proxy's own handler
// in process, its answers played by a transport that reaches no network; what passes here is what
// serve does with that request and that answer. It also writes a case from what the decision log
// kept of one request (Recording).
//
// It owns the case file's format, the run and the checks. It does not find case files, print
// results or open a store (`promptgate test` and the admin API's POST /admin/tests do, each its
// way), and it starts no plugin and no MCP server: a case's runtime context is its request's own.
package policytest
