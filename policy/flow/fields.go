package flow

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
)

// Trust per field: toolOutputs.trustedPaths trusts parts of a tool's output, given by gjson paths
// into the document the tool returned, read as JSON or else as YAML. A transfer's recipient and
// amount are the bank's, its subject whoever sent the money: trusting the tool would trust the
// subject too.

// trustLevel is the trust that one spec (the protocol's, or a workflow's that sets toolOutputs)
// gives.
type trustLevel struct {
	globs []string            // outputs trusted whole
	paths map[string][]string // outputs trusted in part: glob -> paths
}

// outputTrust is how the policy trusts a tool's output (or, with mcp, an MCP server's).
type outputTrust struct {
	whole bool
	paths []string // the trusted parts, when not whole; none: untrusted
}

// trustOf says how the output of name is trusted: whole when every level trusts it whole, in part
// when every level trusts it whole or in part (the paths every level that gives paths agrees on),
// else not.
func (p *Policy) trustOf(name string, mcp bool) outputTrust {
	if name == "" || len(p.trust) == 0 {
		return outputTrust{}
	}
	out := outputTrust{whole: true}
	for _, lv := range p.trust {
		if lv.trustsWhole(name, mcp) {
			continue
		}
		paths := lv.pathsOf(name, mcp)
		if paths == nil {
			return outputTrust{}
		}
		if out.whole {
			out.whole, out.paths = false, paths
			continue
		}
		out.paths = slices.DeleteFunc(slices.Clone(out.paths), func(s string) bool { return !slices.Contains(paths, s) })
		if len(out.paths) == 0 {
			return outputTrust{}
		}
	}
	return out
}

func (lv trustLevel) trustsWhole(name string, mcp bool) bool {
	for _, g := range lv.globs {
		if g, isMCP := strings.CutPrefix(g, "mcp:"); isMCP == mcp && matchAllow(g, name) {
			return true
		}
	}
	return false
}

