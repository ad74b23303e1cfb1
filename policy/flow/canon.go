package flow

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// ArgsDigest is the SHA-256 of a call's arguments in canonical JSON: object keys sorted (by their
// bytes), no white space, strings re-encoded (escapes resolved, HTML characters not escaped),
// numbers in jsoncheck's canonical form (kind, sign and exact value: "1.0" and "1.00" are one,
// "1" and "1.0" and "1e0" are not, nor two integers beyond 2^53 that float64 rounds alike), so
// that a confirmed code binds the values an exact reader (Python's int, Decimal) reads too. It
// does not depend on key order or white space. Arguments that are not one JSON object, hold a
// duplicate key (which vetting refuses), or a number whose exponent no reader holds, are an
// error.
func ArgsDigest(args gjson.Result) ([32]byte, error) {
	if !args.IsObject() {
		return [32]byte{}, errors.New("flow: canonical json: the arguments are not an object")
	}
	var b bytes.Buffer
	if err := canonical(&b, args, 0); err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b.Bytes()), nil
}

// maxCanonDepth bounds nesting (vetting caps it lower).
const maxCanonDepth = 256

func canonical(b *bytes.Buffer, v gjson.Result, depth int) error {
	if depth > maxCanonDepth {
		return errors.New("flow: canonical json: too deep")
	}
	switch {
	case v.IsObject():
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
				if ms[i-1].key == m.key {
					return errors.New("flow: canonical json: duplicate key")
				}
				b.WriteByte(',')
			}
			writeString(b, m.key)
			b.WriteByte(':')
			if err := canonical(b, m.val, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case v.IsArray():
		b.WriteByte('[')
		i := 0
		var err error
		v.ForEach(func(_, e gjson.Result) bool {
			if i > 0 {
				b.WriteByte(',')
			}
			i++
			err = canonical(b, e, depth+1)
			return err == nil
		})
		if err != nil {
			return err
		}
		b.WriteByte(']')
	case v.Type == gjson.String:
		writeString(b, v.Str)
	case v.Type == gjson.Number:
		n, err := jsoncheck.ReadNumber(v.Raw)
		if err != nil {
			return fmt.Errorf("flow: canonical json: %w", err)
		}
		b.Write(n.AppendCanonical(b.AvailableBuffer()))
	case v.Type == gjson.True:
		b.WriteString("true")
	case v.Type == gjson.False:
		b.WriteString("false")
	case v.Type == gjson.Null:
		b.WriteString("null")
	default:
		return errors.New("flow: canonical json: not a JSON value")
	}
	return nil
}

// writeString writes s as a JSON string without HTML escaping; invalid UTF-8 becomes U+FFFD, as
// JSON decoders read it.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if !utf8.ValidString(s) {
		var v strings.Builder
		for _, r := range s { // each invalid byte is one utf8.RuneError, as encoding/json reads it
			v.WriteRune(r)
		}
		s = v.String()
	}
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}
