package policy

import (
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// ruleNumbers refuses a number of an argument rule (max, min, oneOf; in the rule or in its not)
// that a float64 does not hold as written: the rules read their numbers as float64, so
// 9007199254740993 would mean 9007199254740992 and 0.10000000000000001 would mean 0.1.
func ruleNumbers(rules gjson.Result) error {
	var err error
	rules.ForEach(func(i, r gjson.Result) bool {
		for _, at := range []string{"max", "min", "oneOf", "not.max", "not.min", "not.oneOf"} {
			if err = numbersHeld(r.Get(at), fmt.Sprintf("toolCalls.rules[%d].%s", i.Int(), at)); err != nil {
				return false
			}
		}
		return true
	})
	return err
}

// numbersHeld checks v, or each element of v when it is an array.
func numbersHeld(v gjson.Result, at string) error {
	if v.IsArray() {
		for j, e := range v.Array() {
			if err := numbersHeld(e, fmt.Sprintf("%s[%d]", at, j)); err != nil {
				return err
			}
		}
		return nil
	}
	if v.Type == gjson.Number && !float64Holds(v.Raw) {
		return fmt.Errorf("%s: %s is not a number a float64 holds as written: give at most 15 significant digits", at, v.Raw)
	}
	return nil
}

// float64Holds reports whether the float64 read from a number literal has the literal's exact
// value as its shortest decimal.
func float64Holds(raw string) bool {
	n, err := jsoncheck.ReadNumber(raw)
	f, ferr := strconv.ParseFloat(raw, 64)
	if err != nil || ferr != nil {
		return false
	}
	m, err := jsoncheck.ReadNumber(strconv.FormatFloat(f, 'g', -1, 64))
	return err == nil && n.Cmp(m) == 0
}
