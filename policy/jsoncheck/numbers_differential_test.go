package jsoncheck

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
)

// A number in a tool call's arguments is read by the schema engine exactly (big.Rat) and by most
// tools as a float64 (encoding/json into float64, JavaScript's JSON.parse). With Float64Numbers,
// Object accepts a number only where the two agree on its sign and on whether it is zero, and
// encoding/json decodes it into a float64 without error.

// numberOracle reports whether a valid JSON number is one a float64 holds faithfully: encoding/json
// decodes it into a float64, and the float64 is zero exactly when the exact value is.
func numberOracle(n string) bool {
	var f float64
	if err := json.Unmarshal([]byte(n), &f); err != nil {
		return false
	}
	r, ok := new(big.Rat).SetString(strings.Trim(n, " \t\r\n"))
	return ok && (f == 0) == (r.Sign() == 0)
}

func FuzzFloat64Numbers(f *testing.F) {
	for _, s := range []string{"0", "-0", "1e308", "1e309", "-1.8e308", "1.7976931348623157e308",
		"1.7976931348623159e308", "5e-324", "2e-324", "1e-400", "0e-999", "0.000e400", "123456789012345678901234567890",
		"1E+2", "-0.0", "1e-323"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, n string) {
		if len(n) > 64 || Value([]byte(n), Limits{}) != nil {
			return // not a valid JSON value: not this test's concern; long exponents cost the oracle time
		}
		if v := strings.TrimLeft(n, " \t\r\n"); v == "" || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
			return // a valid value that is not a number
		}
		err := Value([]byte(n), Limits{Float64Numbers: true})
		if want := numberOracle(n); want != (err == nil) {
			t.Fatalf("%s: Float64Numbers gives %v, encoding/json and big.Rat say a float64 holds it: %v", n, err, want)
		}
		if err != nil && !errors.Is(err, NumberRange) {
			t.Fatalf("%s: %v, want NumberRange", n, err)
		}
	})
}

// TestFloat64NumbersInObjects: a number out of range is found at any depth, with its offset; the
// limit is off by default.
func TestFloat64NumbersInObjects(t *testing.T) {
	for _, tc := range []struct {
		in     string
		offset int
	}{
		{`{"a":1e999}`, 5},
		{`{"a":[1,{"b":-2e-999}]}`, 13},
		{`{"a":"1e999","b":0.5e-400}`, 17},
	} {
		var je *Error
		if err := Object([]byte(tc.in), Limits{Float64Numbers: true}); !errors.As(err, &je) || je.Kind != NumberRange || je.Offset != tc.offset {
			t.Errorf("%s: %v, want NumberRange at %d", tc.in, err, tc.offset)
		}
		if err := Object([]byte(tc.in), Limits{}); err != nil {
			t.Errorf("%s without Float64Numbers: %v", tc.in, err)
		}
	}
}
