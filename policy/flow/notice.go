package flow

import (
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
)

// Limits of the key arguments a notice shows.
const (
	maxNoticeKeys    = 6  // key arguments shown
	maxNoticeValues  = 3  // values shown per key argument (a path with #)
	maxNoticeRunes   = 80 // runes of a string value
	maxNoticeNumber  = 32 // bytes of a number
	maxNoticeKeyName = 64 // bytes of a key argument's path
)

// Limits of the values that broke the rules, which a notice shows whole: a call whose values do
// not fit is blocked, never held (a user cannot confirm what they cannot see).
const (
	maxNoticeBroken      = 16  // values that broke the rules, in all
	maxNoticeBrokenRunes = 256 // runes of one (bytes of a number)
)

// notice is the text that replaces a held call: its question, and the code.
func (c *Conversation) notice(tool string, args gjson.Result, vs []violation, k code) string {
	return question(tool, args, vs) + " To run it once, reply with the code " + k.display() + " (valid for " + ttlText(c.p.ttl) + ")."
}

// question names the held call: the tool, the first rule's reason, the key arguments of the rules
// that hold it (values quoted with Go escapes and cut short, so no line break or control character
// gets through), and every value that broke a rule (whole; those the key arguments do not already
// show whole).
func question(tool string, args gjson.Result, vs []violation) string {
	var b strings.Builder
	b.WriteString("[promptgate] held tool call ")
	b.WriteString(vet.DisplayName(tool))
	b.WriteString(" for your confirmation: rule ")
	b.WriteString(vs[0].rule.name)
	b.WriteString(": ")
	b.WriteString(vs[0].reason)
	b.WriteString(".")
	var keys []string
	for _, v := range vs {
		for _, k := range v.rule.keyArgs {
			if !slices.Contains(keys, k) && len(keys) < maxNoticeKeys {
				keys = append(keys, k)
			}
		}
	}
	shown := 0
	for _, k := range keys {
		vals := keyValues(args, k)
		if len(vals) == 0 {
			continue
		}
		if shown == 0 {
			b.WriteString(" Arguments: ")
		} else {
			b.WriteString(", ")
		}
		shown++
		b.WriteString(keyName(k))
		b.WriteByte('=')
		if len(vals) == 1 {
			b.WriteString(vals[0])
		} else {
			b.WriteString("[" + strings.Join(vals, ", ") + "]")
		}
	}
	if shown > 0 {
		b.WriteString(".")
	}
	writeBroken(&b, args, keys, vs)
	return b.String()
}

// writeBroken adds the values that broke the rules, each once, named as the reasons name them,
// leaving out those the key arguments show whole already: ` Values that broke the rule: to (value
// 4)="eve@evil.example".` unshowable has checked that they fit.
func writeBroken(b *strings.Builder, args gjson.Result, keys []string, vs []violation) {
	whole := map[string]bool{} // name and text of each key argument value shown whole
	for _, k := range keys {
		n := 0
		vet.Walk(args, k, func(v gjson.Result, found bool) bool {
			n++
			if r, ok := brokenText(v); found && ok && r == keyValue(v) {
				whole[valueAt(k, n)+"\x00"+r] = true
			}
			return n < maxNoticeValues
		})
	}
	seen := map[string]bool{}
	rules := map[*ruleBase]bool{}
	var items []string
	for _, v := range vs {
		for _, bv := range v.bad {
			r, _ := brokenText(bv.v)
			if key := bv.name(bv.path) + "\x00" + r; !seen[key] {
				seen[key] = true
				rules[v.rule] = true
				if !whole[key] {
					items = append(items, bv.name(keyName(bv.path))+"="+r)
				}
			}
		}
	}
	if len(items) == 0 {
		return
	}
	b.WriteString(" Values that broke the rule")
	if len(rules) > 1 {
		b.WriteString("s")
	}
	b.WriteString(": " + strings.Join(items, ", ") + ".")
}

