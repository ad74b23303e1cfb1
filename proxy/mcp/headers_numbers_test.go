package mcp

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"
)

// FuzzHeaderInteger: an argument number matches an Mcp-Param header only as the integer an exact
// reader (encoding/json with UseNumber, then big.Rat) reads it, within ±(2^53-1); a number a
// float64 reader rounds to an integer (1.0000000000000001) matches none.
func FuzzHeaderInteger(f *testing.F) {
	for _, s := range []string{"1", "1.0", "1e2", "-0", "0.0e5", "1.0000000000000001", "9007199254740991",
		"9007199254740992", "-9007199254740991", "90071992547409910e-1", "9007199254740991.4", "1.5", "2e15"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		dec := json.NewDecoder(strings.NewReader(lit))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil || dec.More() || !json.Valid([]byte(lit)) {
			return
		}
		n, ok := v.(json.Number)
		if _, e, _ := strings.Cut(strings.ToLower(lit), "e"); !ok || n.String() != lit || len(lit) > 64 || len(e) > 4 {
			return
		}
		r, _ := new(big.Rat).SetString(lit)
		limit := new(big.Rat).SetInt64(1<<53 - 1)
		want, wantOK := "", r.IsInt() && new(big.Rat).Abs(r).Cmp(limit) <= 0
		if wantOK {
			want = r.Num().String()
		}
		got, gotOK := headerInteger(lit)
		if got != want || gotOK != wantOK {
			t.Fatalf("%s: header %q %v, the exact reader %q %v", lit, got, gotOK, want, wantOK)
		}
	})
}
