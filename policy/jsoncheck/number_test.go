package jsoncheck

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
)

// FuzzNumberExact: Number reads a literal as big.Rat does (after encoding/json with UseNumber
// accepts it): Cmp orders two literals as big.Rat's Cmp does, and two literals have one canonical
// form exactly when their values, their kinds (integer literal or not) and their signs are one.
func FuzzNumberExact(f *testing.F) {
	for _, p := range [][2]string{
		{"1", "1.0"}, {"1.50", "15e-1"}, {"-0", "0"}, {"-0.0", "0e5"}, {"9007199254740993", "9007199254740992"},
		{"0.1", "0.10000000000000001"}, {"100", "1E+2"}, {"-2", "-10"}, {"0.001", "1e-3"}, {"10", "9.99"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, oka := ratOf(a)
		rb, okb := ratOf(b)
		if !oka || !okb {
			return
		}
		na, erra := ReadNumber(a)
		nb, errb := ReadNumber(b)
		if erra != nil || errb != nil {
			t.Fatalf("%s, %s: %v, %v", a, b, erra, errb)
		}
		if got, want := na.Cmp(nb), ra.Cmp(rb); got != want {
			t.Fatalf("%s vs %s: Cmp %d, big.Rat %d", a, b, got, want)
		}
		alike := ra.Cmp(rb) == 0 && strings.ContainsAny(a, ".eE") == strings.ContainsAny(b, ".eE") &&
			strings.HasPrefix(a, "-") == strings.HasPrefix(b, "-")
		if same := bytes.Equal(na.AppendCanonical(nil), nb.AppendCanonical(nil)); same != alike {
			t.Fatalf("%s and %s: one canonical form %v, read alike %v", a, b, same, alike)
		}
	})
}

// ratOf reads lit as an exact reader does; false for what is not one JSON number, or has an
// exponent whose big.Rat costs too much to build.
func ratOf(lit string) (*big.Rat, bool) {
	dec := json.NewDecoder(strings.NewReader(lit))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() || !json.Valid([]byte(lit)) {
		return nil, false
	}
	n, ok := v.(json.Number)
	if _, e, _ := strings.Cut(strings.ToLower(lit), "e"); !ok || n.String() != lit || len(lit) > 64 || len(e) > 4 {
		return nil, false
	}
	return new(big.Rat).SetString(lit)
}

// TestReadNumberRange: an exponent of more than 15 digits is out of range; leading zeros of an
// exponent do not count.
func TestReadNumberRange(t *testing.T) {
	t.Parallel()
	for _, lit := range []string{"1e1234567890123456", "-2.5E+1234567890123456", "0e-9999999999999999"} {
		if _, err := ReadNumber(lit); err == nil {
			t.Errorf("%s: no error", lit)
		}
	}
	n, err := ReadNumber("1.5e000000000000000000001")
	if err != nil || n.Digits != "15" || n.Exp != 0 || n.Integer {
		t.Errorf("leading zeros of an exponent: %+v, %v", n, err)
	}
}
