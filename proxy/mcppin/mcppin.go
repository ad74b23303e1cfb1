// Package mcppin is the format of an MCP server's pinned tool definitions as the store keeps them
// (kind mcppins: one versioned set per server, named by the server's label): each tool's name,
// description and input schema, and the digest that says whether two definitions are the same.
//
// It owns the digest and the reading and writing of a set. It does not decide when a definition is
// pinned or approved (the MCP door does), nor keep versions (store does).
package mcppin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// Definition is one tool as an MCP server lists it: what the model is told (name, description) and
// what its calls are vetted against (the input schema).
type Definition struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// InputSchema is the raw JSON of the tool's inputSchema; nil when the server gave none.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Extra holds the tool's other members as one JSON object (title, annotations, outputSchema,
	// icons, …; _meta left out): what agents show the user or the model, or decide by (an agent may
	// run a tool annotated readOnlyHint without asking); nil when the tool has none.
	Extra json.RawMessage `json:"extra,omitempty"`
	// Digest is the hex SHA-256 of the name, the description, the input schema and the other
	// members in canonical JSON.
	Digest string `json:"digest"`
	// Findings are what the door's injection scan found in the description; never stored.
	Findings []string `json:"findings,omitempty"`
}

// Digest is the digest of a definition: key order and white space in its schema and its other
// members do not count. A definition without other members has the digest it had before they were
// pinned.
func Digest(d Definition) string {
	h := sha256.New()
	for _, s := range []string{d.Name, d.Description} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	writeJSON(h, d.InputSchema)
	if len(d.Extra) > 0 {
		h.Write([]byte{0, 'x'})
		writeJSON(h, d.Extra)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeJSON writes the canonical digest of an object, or the bytes of anything else as they are.
func writeJSON(h io.Writer, raw []byte) {
	if len(raw) == 0 {
		return
	}
	if sum, err := flow.ArgsDigestLoose(gjson.ParseBytes(raw)); err == nil {
		_, _ = h.Write(sum[:])
		return
	}
	_, _ = h.Write(raw)
}

// Tool is one pinned definition of a set, with when and by whom it was pinned.
type Tool struct {
	Definition
	PinnedAt time.Time `json:"pinnedAt,omitzero"`
	// PinnedBy is the actor of the approval, or FirstList for a definition pinned on first sight.
	PinnedBy string `json:"pinnedBy,omitempty"`
}

// FirstList is the PinnedBy of a definition the first tools/list pinned.
const FirstList = "first-list"

// Set is the pinned definitions of one server: the body of one version of the store's mcppins kind.
type Set struct {
	// Server is the server's label (mcp.servers[].name), the set's name in the store.
	Server string `json:"server"`
	// Tools are sorted by name, each name once.
	Tools []Tool `json:"tools"`
}

// Tool returns the pinned definition of a tool; false when the set has none.
func (s Set) Tool(name string) (Tool, bool) {
	i, ok := slices.BinarySearchFunc(s.Tools, name, func(t Tool, n string) int { return strings.Compare(t.Name, n) })
	if !ok {
		return Tool{}, false
	}
	return s.Tools[i], true
}

// With returns a copy of the set with t pinned in place of the tool's earlier definition.
func (s Set) With(t Tool) Set {
	t.Findings = nil
	out := Set{Server: s.Server, Tools: slices.Clone(s.Tools)}
	i, ok := slices.BinarySearchFunc(out.Tools, t.Name, func(x Tool, n string) int { return strings.Compare(x.Name, n) })
	if ok {
		out.Tools[i] = t
	} else {
		out.Tools = slices.Insert(out.Tools, i, t)
	}
	return out
}

// Marshal writes the set as the store keeps it: tools sorted by name, findings left out.
func (s Set) Marshal() []byte {
	type stored struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema,omitempty"`
		Extra       json.RawMessage `json:"extra,omitempty"`
		Digest      string          `json:"digest"`
		PinnedAt    time.Time       `json:"pinnedAt,omitzero"`
		PinnedBy    string          `json:"pinnedBy,omitempty"`
	}
	tools := make([]stored, 0, len(s.Tools))
	for _, t := range s.Tools {
		tools = append(tools, stored{t.Name, t.Description, compact(t.InputSchema), compact(t.Extra), t.Digest, t.PinnedAt.UTC(), t.PinnedBy})
	}
	slices.SortFunc(tools, func(a, b stored) int { return strings.Compare(a.Name, b.Name) })
	b, _ := json.Marshal(struct {
		Server string   `json:"server"`
		Tools  []stored `json:"tools"`
	}{s.Server, tools}) // strings, times and compacted JSON always encode
	return b
}

// compact is raw JSON without white space; nil for none or for what is not JSON.
func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return nil
	}
	return b.Bytes()
}

// Limits of a set.
const (
	// MaxTools bounds the tools of one set.
	MaxTools = 4096
	// maxName bounds a tool's name, in bytes.
	maxName = 256
)

var labelPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// toolKeys are the keys of one tool of a set, spelled exactly.
var toolKeys = []string{"name", "description", "inputSchema", "extra", "digest", "pinnedAt", "pinnedBy"}

// Parse reads and checks a set: one strict JSON object with exactly the keys server and tools;
// server a label; each tool an object of the keys Marshal writes, with a name (each once), a string
// description, an input schema and other members that are objects when present, and a digest that
// is the definition's when present (a missing one is computed). Errors name the field and the fix,
// never a description.
func Parse(body []byte) (Set, error) {
	if err := jsoncheck.Object(body, jsoncheck.Limits{FoldedKeys: true}); err != nil {
		return Set{}, fmt.Errorf("mcppin: the set is not one strict JSON object: %w", err)
	}
	root := gjson.ParseBytes(body)
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("mcppin: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	root.ForEach(func(k, _ gjson.Result) bool {
		if k.Str != "server" && k.Str != "tools" {
			bad(k.Str, "unknown field: a set has server and tools")
		}
		return true
	})
	s := Set{Server: root.Get("server").String()}
	if srv := root.Get("server"); srv.Type != gjson.String || !labelPattern.MatchString(srv.Str) {
		bad("server", "give the server's label (mcp.servers[].name): 1-64 letters, digits, _ . -")
	}
	tools := root.Get("tools")
	if !tools.IsArray() {
		bad("tools", "give the pinned definitions, an array (empty when none)")
		return Set{}, errors.Join(errs...)
	}
	i := 0
	tools.ForEach(func(_, v gjson.Result) bool {
		t, err := parseTool(v, fmt.Sprintf("tools[%d]", i))
		i++
		if err != nil {
			errs = append(errs, err)
			return len(errs) < 16
		}
		s.Tools = append(s.Tools, t)
		return true
	})
	if i > MaxTools {
		bad("tools", "%d definitions: a set holds at most %d", i, MaxTools)
	}
	slices.SortFunc(s.Tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	for j := 1; j < len(s.Tools); j++ {
		if s.Tools[j].Name == s.Tools[j-1].Name {
			bad("tools", "two definitions of one tool (the %d-byte name after sorting, at %d): pin each tool once", len(s.Tools[j].Name), j)
		}
	}
	if len(errs) > 0 {
		return Set{}, errors.Join(errs...)
	}
	return s, nil
}

// parseTool reads one tool of a set.
func parseTool(v gjson.Result, at string) (Tool, error) {
	if !v.IsObject() {
		return Tool{}, fmt.Errorf("mcppin: %s: a tool is an object", at)
	}
	var bad error
	v.ForEach(func(k, _ gjson.Result) bool {
		if !slices.Contains(toolKeys, k.Str) {
			bad = fmt.Errorf("mcppin: %s: unknown field (a tool has %s)", at, strings.Join(toolKeys, ", "))
		}
		return bad == nil
	})
	if bad != nil {
		return Tool{}, bad
	}
	name, desc, schema, extra := v.Get("name"), v.Get("description"), v.Get("inputSchema"), v.Get("extra")
	switch {
	case name.Type != gjson.String || name.Str == "" || len(name.Str) > maxName:
		return Tool{}, fmt.Errorf("mcppin: %s.name: give the tool's name as the server lists it (1-%d bytes)", at, maxName)
	case desc.Exists() && desc.Type != gjson.String:
		return Tool{}, fmt.Errorf("mcppin: %s.description: a string", at)
	case schema.Exists() && !schema.IsObject():
		return Tool{}, fmt.Errorf("mcppin: %s.inputSchema: a JSON Schema object", at)
	case extra.Exists() && !extra.IsObject():
		return Tool{}, fmt.Errorf("mcppin: %s.extra: the tool's other members (title, annotations, ...), an object", at)
	case v.Get("pinnedBy").Exists() && v.Get("pinnedBy").Type != gjson.String:
		return Tool{}, fmt.Errorf("mcppin: %s.pinnedBy: a string", at)
	}
	t := Tool{Definition: Definition{Name: name.Str, Description: desc.Str}, PinnedBy: v.Get("pinnedBy").String()}
	if schema.Exists() {
		t.InputSchema = json.RawMessage(schema.Raw)
	}
	if extra.Exists() && len(extra.Map()) > 0 {
		t.Extra = json.RawMessage(extra.Raw)
	}
	t.Digest = Digest(t.Definition)
	if d := v.Get("digest"); d.Exists() && d.String() != t.Digest {
		return Tool{}, fmt.Errorf("mcppin: %s.digest: not the digest of the definition (name, description, inputSchema, extra): leave it out and it is computed", at)
	}
	if p := v.Get("pinnedAt"); p.Exists() {
		when, err := time.Parse(time.RFC3339Nano, p.String())
		if err != nil || p.Type != gjson.String {
			return Tool{}, fmt.Errorf("mcppin: %s.pinnedAt: an RFC 3339 time", at)
		}
		t.PinnedAt = when
	}
	return t, nil
}