// unshowable says why a notice cannot show every value that broke the rules ("" when it can): one
// that is an object or an array (a scan rule's object too deep to scan), or longer than
// maxNoticeBrokenRunes, or more than maxNoticeBroken of them. The reason names the rule and the
// value, never quotes it.
func unshowable(vs []violation) string {
	const cannot = ": a call the user cannot see cannot be confirmed"
	seen := map[string]bool{}
	for _, v := range vs {
		for _, bv := range v.bad {
			r, ok := brokenText(bv.v)
			if !ok {
				what := "is an object"
				switch {
				case bv.v.IsArray():
					what = "is an array"
				case bv.v.Type == gjson.String || bv.v.Type == gjson.Number:
					what = "is longer than a notice shows (" + strconv.Itoa(maxNoticeBrokenRunes) + " characters)"
				}
				return "rule " + v.rule.name + ": " + bv.name(bv.path) + " " + what + cannot
			}
			seen[bv.name(bv.path)+"\x00"+r] = true
			if len(seen) > maxNoticeBroken {
				return "rule " + v.rule.name + ": more values broke the rules than a notice shows (" +
					strconv.Itoa(maxNoticeBroken) + ")" + cannot
			}
		}
	}
	return ""
}

// brokenText renders a value that broke a rule, whole: a string quoted with Go escapes, a number,
// true, false or null; false for an object, an array, or one longer than maxNoticeBrokenRunes.
func brokenText(v gjson.Result) (string, bool) {
	switch {
	case v.Type == gjson.String:
		if utf8.RuneCountInString(v.Str) > maxNoticeBrokenRunes {
			return "", false
		}
		return strconv.QuoteToASCII(v.Str), true
	case v.IsObject() || v.IsArray():
		return "", false
	case len(v.Raw) > maxNoticeBrokenRunes:
		return "", false
	}
	return v.Raw, true
}

// keyName renders a key argument's path: as written when plain, else quoted.
func keyName(k string) string {
	plain := len(k) <= maxNoticeKeyName
	for i := 0; plain && i < len(k); i++ {
		c := k[i]
		plain = c == '_' || c == '-' || c == '.' || c == '#' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	if plain {
		return k
	}
	return strconv.QuoteToASCII(cutRunes(k, maxNoticeKeyName))
}

// keyValues renders the values at a key argument's path, at most maxNoticeValues (then "…").
func keyValues(args gjson.Result, path string) []string {
	var out []string
	vet.Walk(args, path, func(v gjson.Result, found bool) bool {
		if !found {
			return true
		}
		if len(out) == maxNoticeValues {
			out = append(out, "…")
			return false
		}
		out = append(out, keyValue(v))
		return true
	})
	return out
}

// keyValue renders one value of a key argument: a string quoted with Go escapes, a number, both
// cut short ("…" after); an object or an array as {…} or […]; true, false, null.
func keyValue(v gjson.Result) string {
	switch {
	case v.Type == gjson.String:
		s := cutRunes(v.Str, maxNoticeRunes)
		q := strconv.QuoteToASCII(s)
		if s != v.Str {
			q += "…"
		}
		return q
	case v.Type == gjson.Number:
		if len(v.Raw) > maxNoticeNumber {
			return v.Raw[:maxNoticeNumber] + "…"
		}
		return v.Raw
	case v.IsObject():
		return "{…}"
	case v.IsArray():
		return "[…]"
	}
	return v.Raw // true, false, null
}

// cutRunes cuts s to at most n runes.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// ttlText writes a TTL in minutes or hours.
func ttlText(d time.Duration) string {
	m := int(d.Minutes() + 0.5)
	switch {
	case m%60 == 0 && m >= 60:
		if m == 60 {
			return "1 hour"
		}
		return strconv.Itoa(m/60) + " hours"
	case m == 1:
		return "1 minute"
	}
	return strconv.Itoa(m) + " minutes"
}

// RefusalText is the tool result promptgate gives the model for a call it refused (onViolation
// "continue"): it names the tool and the reason (which never quotes the arguments) and asks the
// model to go on with the user's request.
func RefusalText(tool, reason string) string {
	return "[promptgate] The call of tool " + vet.DisplayName(tool) + " was refused by policy and was not run: " +
		reason + ". It would be refused again with the same values. Go on with the user's request without it, " +
		"or tell the user what could not be done."
}

// HoldText is the tool result promptgate gives the model for a call it holds for the user's
// confirmation (onViolation "continue"): it names the tool and says the call waits for the user,
// without the code (the user's decision, which no model may see), and asks the model to go on with
// the rest of the request.
func HoldText(tool string) string {
	return "[promptgate] The call of tool " + vet.DisplayName(tool) + " is waiting for the user's confirmation and " +
		"was not run; the user has been asked. Do not make it again now. Go on with the rest of the user's request, " +
		"and tell the user that this step waits for their confirmation."
}
