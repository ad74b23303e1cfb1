package flow

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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
	return argsDigest(args, exactNumbers)
}

// numberReading is how a digest writes a number.
type numberReading int

const (
	exactNumbers   numberReading = iota // jsoncheck's canonical form
	float64Numbers                      // the float64's shortest decimal
	looseNumbers                        // an integer literal as written, others as float64
)

// ArgsDigestFloat64 is ArgsDigest with every number as a float64 reader reads it (its shortest
// decimal: "1", "1.0" and "1e0" are one, and so are two integers that float64 rounds alike): the
// coarsest reading, for a caller that must match every spelling a client may have re-encoded the
// arguments into (never for binding a code).
func ArgsDigestFloat64(args gjson.Result) ([32]byte, error) {
	return argsDigest(args, float64Numbers)
}

// ArgsDigestLoose is ArgsDigest with an integer literal as written (-0 as 0) and any other number
// as its float64 value ("1", "1.0" and "1e0" are one; two integer literals are one only when
// written alike): the reading pinned MCP tool definitions are keyed by, so that a pin keeps its
// digest. Coarser than ArgsDigest: never for binding a code.
func ArgsDigestLoose(args gjson.Result) ([32]byte, error) {
	return argsDigest(args, looseNumbers)
}

func argsDigest(args gjson.Result, reading numberReading) ([32]byte, error) {
	if !args.IsObject() {
		return [32]byte{}, errors.New("flow: canonical json: the arguments are not an object")
	}
	var b bytes.Buffer
	if err := canonical(&b, args, 0, reading); err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b.Bytes()), nil
}

// maxCanonDepth bounds nesting (vetting caps it lower).
const maxCanonDepth = 256

func canonical(b *bytes.Buffer, v gjson.Result, depth int, reading numberReading) error {
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
			if err := canonical(b, m.val, depth+1, reading); err != nil {
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
			err = canonical(b, e, depth+1, reading)
			return err == nil
		})
		if err != nil {
			return err
		}
		b.WriteByte(']')
	case v.Type == gjson.String:
		writeString(b, v.Str)
	case v.Type == gjson.Number:
		return writeNumber(b, v.Raw, reading)
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

// writeNumber writes a number literal as the reading says.
func writeNumber(b *bytes.Buffer, raw string, reading numberReading) error {
	switch reading {
	case float64Numbers:
		f, _ := strconv.ParseFloat(raw, 64) // out of range: the infinity it reads
		if f == 0 {
			f = 0 // -0 and 0 are one
		}
		b.Write(strconv.AppendFloat(b.AvailableBuffer(), f, 'g', -1, 64))
		return nil
	case looseNumbers:
		b.WriteString(looseNumber(raw))
		return nil
	}
	n, err := jsoncheck.ReadNumber(raw)
	if err != nil {
		return fmt.Errorf("flow: canonical json: %w", err)
	}
	b.Write(n.AppendCanonical(b.AvailableBuffer()))
	return nil
}

// looseNumber is an integer literal as written (-0 as 0) and any other number as its float64
// value, integral ones below 2^53 as integers.
func looseNumber(raw string) string {
	if !strings.ContainsAny(raw, ".eE") {
		if raw == "-0" {
			return "0"
		}
		return raw
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsInf(f, 0) {
		return raw
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
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
