package mcp

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// Protocol versions of MCP's Streamable HTTP transport that the door serves.
const (
	Version20250326 = "2025-03-26"
	Version20250618 = "2025-06-18"
	Version20251125 = "2025-11-25"
	// Version20260728 is stateless: no session, every request names its method (and tool) in
	// headers.
	Version20260728 = "2026-07-28"
)

// versions are the served versions, oldest first.
var versions = []string{Version20250326, Version20250618, Version20251125, Version20260728}

// MCP's headers.
const (
	headerVersion   = "Mcp-Protocol-Version"
	headerSession   = "Mcp-Session-Id"
	headerMethod    = "Mcp-Method"
	headerName      = "Mcp-Name"
	headerParam     = "Mcp-Param-"
	headerLastEvent = "Last-Event-Id"
)

// versionOf is the protocol version a POST speaks: its Mcp-Protocol-Version header; without one,
// the version an initialize request asks for, else 2025-03-26 (what the specification tells a
// server to assume). An unknown version is refused.
func versionOf(h http.Header, msgs []message) (string, error) {
	vs := h.Values(headerVersion)
	if len(vs) > 1 {
		return "", &rpcError{code: codeInvalidRequest, msg: "mcp: more than one Mcp-Protocol-Version header"}
	}
	v := ""
	if len(vs) == 1 {
		v = strings.TrimSpace(vs[0])
	} else if len(msgs) == 1 && msgs[0].method == "initialize" {
		v = msgs[0].params.Get("protocolVersion").String()
		if !slices.Contains(versions, v) {
			return Version20251125, nil // the server answers with the version it chooses
		}
	} else {
		v = Version20250326
	}
	if !slices.Contains(versions, v) {
		return "", &rpcError{code: codeInvalidRequest, msg: fmt.Sprintf("mcp: protocol version %q is not served by promptgate's MCP door (it serves %s)", v, strings.Join(versions, ", "))}
	}
	return v, nil
}

// batchesAllowed reports whether a version allows JSON-RPC batches (2025-03-26 does; later versions
// removed them).
func batchesAllowed(version string) bool { return version == Version20250326 }

// stateless reports whether a version sends the method and name of each request in headers.
func stateless(version string) bool { return version >= Version20260728 }

// checkHeaders refuses a stateless request whose headers and body disagree — a parser differential:
// a gateway that routes or authorizes on the headers would act on another request than the server
// runs. The method must be in Mcp-Method; a tools/call's and prompts/get's name, a resources/read's
// uri in Mcp-Name; each Mcp-Param-X must be the value of the argument the tool's schema marks
// x-mcp-header X (schema: the pinned input schema, nil when not known: then no Mcp-Param header is
// accepted).
func checkHeaders(h http.Header, m message, schema []byte) error {
	differ := func(format string, args ...any) error {
		return &rpcError{code: codeInvalidRequest, msg: "mcp: headers and body disagree (a parser differential): " + fmt.Sprintf(format, args...)}
	}
	if vs := h.Values(headerMethod); len(vs) != 1 || vs[0] != m.method {
		return differ("Mcp-Method must be the body's method, once")
	}
	if mv := m.params.Get(`_meta.io\.modelcontextprotocol/protocolVersion`); mv.Exists() && mv.String() != h.Get(headerVersion) {
		return differ("the _meta protocol version must be the Mcp-Protocol-Version header's")
	}
	name := ""
	switch m.method {
	case "tools/call", "prompts/get":
		name = m.params.Get("name").String()
	case "resources/read":
		name = m.params.Get("uri").String()
	}
	vs := h.Values(headerName)
	switch {
	case name != "" && (len(vs) != 1 || decodeHeader(vs[0]) != name):
		return differ("Mcp-Name must be the body's name, once")
	case name == "" && len(vs) > 0:
		return differ("Mcp-Name is sent for a method that names nothing")
	}
	if m.method == "tools/call" && schema == nil {
		return nil // the tool's params are checked against its pinned schema (checkParams), once it is read
	}
	return checkParams(h, m, schema, differ)
}

// namesRequest reports whether a request carries any of the headers that name it (Mcp-Method,
// Mcp-Name, Mcp-Param-*).
func namesRequest(h http.Header) bool {
	for k := range h {
		k = http.CanonicalHeaderKey(k)
		if k == headerMethod || k == headerName || strings.HasPrefix(k, headerParam) {
			return true
		}
	}
	return false
}

