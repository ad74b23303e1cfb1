package policytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// yamlReader reads a case file's YAML nodes strictly: every problem is kept with its line and
// field, unknown and repeated keys included, so that one run names every mistake of a file.
type yamlReader struct {
	file string
	errs []Problem
	// noFiles refuses the files a case names.
	noFiles bool
	// read counts the bytes of the strings and JSON values read so far, against maxRead.
	read int
	// tooLarge is set once read went over maxRead (the problem is reported once).
	tooLarge bool
}

// maxRead bounds what one case file may give, in bytes of strings and of JSON written from YAML: a
// file holds at most MaxFileBytes, but a YAML alias repeats its anchor's value each time it is
// named, so that a small file could name a value a billion times.
const maxRead = 4 * MaxFileBytes

// spend counts size bytes read at field; false, and a problem (the first time), when the file gives
// more than maxRead.
func (r *yamlReader) spend(n *yaml.Node, field string, size int) bool {
	if r.read += size; r.read <= maxRead {
		return true
	}
	if !r.tooLarge {
		r.tooLarge = true
		r.bad(n, field, "the case file gives more than %d bytes of values: a YAML alias (*name) repeats its anchor's value each time; repeat less", maxRead)
	}
	return false
}

// bad records a problem of the value n at field.
func (r *yamlReader) bad(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.errs = append(r.errs, Problem{File: r.file, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// kindName says what a node holds, for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		}
		return "a string"
	}
	return "a document"
}

// fields reads the mapping n at field whose keys must be among known: the value of each key given,
// by key. An unknown or repeated key, and a value that is not a mapping, are problems (nil is
// returned for the latter).
func (r *yamlReader) fields(n *yaml.Node, field string, known ...string) map[string]*yaml.Node {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.bad(n, field, "got %s, want a mapping with the keys %s", kindName(n), strings.Join(known, ", "))
		return nil
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		sub := joinField(field, name)
		switch {
		case k.Kind != yaml.ScalarNode || k.Tag == "!!merge":
			r.bad(k, field, "a key must be a plain name (no merge keys or complex keys)")
		case !slices.Contains(known, name):
			r.bad(k, sub, "unknown key; valid keys here: %s", strings.Join(known, ", "))
		case out[name] != nil:
			r.bad(k, sub, "given twice")
		default:
			out[name] = v
		}
	}
	return out
}

// joinField is field.key, or key at the top.
func joinField(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// str reads a string scalar. Numbers and booleans written where a string goes are refused, so that
// `name: 1.10` does not silently become "1.1".
func (r *yamlReader) str(n *yaml.Node, field string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		r.bad(n, field, "got %s, want a string (quote it)", kindName(n))
		return "", false
	}
	if !r.spend(n, field, len(n.Value)) {
		return "", false
	}
	return n.Value, true
}

// strs reads a list of strings.
func (r *yamlReader) strs(n *yaml.Node, field string) ([]string, bool) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		r.bad(n, field, "got %s, want a list of strings", kindName(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok := true
	for i, c := range n.Content {
		s, good := r.str(c, fmt.Sprintf("%s[%d]", field, i))
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// integer reads a whole number.
func (r *yamlReader) integer(n *yaml.Node, field string) (int, bool) {
	n = resolve(n)
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		r.bad(n, field, "got %s %q, want a whole number", kindName(n), n.Value)
		return 0, false
	}
	return v, true
}

// list reads a sequence: its items.
func (r *yamlReader) list(n *yaml.Node, field, what string) ([]*yaml.Node, bool) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		r.bad(n, field, "got %s, want a list of %s", kindName(n), what)
		return nil, false
	}
	return n.Content, true
}

// jsonValue reads a JSON value written in YAML: a mapping or a list becomes compact JSON with its
// keys in the order written; a string is taken as JSON text, byte for byte, and must be valid JSON.
func (r *yamlReader) jsonValue(n *yaml.Node, field string) ([]byte, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if !r.spend(n, field, len(n.Value)) {
			return nil, false
		}
		b := []byte(n.Value)
		if !json.Valid(b) {
			r.bad(n, field, "the string is not valid JSON (write the value as YAML, or as JSON in a block: %s: |)", lastKey(field))
			return nil, false
		}
		return b, true
	}
	var buf bytes.Buffer
	err := appendJSON(&buf, n, maxRead-r.read)
	if errors.Is(err, errTooMuchJSON) {
		r.spend(n, field, buf.Len())
		return nil, false
	}
	if err != nil {
		r.bad(n, field, "%v", err)
		return nil, false
	}
	if !r.spend(n, field, buf.Len()) {
		return nil, false
	}
	return buf.Bytes(), true
}

// lastKey is the last key of a field path.
func lastKey(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[i+1:]
	}
	return field
}

// errTooMuchJSON: appendJSON wrote more than its limit.
var errTooMuchJSON = errors.New("the value is too large as JSON")

// appendJSON writes the YAML value n as compact JSON, keys in the order written; it stops with
// errTooMuchJSON once buf holds more than limit bytes.
func appendJSON(buf *bytes.Buffer, n *yaml.Node, limit int) error {
	if buf.Len() > limit {
		return errTooMuchJSON
	}
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return fmt.Errorf("line %d: a JSON key must be a plain string", k.Line)
			}
			if seen[k.Value] {
				return fmt.Errorf("line %d: key %q given twice", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			key, _ := json.Marshal(k.Value)
			buf.Write(key)
			buf.WriteByte(':')
			if err := appendJSON(buf, n.Content[i+1], limit); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := appendJSON(buf, c, limit); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		return appendScalar(buf, n)
	default:
		return fmt.Errorf("line %d: not a JSON value", n.Line)
	}
	return nil
}

// appendScalar writes a YAML scalar as its JSON value.
func appendScalar(buf *bytes.Buffer, n *yaml.Node) error {
	var v any
	switch n.Tag {
	case "!!str":
		v = n.Value
	case "!!null":
		buf.WriteString("null")
		return nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		v = b
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return fmt.Errorf("line %d: %q: %w", n.Line, n.Value, err)
		}
		buf.WriteString(strconv.FormatInt(i, 10))
		return nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("line %d: %q is not a JSON number", n.Line, n.Value)
		}
		v = f
	default:
		return fmt.Errorf("line %d: %s %q has no JSON form", n.Line, n.Tag, n.Value)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	buf.Write(b)
	return nil
}
