package mcpjoin

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// TestDigestNumbers: two arguments share a digest only where every reader reads one value: the
// literal's kind (Python reads 1 an int and 1.0 a float), its exact value (C#'s and Java's
// decimals, Python's integers) and its float64 value (Go's and TypeScript's SDKs) all agree.
func TestDigestNumbers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`1.0`, `1.00`, true},
		{`1.0`, `1e0`, true},
		{`1.5`, `15E-1`, true},
		{`12.50`, `12.5`, true},
		{`100`, `100`, true},
		{`0.1`, `1e-1`, true},
		{`1`, `1.0`, false},
		{`1`, `1e0`, false},
		{`100`, `1e2`, false},
		{`0.1`, `0.1000000000000000055`, false},
		{`9007199254740993`, `9007199254740992`, false},
		{`9007199254740993.0`, `9007199254740992.0`, false},
		{`12345678901234567890`, `12345678901234567891`, false},
		{`1.2345678901234567890e19`, `1.2345678901234567891e19`, false},
		{`-0`, `0`, false},
		{`-0.0`, `0.0`, false},
		{`10`, `1`, false},
		{`0.5`, `5`, false},
	} {
		da, oka := Digest([]byte(`{"n":` + c.a + `}`))
		db, okb := Digest([]byte(`{"n":` + c.b + `}`))
		if !oka || !okb {
			t.Errorf("%s, %s: no digest", c.a, c.b)
			continue
		}
		if (da == db) != c.same {
			t.Errorf("%s and %s: one digest %v, want %v", c.a, c.b, da == db, c.same)
		}
		if got := readersAgree(t, `{"n":`+c.a+`}`, `{"n":`+c.b+`}`); got != c.same {
			t.Errorf("%s and %s: the readers agree %v, the table says %v", c.a, c.b, got, c.same)
		}
	}
}

// TestDigestRefused: arguments that readers read differently, or that are not one strict object,
// have no digest (they match no call).
func TestDigestRefused(t *testing.T) {
	t.Parallel()
	for _, args := range []string{
		`{"a":1,"a":2}`, `{"a":"\ud800"}`, `{"a":"\udc00x"}`, "{\"a\":\"\xff\"}", `{"n":1e400}`, `{"n":-1e400}`, `{"n":1e-400}`,
		`{"n":1e99999999999999999999}`, `[1]`, `"x"`, `{"a":1}{}`, `{"a":01}`, `{"a":1.}`, ``,
	} {
		if _, ok := Digest([]byte(args)); ok {
			t.Errorf("%q has a digest", args)
		}
	}
}

// FuzzDigestReaders: where two arguments share a digest, encoding/json (the Go SDK's reader, and a
// reader of exact numbers) reads them as one value: the same members, the same strings, numbers of
// one literal kind, one exact value and one float64 (its sign too). An argument re-encoded with
// its keys sorted and its white space gone keeps its digest.
func FuzzDigestReaders(f *testing.F) {
	for _, s := range [][2]string{
		{`{"n":1}`, `{"n":1.0}`}, {`{"n":1.0}`, `{"n":1e0}`}, {`{"n":0.1}`, `{"n":0.1000000000000000055}`},
		{`{"b":[1,{"x":"é"}],"a":null}`, `{"a":null,"b":[1,{"x":"\u00e9"}]}`}, {`{"n":-0}`, `{"n":0}`},
		{`{"n":9007199254740993}`, `{"n":9007199254740992}`}, {`{"n":12.50}`, `{"n":12.5}`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		da, oka := Digest([]byte(a))
		db, okb := Digest([]byte(b))
		if oka {
			if again, ok := Digest(reencoded(t, a)); !ok || again != da {
				t.Fatalf("%q re-encoded changes its digest", a)
			}
		}
		if oka && okb && da == db && !readersAgree(t, a, b) {
			t.Fatalf("%q and %q share a digest; a reader tells them apart", a, b)
		}
	})
}

// reencoded is a strict JSON value decoded with its numbers' literals and encoded again: keys
// sorted, no white space.
func reencoded(t *testing.T, s string) []byte {
	t.Helper()
	v := decodeExact(t, s)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encode %q: %v", s, err)
	}
	return bytes.TrimSpace(b.Bytes())
}

func decodeExact(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("encoding/json does not read %q, which has a digest: %v", s, err)
	}
	return v
}

// readersAgree reports whether every reader reads a and b (strict JSON) as one value.
func readersAgree(t *testing.T, a, b string) bool {
	t.Helper()
	return sameValue(decodeExact(t, a), decodeExact(t, b))
}

func sameValue(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		return ok && sameNumber(string(x), string(y))
	}
	return a == b
}

// sameNumber: one literal kind (integer or not), one exact value, one float64 with one sign.
func sameNumber(a, b string) bool {
	integer := func(s string) bool { return !strings.ContainsAny(s, ".eE") }
	if integer(a) != integer(b) {
		return false
	}
	ra, oka := new(big.Rat).SetString(a)
	rb, okb := new(big.Rat).SetString(b)
	if !oka || !okb || ra.Cmp(rb) != 0 {
		return false
	}
	fa, erra := strconv.ParseFloat(a, 64)
	fb, errb := strconv.ParseFloat(b, 64)
	return erra == nil && errb == nil && fa == fb && math.Signbit(fa) == math.Signbit(fb)
}

// FuzzDigestNumberSpellings: two spellings of one decimal value (digits with a point and an
// exponent; the same digits as 0.DIGITS with the exponent moved, and trailing zeros more) share a
// digest exactly where the readers agree on them (their kind, exact value and float64), and both
// have one or neither.
func FuzzDigestNumberSpellings(f *testing.F) {
	f.Add("1", uint8(0), int16(0), uint8(1), false)
	f.Add("10", uint8(1), int16(0), uint8(0), false)
	f.Add("15", uint8(1), int16(-1), uint8(3), true)
	f.Add("1000000000000000055", uint8(1), int16(-1), uint8(0), false)
	f.Add("0", uint8(0), int16(0), uint8(0), true)
	f.Add("9007199254740993", uint8(0), int16(0), uint8(2), false)
	f.Fuzz(func(t *testing.T, raw string, point uint8, exp int16, zeros uint8, neg bool) {
		digits := strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, raw)
		digits = strings.TrimLeft(digits, "0")
		if digits == "" {
			digits = "0"
		}
		if len(digits) > 40 {
			digits = digits[:40]
		}
		at := int(point) % (len(digits) + 1)
		sign := ""
		if neg {
			sign = "-"
		}
		a := sign + digits
		if at > 0 && at < len(digits) {
			a = sign + digits[:at] + "." + digits[at:]
		} else {
			at = len(digits)
		}
		if exp != 0 {
			a += "e" + strconv.Itoa(int(exp))
		}
		b := sign + "0." + digits + strings.Repeat("0", int(zeros%8)) + "e" + strconv.Itoa(int(exp)+at)
		da, oka := Digest([]byte(`{"n":` + a + `}`))
		db, okb := Digest([]byte(`{"n":` + b + `}`))
		if oka != okb {
			t.Fatalf("%s and %s: one has a digest, the other not", a, b)
		}
		if oka && (da == db) != sameNumber(a, b) {
			t.Fatalf("%s and %s: one digest %v, the readers agree %v", a, b, da == db, sameNumber(a, b))
		}
	})
}
