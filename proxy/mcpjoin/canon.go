package mcpjoin

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// The join's digest of a call's arguments: canonical JSON (object keys sorted, white space gone) in
// which two arguments are one only where every reader of them reads one value. The MCP servers'
// SDKs read numbers differently: Go's and TypeScript's as float64, Python's integers exactly and
// apart from floats (1 is an int, 1.0 a float), C#'s and Java's decimals exactly. So a number is
// the kind of its literal (an integer, or one with a fraction or an exponent) and its exact
// decimal value: 1.0, 1.00 and 1e0 are one number, 1 another, 0.1 and 0.1000000000000000055 two
// (float64 readers take them for one, exact readers do not), -0 is not 0. The arguments must be
// one strict JSON object (no repeated member, no lone surrogate, a number that a float64 holds as
// it is neither infinite nor zero for non-zero digits); else they have no digest and match no
// call.

// maxDepth bounds nesting (the door and the model's path cap it lower).
const maxDepth = 256

// digest is the SHA-256 of the arguments' canonical form.
func digest(args []byte) ([32]byte, bool) {
	if jsoncheck.Object(args, jsoncheck.Limits{MaxDepth: maxDepth, Float64Numbers: true}) != nil {
		return [32]byte{}, false
	}
	var b bytes.Buffer
	if canonical(&b, gjson.ParseBytes(args)) != nil {
		return [32]byte{}, false
	}
	return sha256.Sum256(b.Bytes()), true
}

// canonical writes v's canonical form (v is strict JSON: its keys are unique).
func canonical(b *bytes.Buffer, v gjson.Result) error {
	switch v.Type {
	case gjson.String:
		writeString(b, v.Str)
	case gjson.Number:
		return writeNumber(b, v.Raw)
	case gjson.True, gjson.False, gjson.Null:
		b.WriteString(v.Raw)
	case gjson.JSON:
		if v.IsArray() {
			return canonicalArray(b, v)
		}
		return canonicalObject(b, v)
	}
	return nil
}

func canonicalArray(b *bytes.Buffer, v gjson.Result) error {
	b.WriteByte('[')
	var err error
	first := true
	v.ForEach(func(_, e gjson.Result) bool {
		if !first {
			b.WriteByte(',')
		}
		first = false
		err = canonical(b, e)
		return err == nil
	})
	b.WriteByte(']')
	return err
}

func canonicalObject(b *bytes.Buffer, v gjson.Result) error {
	type member struct {
		key string
		val gjson.Result
	}
	var ms []member
	v.ForEach(func(k, e gjson.Result) bool {
		ms = append(ms, member{k.Str, e})
		return true
	})
	slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, m.key)
		b.WriteByte(':')
		if err := canonical(b, m.val); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// writeString writes s (valid UTF-8: the arguments were checked) as a JSON string.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a valid string always encodes
	b.Truncate(b.Len() - 1)
}

// writeNumber writes a JSON number literal in jsoncheck's canonical form (its kind, sign and exact
// value).
func writeNumber(b *bytes.Buffer, raw string) error {
	n, err := jsoncheck.ReadNumber(raw)
	if err != nil { // the number would be infinite or zero: Float64Numbers refused it already
		return err
	}
	b.Write(n.AppendCanonical(b.AvailableBuffer()))
	return nil
}
