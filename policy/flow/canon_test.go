package flow_test

import (
	"crypto/sha256"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
)

// readNumber is how the readers that tools use read one JSON number literal: encoding/json with
// UseNumber then big.Rat (Python's int and Decimal, C#'s decimal: exact), whether it is an integer
// literal (Python: int or float) and its sign (-0.0 is a float of its own), and strconv.ParseFloat
// (Go's and TypeScript's SDKs: float64).
type readNumber struct {
	exact   string
	integer bool
	neg     bool
	f       float64
}

func readLiteral(t *testing.T, lit string) (readNumber, bool) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(lit))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() || !json.Valid([]byte(lit)) {
		return readNumber{}, false
	}
	n, ok := v.(json.Number)
	if _, e, _ := strings.Cut(strings.ToLower(lit), "e"); !ok || n.String() != lit || len(n) > 64 || len(e) > 4 {
		return readNumber{}, false // big.Rat's cost grows with the exponent
	}
	r, ok := new(big.Rat).SetString(n.String())
	f, err := strconv.ParseFloat(n.String(), 64)
	if !ok || err != nil {
		return readNumber{}, false
	}
	return readNumber{r.RatString(), !strings.ContainsAny(lit, ".eE"), strings.HasPrefix(lit, "-"), f}, true
}

// FuzzArgsDigestNumbers: two arguments that differ in one number share a digest exactly when
// every reader reads them alike: the exact reader (value, integer or not, sign) and the float64
// reader. A code confirmed for one never releases the other. ArgsDigestFloat64 joins them exactly
// when the float64 reader does.
func FuzzArgsDigestNumbers(f *testing.F) {
	for _, p := range [][2]string{
		{"1", "1.0"}, {"1", "1e0"}, {"1.0", "1.00"}, {"1.5", "15e-1"}, {"100", "1E2"},
		{"9007199254740993", "9007199254740992"}, {"0.1", "0.10000000000000001"},
		{"-0", "0"}, {"0.0", "-0.0"}, {"12345678901234567890", "12345678901234567891"},
		{"1e400", "1e401"}, {"1e-400", "0.0"}, {"120", "120.0"}, {"2.50", "2.5"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, oka := readLiteral(t, a)
		rb, okb := readLiteral(t, b)
		if !oka || !okb {
			return
		}
		da, erra := flow.ArgsDigest(gjson.Parse(`{"n":` + a + `}`))
		db, errb := flow.ArgsDigest(gjson.Parse(`{"n":` + b + `}`))
		if erra != nil || errb != nil {
			t.Fatalf("%s, %s: %v, %v", a, b, erra, errb)
		}
		exactAlike := ra.exact == rb.exact && ra.integer == rb.integer && ra.neg == rb.neg
		if da == db && (!exactAlike || ra.f != rb.f) {
			t.Fatalf("%s and %s share a digest, but the readers read %+v and %+v", a, b, ra, rb)
		}
		if da != db && exactAlike {
			t.Fatalf("%s and %s read alike (%+v) but have two digests", a, b, ra)
		}
		fa, _ := flow.ArgsDigestFloat64(gjson.Parse(`{"n":` + a + `}`))
		fb, _ := flow.ArgsDigestFloat64(gjson.Parse(`{"n":` + b + `}`))
		if (fa == fb) != (ra.f == rb.f) {
			t.Fatalf("%s and %s: one float64 digest %v, one float64 %v", a, b, fa == fb, ra.f == rb.f)
		}
	})
}

// TestArgsDigestRefusesHugeExponents: a number whose exponent no reader holds has no digest.
func TestArgsDigestRefusesHugeExponents(t *testing.T) {
	t.Parallel()
	for _, args := range []string{`{"n":1e9999999999999999}`, `{"a":[{"n":-2.5E+10000000000000000}]}`} {
		if _, err := flow.ArgsDigest(gjson.Parse(args)); err == nil {
			t.Errorf("%s: a digest", args)
		}
	}
	if _, err := flow.ArgsDigest(gjson.Parse(`{"n":1e000000000000000000001}`)); err != nil {
		t.Errorf("leading zeros of an exponent: %v", err)
	}
}

// TestArgsDigestLoose: the loose digest is the SHA-256 of the canonical JSON with an integer
// literal as written (-0 as 0) and other numbers as their float64 (pinned MCP definitions are keyed
// by it, so it must not move).
func TestArgsDigestLoose(t *testing.T) {
	t.Parallel()
	got, err := flow.ArgsDigestLoose(gjson.Parse(`{ "c":-0, "b":1.0, "a":9007199254740993, "d":[2.50, 1e400, 0.1e1] }`))
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256([]byte(`{"a":9007199254740993,"b":1,"c":0,"d":[2.5,1e400,1]}`)); got != want {
		t.Errorf("the loose canonical form moved")
	}
}