// pathsOf is the union of the paths of every entry that covers name; nil when none does.
func (lv trustLevel) pathsOf(name string, mcp bool) []string {
	var out []string
	keys := make([]string, 0, len(lv.paths))
	for k := range lv.paths {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if g, isMCP := strings.CutPrefix(k, "mcp:"); isMCP == mcp && matchAllow(g, name) {
			for _, p := range lv.paths[k] {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// compileTrust checks and keeps one spec's toolOutputs.
func (p *problems) compileTrust(t ToolOutputs) trustLevel {
	for i, g := range t.Trusted {
		p.checkOutputGlob(fmt.Sprintf("toolOutputs.trusted[%d]", i), g)
	}
	keys := make([]string, 0, len(t.TrustedPaths))
	for k := range t.TrustedPaths {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		at := "toolOutputs.trustedPaths." + k
		p.checkOutputGlob(at, k)
		if slices.Contains(t.Trusted, k) {
			p.add(at, "%q is also in toolOutputs.trusted: trust its output whole (trusted) or in part (trustedPaths), not both", k)
		}
		paths := t.TrustedPaths[k]
		if len(paths) == 0 {
			p.add(at, "must list at least one path, such as #.recipient")
		}
		for i, gp := range paths {
			p.checkPath(fmt.Sprintf("%s[%d]", at, i), gp)
		}
	}
	return trustLevel{globs: t.Trusted, paths: t.TrustedPaths}
}

// checkOutputGlob reports a trusted output's name that is empty or malformed: a tool name or glob,
// or mcp:SERVER.
func (p *problems) checkOutputGlob(field, g string) {
	if s, ok := strings.CutPrefix(g, "mcp:"); ok && s == "" {
		p.add(field, "names no MCP server: write mcp:SERVER_LABEL or mcp:GLOB")
		return
	}
	p.checkGlob(field, strings.TrimPrefix(g, "mcp:"))
}

// Limits of reading a document for its trusted parts.
const (
	// maxYAMLNodes bounds the nodes a YAML document may expand to (aliases included).
	maxYAMLNodes = 1 << 16
	// maxFieldDepth bounds the nesting of a document read for its trusted parts.
	maxFieldDepth = 64
)

// split is an output read for its trusted parts.
type split struct {
	trusted []string // the texts at the trusted paths
	rest    string   // every other string, number and key of the document
	problem string   // why the output is untrusted as a whole ("" when it was split)
}

// splitOutput reads doc as JSON, else as YAML, and takes the values at paths as trusted and the
// rest as untrusted. A document that is neither, or a path that finds nothing in it, leaves the
// whole output untrusted, with the problem named (no part of the document in it).
func splitOutput(doc string, paths []string) split {
	js, problem := documentJSON(doc)
	if problem != "" {
		return split{problem: problem}
	}
	root := gjson.Parse(js)
	var out split
	var spans [][2]int
	for _, gp := range paths {
		found := false
		vet.Walk(root, gp, func(v gjson.Result, ok bool) bool {
			if !ok {
				return true
			}
			found = true
			spans = append(spans, [2]int{v.Index, v.Index + len(v.Raw)})
			out.trusted = append(out.trusted, JSONStrings(v, false, maxFieldDepth, nil))
			return true
		})
		if !found {
			return split{problem: "the path " + strconv.Quote(gp) + " finds nothing in it"}
		}
	}
	out.rest = JSONStrings(root, true, maxFieldDepth, func(_ gjson.Result, _ string, v gjson.Result) bool {
		for _, s := range spans {
			if v.Index >= s[0] && v.Index+len(v.Raw) <= s[1] && len(v.Raw) > 0 {
				return true // a trusted part
			}
		}
		return false
	})
	return out
}

// documentJSON is doc as JSON text: doc itself when it is one JSON value, else its YAML read into
// JSON (scalars as strings, numbers as numbers, mapping keys as strings); problem says why it is
// neither.
func documentJSON(doc string) (js, problem string) {
	t := strings.TrimSpace(doc)
	if t == "" {
		return "", "it is empty"
	}
	if gjson.Valid(t) {
		if !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, "[") {
			return "", "it is not a JSON object or array"
		}
		if jsoncheck.Value([]byte(t), jsoncheck.Limits{MaxDepth: maxFieldDepth}) != nil {
			return "", "it repeats a key or nests too deep"
		}
		return t, ""
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil || len(n.Content) == 0 {
		return "", "it is neither JSON nor YAML"
	}
	root := n.Content[0]
	if root.Kind != yaml.MappingNode && root.Kind != yaml.SequenceNode {
		return "", "it is not a JSON or YAML object or list"
	}
	var b bytes.Buffer
	budget := maxYAMLNodes
	if !yamlJSON(&b, root, 0, &budget) {
		return "", "its YAML nests too deep or expands too far"
	}
	if jsoncheck.Value(b.Bytes(), jsoncheck.Limits{MaxDepth: maxFieldDepth + 1}) != nil {
		return "", "its YAML repeats a key"
	}
	return b.String(), ""
}

// yamlJSON writes a YAML node as JSON; false when it nests deeper than maxFieldDepth or expands
// (aliases included) to more than the budget of nodes.
func yamlJSON(b *bytes.Buffer, n *yaml.Node, depth int, budget *int) bool {
	*budget--
	if *budget < 0 || depth > maxFieldDepth {
		return false
	}
	switch n.Kind {
	case yaml.AliasNode:
		return n.Alias != nil && yamlJSON(b, n.Alias, depth+1, budget)
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k := n.Content[i]
			for k.Kind == yaml.AliasNode && k.Alias != nil {
				k = k.Alias
			}
			writeString(b, k.Value)
			b.WriteByte(':')
			if !yamlJSON(b, n.Content[i+1], depth+1, budget) {
				return false
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if !yamlJSON(b, e, depth+1, budget) {
				return false
			}
		}
		b.WriteByte(']')
	default:
		if (n.Tag == "!!int" || n.Tag == "!!float") && gjson.Valid(n.Value) && gjson.Parse(n.Value).Type == gjson.Number {
			b.WriteString(n.Value)
		} else {
			writeString(b, n.Value)
		}
	}
	return true
}
