package jsoncheck

import (
	"errors"
	"strconv"
	"strings"
)

// Number is a JSON number literal read exactly, as the readers that keep every digit read it
// (Python's int, Decimal, C#'s and Java's decimals, Go's big.Rat): its kind, its sign and its
// exact decimal value. Float64 readers (Go's and TypeScript's SDKs) may take two Numbers for one.
type Number struct {
	// Integer: the literal has no fraction and no exponent (Python reads 1 an int, 1.0 a float).
	Integer bool
	// Neg: the literal starts with '-' (-0 too).
	Neg bool
	// Digits are the significant digits, without leading or trailing zeros; empty for zero.
	Digits string
	// Exp is the power of ten: the value is Digits × 10^Exp.
	Exp int
}

// errNumberRange: a number whose exponent no reader holds.
var errNumberRange = errors.New("jsoncheck: a number's exponent is out of range")

// ReadNumber reads raw, a JSON number literal that Value accepts. It fails only on an exponent of
// more than 15 digits (every float64 reader reads such a number as infinite or zero).
func ReadNumber(raw string) (Number, error) {
	n := Number{Integer: !strings.ContainsAny(raw, ".eE")}
	if rest, ok := strings.CutPrefix(raw, "-"); ok {
		n.Neg, raw = true, rest
	}
	mant := raw
	if i := strings.IndexAny(raw, "eE"); i >= 0 {
		e := strings.TrimPrefix(raw[i+1:], "+")
		neg := strings.HasPrefix(e, "-")
		e = strings.TrimLeft(strings.TrimPrefix(e, "-"), "0")
		if len(e) > 15 {
			return Number{}, errNumberRange
		}
		x, _ := strconv.Atoi("0" + e)
		if neg {
			x = -x
		}
		mant, n.Exp = raw[:i], x
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	n.Exp -= len(frac)
	if digits == "" {
		n.Exp = 0
		return n, nil
	}
	n.Digits = strings.TrimRight(digits, "0")
	n.Exp += len(digits) - len(n.Digits)
	return n, nil
}

// Cmp compares the exact values of n and m: -1, 0 or +1 (-0 equals 0; the kinds do not count).
// It takes time linear in the digits.
func (n Number) Cmp(m Number) int {
	sn, sm := n.sign(), m.sign()
	switch {
	case sn != sm:
		return cmpInt(sn, sm)
	case sn == 0:
		return 0
	}
	mag := cmpInt(len(n.Digits)+n.Exp, len(m.Digits)+m.Exp) // where the leading digit is
	if mag == 0 {
		mag = strings.Compare(n.Digits, m.Digits) // no trailing zeros: a prefix is the smaller
	}
	return sn * mag
}

func (n Number) sign() int {
	switch {
	case n.Digits == "":
		return 0
	case n.Neg:
		return -1
	}
	return 1
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// AppendCanonical appends n's canonical form: its kind ('i' an integer literal, 'd' one with a
// fraction or an exponent), its sign and its exact value as digits and a power of ten. Two
// literals have one form only where every reader reads them alike: 1.50 is d+15e-1, 1 is i+1e0,
// -0.0 is d-0.
func (n Number) AppendCanonical(b []byte) []byte {
	kind, sign := byte('i'), byte('+')
	if !n.Integer {
		kind = 'd'
	}
	if n.Neg {
		sign = '-'
	}
	b = append(b, kind, sign)
	if n.Digits == "" {
		return append(b, '0')
	}
	b = append(b, n.Digits...)
	b = append(b, 'e')
	return strconv.AppendInt(b, int64(n.Exp), 10)
}