// checkCallParams checks the Mcp-Param-* headers of a tools/call against its tool's pinned schema.
func checkCallParams(h http.Header, m message, schema []byte) error {
	return checkParams(h, m, schema, func(format string, args ...any) error {
		return &rpcError{code: codeInvalidRequest, msg: "mcp: headers and body disagree (a parser differential): " + fmt.Sprintf(format, args...)}
	})
}

// checkParams checks the Mcp-Param-* headers of a tools/call against the arguments the schema binds
// them to.
func checkParams(h http.Header, m message, schema []byte, differ func(string, ...any) error) error {
	bound := paramBindings(schema)
	args := m.params.Get("arguments")
	for k, vs := range h {
		p, ok := strings.CutPrefix(http.CanonicalHeaderKey(k), headerParam)
		if !ok {
			continue
		}
		path, ok := bound[strings.ToLower(p)]
		if !ok || m.method != "tools/call" {
			return differ("header %d of the Mcp-Param kind is bound to no argument of the tool's schema", len(p))
		}
		if len(vs) != 1 {
			return differ("an Mcp-Param header is sent more than once")
		}
		v := args.Get(path)
		want, ok := headerValue(v)
		if !ok || decodeHeader(vs[0]) != want {
			return differ("an Mcp-Param header is not the value of its argument")
		}
	}
	for name, path := range bound {
		if v := args.Get(path); v.Exists() && v.Type != gjson.Null && h.Get(headerParam+name) == "" {
			return differ("an argument bound to an Mcp-Param header is sent without it")
		}
	}
	return nil
}

// paramBindings maps each lower-cased x-mcp-header name of a schema's properties (at any depth) to
// the gjson path of its argument.
func paramBindings(schema []byte) map[string]string {
	out := map[string]string{}
	var walk func(props gjson.Result, prefix string, depth int)
	walk = func(props gjson.Result, prefix string, depth int) {
		if depth > 16 {
			return
		}
		props.ForEach(func(k, p gjson.Result) bool {
			path := prefix + escapePath(k.String())
			if hn := p.Get("x-mcp-header"); hn.Type == gjson.String && hn.Str != "" {
				out[strings.ToLower(hn.Str)] = path
			}
			walk(p.Get("properties"), path+".", depth+1)
			return true
		})
	}
	if len(schema) > 0 {
		walk(gjson.GetBytes(schema, "properties"), "", 0)
	}
	return out
}

// escapePath escapes a property name for a gjson path.
func escapePath(k string) string {
	var b strings.Builder
	for _, r := range k {
		if strings.ContainsRune(`.*?|#@\!=<>%`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// headerValue is an argument as an Mcp-Param header carries it (SEP-2243): a string as it is, an
// integer within ±(2^53-1) in decimal, a boolean as true or false; false for anything else.
func headerValue(v gjson.Result) (string, bool) {
	switch v.Type {
	case gjson.String:
		return v.Str, true
	case gjson.True, gjson.False:
		return v.Raw, true
	case gjson.Number:
		return headerInteger(v.Raw)
	}
	return "", false
}

// headerInteger is a number literal's exact value in decimal when it is an integer within
// ±(2^53-1) (1.0 and 1e2 are; 1.0000000000000001, which a float64 reader takes for 1, is not).
func headerInteger(raw string) (string, bool) {
	n, err := jsoncheck.ReadNumber(raw)
	if err != nil || n.Exp < 0 || len(n.Digits)+n.Exp > 16 {
		return "", false
	}
	if n.Digits == "" {
		return "0", true
	}
	i, err := strconv.ParseInt(n.Digits+strings.Repeat("0", n.Exp), 10, 64)
	if err != nil || i > 1<<53-1 {
		return "", false
	}
	if n.Neg {
		i = -i
	}
	return strconv.FormatInt(i, 10), true
}

// decodeHeader reads a header value that may be wrapped as =?base64?...?= (how SEP-2243 sends
// values that are not plain ASCII); a wrapper that does not decode stays as it is, and so matches
// no value.
func decodeHeader(v string) string {
	inner, ok := strings.CutPrefix(v, "=?base64?")
	if !ok {
		return v
	}
	inner, ok = strings.CutSuffix(inner, "?=")
	if !ok {
		return v
	}
	b, err := base64.StdEncoding.DecodeString(inner)
	if err != nil {
		return v
	}
	return string(b)
}
