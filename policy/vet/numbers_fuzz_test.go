package vet

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// numberReaders is one number of the arguments as the two kinds of readers that tools use read it:
// exact (encoding/json with UseNumber, then big.Rat: Python's int, Decimal) and float64
// (strconv.ParseFloat: Go's and TypeScript's SDKs).
type numberReaders struct {
	exact *big.Rat
	f     float64
}

func readBoth(lit string) (numberReaders, bool) {
	dec := json.NewDecoder(strings.NewReader(lit))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() || !json.Valid([]byte(lit)) {
		return numberReaders{}, false
	}
	n, ok := v.(json.Number)
	if _, e, _ := strings.Cut(strings.ToLower(lit), "e"); !ok || n.String() != lit || len(lit) > 64 || len(e) > 4 {
		return numberReaders{}, false // big.Rat's cost grows with the exponent
	}
	f, err := strconv.ParseFloat(lit, 64)
	r, ok := new(big.Rat).SetString(lit)
	if err != nil || !ok {
		return numberReaders{}, false
	}
	return numberReaders{r, f}, true
}

// FuzzRuleNumbersReaders: a max, min or oneOf rule on a number passes the call only where the
// exact reader and the float64 reader both pass it, blocks it where both block it, and where they
// disagree blocks it whether the rule is negated or not. The rule's bound is a float64 (as the
// definition is read); its exact value is the shortest decimal that reads as it.
func FuzzRuleNumbersReaders(f *testing.F) {
	for _, s := range [][2]string{
		{"9007199254740993", "9007199254740992"}, {"0.10000000000000001", "0.1"}, {"100", "100"},
		{"100.0000000000000001", "100"}, {"99.99999999999999999", "100"}, {"1e2", "100"},
		{"-0", "0"}, {"1e-400", "0"}, {"-1e-400", "0"}, {"12345678901234567890", "1.2345678901234567e19"},
		{"0.30000000000000004", "0.3"}, {"5", "4.5"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, arg, boundLit string) {
		x, ok1 := readBoth(arg)
		b, ok2 := readBoth(boundLit)
		if !ok1 || !ok2 || math.IsInf(b.f, 0) || math.IsInf(x.f, 0) {
			return
		}
		exactBound, _ := new(big.Rat).SetString(strconv.FormatFloat(b.f, 'g', -1, 64))
		args := []byte(`{"n":` + arg + `}`)
		if _, _, ok := NewChecker(Policy{Allowed: map[string]bool{"t": true}}).Check("t", args); !ok {
			return // refused before any rule (a number a float64 cannot hold)
		}
		for _, c := range []struct {
			check        Check
			float, exact bool // the verdict of each reader: the value passes the check
		}{
			{Check{Max: &b.f}, x.f <= b.f, x.exact.Cmp(exactBound) <= 0},
			{Check{Min: &b.f}, x.f >= b.f, x.exact.Cmp(exactBound) >= 0},
			{Check{OneOf: []any{b.f}}, x.f == b.f, x.exact.Cmp(exactBound) == 0},
		} {
			for _, negate := range []bool{false, true} {
				r := Rule{ID: "n", Tool: "t", Path: "n", Check: c.check}
				if negate {
					r = Rule{ID: "n", Tool: "t", Path: "n", Not: &c.check}
				}
				set, err := CompileRules([]Rule{r})
				if err != nil {
					t.Fatalf("%+v: %v", r, err)
				}
				checker := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Rules: set})
				reason, _, ok := checker.Check("t", args)
				want := c.exact != negate
				if c.float != c.exact {
					want = false
				}
				if ok != want {
					t.Fatalf("%s against %s (%+v, negated %v): passed %v (%s); float64 reader %v, exact %v",
						arg, boundLit, c.check, negate, ok, reason, c.float, c.exact)
				}
				if c.float != c.exact && !strings.HasSuffix(reason, " "+whyReadersDiffer) {
					t.Fatalf("%s against %s: reason %q", arg, boundLit, reason)
				}
			}
		}
	})
}

// TestRuleNumbersReadApart: numbers that a float64 reader and an exact reader judge differently
// against a rule are refused, with a reason that names the rule and the path, not the value.
func TestRuleNumbersReadApart(t *testing.T) {
	t.Parallel()
	hundred, big53 := 100.0, 9007199254740992.0
	for _, c := range []struct {
		check Check
		not   bool
		args  string
		ok    bool
	}{
		{Check{Max: &hundred}, false, `{"n":100.0000000000000001}`, false},
		{Check{Max: &hundred}, false, `{"n":100.000}`, true},
		{Check{Max: &hundred}, false, `{"n":1e2}`, true},
		{Check{Max: &hundred}, true, `{"n":100.0000000000000001}`, false},
		{Check{Min: &hundred}, false, `{"n":99.99999999999999999}`, false},
		{Check{Min: &hundred}, false, `{"n":99.9999999999}`, false},
		{Check{OneOf: []any{big53}}, false, `{"n":9007199254740993}`, false},
		{Check{OneOf: []any{big53}}, true, `{"n":9007199254740993}`, false},
		{Check{OneOf: []any{big53}}, false, `{"n":9007199254740992.0}`, true},
		{Check{OneOf: []any{0.1}}, false, `{"n":0.10000000000000001}`, false},
		{Check{OneOf: []any{0.1}}, false, `{"n":1e-1}`, true},
	} {
		r := Rule{ID: "cap", Tool: "t", Path: "n", Check: c.check}
		if c.not {
			r = Rule{ID: "cap", Tool: "t", Path: "n", Not: &c.check}
		}
		set, err := CompileRules([]Rule{r})
		if err != nil {
			t.Fatal(err)
		}
		reason, _, ok := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Rules: set}).Check("t", []byte(c.args))
		if ok != c.ok {
			t.Errorf("%s (not %v): passed %v, want %v (%s)", c.args, c.not, ok, c.ok, reason)
		}
		if !ok && strings.Contains(reason, "0000") {
			t.Errorf("%s: the reason quotes the value: %s", c.args, reason)
		}
	}
}
