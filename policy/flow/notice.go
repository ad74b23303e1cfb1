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

// notice is the text that replaces a held call. It names the tool, the first rule's reason, the
// key arguments of the rules that hold the call (values quoted with Go escapes and cut short, so
// no line break or control character gets through), and the code.
func (c *Conversation) notice(tool string, args gjson.Result, vs []violation, code string) string {
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
	b.WriteString(" To run it once, reply with the code ")
	b.WriteString(DisplayCode(code))
	b.WriteString(" (valid for ")
	b.WriteString(ttlText(c.p.ttl))
	b.WriteString(").")
	return b.String()
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
		switch {
		case v.Type == gjson.String:
			s := cutRunes(v.Str, maxNoticeRunes)
			q := strconv.QuoteToASCII(s)
			if s != v.Str {
				q += "…"
			}
			out = append(out, q)
		case v.Type == gjson.Number:
			if len(v.Raw) > maxNoticeNumber {
				out = append(out, v.Raw[:maxNoticeNumber]+"…")
			} else {
				out = append(out, v.Raw)
			}
		case v.IsObject():
			out = append(out, "{…}")
		default:
			out = append(out, v.Raw) // true, false
		}
		return true
	})
	return out
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
