package vet

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"golang.org/x/net/idna"
)

// Rule is one argument rule of a protocol (in its definition: "toolCalls":{"rules":[...]}).
//
// Path is a gjson path into the call's arguments. A component that is exactly "#" walks every
// element of the array there ("files.#.path": the path of every file; "urls.#": every url); an
// element that lacks the rest of the path counts as missing, and a value that is not an array
// is taken as a one-element list. A value that is an array where no "#" asks for one is checked
// element by element too. A missing value, or a JSON null, is a violation unless Optional is set;
// an empty array has nothing to check.
//
// Exactly one kind of check is set:
//   - Pattern: an RE2 regular expression the string value must match (unanchored, as
//     regexp.MatchString; write ^ and $ to anchor it).
//   - OneOf: the allowed JSON values (strings, numbers, booleans); numbers compare by value.
//   - Max and/or Min: inclusive numeric bounds of a number value.
//   - PathPrefix: the value is a file path. NUL bytes are refused, backslashes count as
//     separators, the path is cleaned (path.Clean) and may not climb above its start with "..";
//     it must then be one of the prefixes or lie under one: "/data/x" is under "/data",
//     "/database" is not.
//   - Hosts: the value is an absolute URL (net/url). Its scheme must be http or https, or one of
//     Schemes when given; it may not carry user info; its host, lowercased, without a trailing
//     dot and in IDNA ASCII (punycode) form, must equal a listed host or, for a listed
//     "*.example.com", be a subdomain of example.com (not example.com itself). Ports are not
//     checked.
//
// Tool is "*" (every tool) or one exact tool name.
type Rule struct {
	ID         string   `json:"id,omitempty"`
	Tool       string   `json:"tool"`
	Path       string   `json:"path"`
	Pattern    string   `json:"pattern,omitempty"`
	OneOf      []any    `json:"oneOf,omitempty"`
	Max        *float64 `json:"max,omitempty"`
	Min        *float64 `json:"min,omitempty"`
	PathPrefix []string `json:"pathPrefix,omitempty"`
	Hosts      []string `json:"hosts,omitempty"`
	Schemes    []string `json:"schemes,omitempty"`
	Optional   bool     `json:"optional,omitempty"`
}

// RuleSet is a compiled, immutable list of rules, safe for concurrent use.
type RuleSet struct {
	rules []compiledRule
}

// Len is the number of rules.
func (s *RuleSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

type ruleKind int

const (
	kindPattern ruleKind = iota + 1
	kindOneOf
	kindRange
	kindPathPrefix
	kindHosts
)

type compiledRule struct {
	name     string // ID, or rules[i]
	tool     string
	path     string
	optional bool
	kind     ruleKind

	re       *regexp.Regexp
	oneOf    []any // string, float64 or bool
	max, min float64
	prefixes []string // cleaned
	hosts    []string // normalised; "*.x" kept as ".x"
	schemes  map[string]bool
}

// CompileRules checks and compiles rules. It reports every problem, each naming the rule and the
// field: `rules[2].pattern: error parsing regexp: ...`.
func CompileRules(rules []Rule) (*RuleSet, error) {
	var errs []error
	bad := func(i int, field, format string, args ...any) {
		where := fmt.Sprintf("rules[%d]", i)
		if field != "" {
			where += "." + field
		}
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{where}, args...)...))
	}
	set := &RuleSet{rules: make([]compiledRule, 0, len(rules))}
	ids := map[string]int{}
	for i, r := range rules {
		c := compiledRule{name: r.ID, tool: r.Tool, path: r.Path, optional: r.Optional}
		if c.name == "" {
			c.name = fmt.Sprintf("rules[%d]", i)
		} else if j, dup := ids[r.ID]; dup {
			bad(i, "id", "%q is already the id of rules[%d]", r.ID, j)
		} else {
			ids[r.ID] = i
		}
		if r.Tool == "" {
			bad(i, "tool", `required: a tool name, or "*" for every tool`)
		}
		if r.Path == "" {
			bad(i, "path", "required: a gjson path into the arguments, such as url or files.#.path")
		} else if strings.ContainsRune(r.Path, 0) {
			bad(i, "path", "must not contain NUL")
		}
		var kinds []string
		if r.Pattern != "" {
			kinds = append(kinds, "pattern")
			c.kind = kindPattern
			re, err := regexp.Compile(r.Pattern)
			if err != nil {
				bad(i, "pattern", "%w", err)
			}
			c.re = re
		}
		if r.OneOf != nil {
			kinds = append(kinds, "oneOf")
			c.kind = kindOneOf
			if len(r.OneOf) == 0 {
				bad(i, "oneOf", "must list at least one value")
			}
			for j, v := range r.OneOf {
				nv, ok := normValue(v)
				if !ok {
					bad(i, fmt.Sprintf("oneOf[%d]", j), "must be a string, a number or a boolean, not %T", v)
				}
				c.oneOf = append(c.oneOf, nv)
			}
		}
		if r.Max != nil || r.Min != nil {
			kinds = append(kinds, "max/min")
			c.kind = kindRange
			c.max, c.min = math.Inf(1), math.Inf(-1)
			if r.Max != nil {
				c.max = *r.Max
				if math.IsNaN(c.max) {
					bad(i, "max", "must be a number")
				}
			}
			if r.Min != nil {
				c.min = *r.Min
				if math.IsNaN(c.min) {
					bad(i, "min", "must be a number")
				}
			}
			if c.min > c.max {
				bad(i, "min", "must not be greater than max")
			}
		}
		if r.PathPrefix != nil {
			kinds = append(kinds, "pathPrefix")
			c.kind = kindPathPrefix
			if len(r.PathPrefix) == 0 {
				bad(i, "pathPrefix", "must list at least one prefix")
			}
			for j, p := range r.PathPrefix {
				cp, why := cleanPath(p)
				if why != "" || p == "" {
					if p == "" {
						why = "is empty"
					}
					bad(i, fmt.Sprintf("pathPrefix[%d]", j), "%q %s: give a directory such as /data", p, why)
					continue
				}
				c.prefixes = append(c.prefixes, cp)
			}
		}
		if r.Hosts != nil {
			kinds = append(kinds, "hosts")
			c.kind = kindHosts
			if len(r.Hosts) == 0 {
				bad(i, "hosts", "must list at least one host")
			}
			for j, h := range r.Hosts {
				wild := strings.HasPrefix(h, "*.")
				n, err := normHost(strings.TrimPrefix(h, "*."))
				if err != nil || strings.Contains(n, "*") {
					bad(i, fmt.Sprintf("hosts[%d]", j), "%q is not a host name: give one such as docs.example.com or *.example.com", h)
					continue
				}
				if wild {
					n = "." + n
				}
				c.hosts = append(c.hosts, n)
			}
			c.schemes = map[string]bool{"http": true, "https": true}
			if r.Schemes != nil {
				c.schemes = map[string]bool{}
				if len(r.Schemes) == 0 {
					bad(i, "schemes", "must list at least one scheme, or be left out for http and https")
				}
				for j, s := range r.Schemes {
					if !validScheme(s) {
						bad(i, fmt.Sprintf("schemes[%d]", j), "%q is not a URL scheme", s)
					}
					c.schemes[strings.ToLower(s)] = true
				}
			}
		} else if r.Schemes != nil {
			bad(i, "schemes", "only applies to a hosts rule")
		}
		switch len(kinds) {
		case 0:
			bad(i, "", "needs one check: pattern, oneOf, max/min, pathPrefix or hosts")
		case 1:
		default:
			bad(i, "", "has %s: give exactly one check per rule", strings.Join(kinds, " and "))
		}
		set.rules = append(set.rules, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return set, nil
}

// normValue turns a oneOf entry into a string, float64 or bool.
func normValue(v any) (any, bool) {
	switch v := v.(type) {
	case string, bool:
		return v, true
	case float64:
		return v, !math.IsNaN(v)
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case int32:
		return float64(v), true
	case uint:
		return float64(v), true
	case uint64:
		return float64(v), true
	case interface{ Float64() (float64, error) }: // json.Number
		f, err := v.Float64()
		return f, err == nil
	}
	return nil, false
}

func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// check runs the rules that apply to tool over args (a checked JSON object) and returns the
// first violation.
func (s *RuleSet) check(tool string, args []byte) (reason, rule string) {
	doc := string(args)
	for i := range s.rules {
		r := &s.rules[i]
		if r.tool != "*" && r.tool != tool {
			continue
		}
		if why := r.run(doc); why != "" {
			return "rule " + r.name + ": " + r.path + " " + why, r.name
		}
	}
	return "", ""
}

// run returns why the arguments break the rule, or "".
func (r *compiledRule) run(doc string) string {
	why := ""
	r.walk(gjson.Parse(doc), r.path, func(v gjson.Result, found bool) bool {
		switch {
		case !found:
			if !r.optional {
				why = "is missing"
			}
		default:
			why = r.value(v)
		}
		return why == ""
	})
	return why
}

// walk calls visit for every value the path selects in v (see Rule), with found false for a
// missing one; it stops when visit returns false.
func (r *compiledRule) walk(v gjson.Result, p string, visit func(gjson.Result, bool) bool) bool {
	prefix, rest, split := splitHash(p)
	if !split {
		return leaves(v.Get(p), visit)
	}
	arr := v
	if prefix != "" {
		arr = v.Get(prefix)
	}
	if !arr.Exists() || arr.Type == gjson.Null {
		return visit(gjson.Result{}, false)
	}
	elems := []gjson.Result{arr}
	if arr.IsArray() {
		elems = arr.Array()
	}
	for _, e := range elems {
		var ok bool
		if rest == "" {
			ok = leaves(e, visit)
		} else {
			ok = r.walk(e, rest, visit)
		}
		if !ok {
			return false
		}
	}
	return true
}

// leaves visits v, or every element of v (recursively) when it is an array.
func leaves(v gjson.Result, visit func(gjson.Result, bool) bool) bool {
	if !v.Exists() || v.Type == gjson.Null {
		return visit(gjson.Result{}, false)
	}
	if !v.IsArray() {
		return visit(v, true)
	}
	ok := true
	v.ForEach(func(_, e gjson.Result) bool {
		if e.Type == gjson.Null {
			ok = visit(gjson.Result{}, false)
		} else {
			ok = leaves(e, visit)
		}
		return ok
	})
	return ok
}

// splitHash splits a gjson path at its first component that is exactly "#": "a.#.b" gives
// ("a", "b"), "a.#" gives ("a", ""), "#.b" gives ("", "b"). Paths with pipes or modifiers are
// left to gjson whole.
func splitHash(p string) (prefix, rest string, ok bool) {
	if strings.ContainsAny(p, "|@") {
		return "", "", false
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] == '\\' {
			i++
			continue
		}
		if i == len(p) || p[i] == '.' {
			if p[start:i] == "#" {
				prefix = strings.TrimSuffix(p[:start], ".")
				if i < len(p) {
					rest = p[i+1:]
				}
				return prefix, rest, true
			}
			start = i + 1
		}
	}
	return "", "", false
}

// value checks one present, non-null value.
func (r *compiledRule) value(v gjson.Result) string {
	switch r.kind {
	case kindPattern:
		if v.Type != gjson.String {
			return "is not a string"
		}
		if !r.re.MatchString(v.Str) {
			return "does not match the pattern"
		}
	case kindOneOf:
		for _, want := range r.oneOf {
			switch want := want.(type) {
			case string:
				if v.Type == gjson.String && v.Str == want {
					return ""
				}
			case float64:
				if v.Type == gjson.Number && v.Num == want {
					return ""
				}
			case bool:
				if (v.Type == gjson.True && want) || (v.Type == gjson.False && !want) {
					return ""
				}
			}
		}
		return "is not one of the allowed values"
	case kindRange:
		if v.Type != gjson.Number {
			return "is not a number"
		}
		if v.Num > r.max {
			return "is above the maximum"
		}
		if v.Num < r.min {
			return "is below the minimum"
		}
	case kindPathPrefix:
		if v.Type != gjson.String {
			return "is not a string"
		}
		cp, why := cleanPath(v.Str)
		if why != "" {
			return why
		}
		for _, p := range r.prefixes {
			if underPrefix(cp, p) {
				return ""
			}
		}
		return "is not under an allowed path"
	case kindHosts:
		if v.Type != gjson.String {
			return "is not a string"
		}
		return r.checkURL(v.Str)
	}
	return ""
}

// cleanPath cleans a file path; why is set when it must be refused.
func cleanPath(p string) (clean, why string) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", "contains a NUL byte"
	}
	c := path.Clean(strings.ReplaceAll(p, `\`, "/"))
	if c == ".." || strings.HasPrefix(c, "../") || c == "/.." {
		return "", "climbs out of its directory"
	}
	return c, ""
}

// underPrefix reports whether the cleaned path p is prefix or lies under it.
func underPrefix(p, prefix string) bool {
	if prefix == "/" {
		return strings.HasPrefix(p, "/")
	}
	if prefix == "." {
		return !strings.HasPrefix(p, "/")
	}
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// checkURL checks a URL value of a hosts rule.
func (r *compiledRule) checkURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "is not a valid url"
	}
	if !r.schemes[strings.ToLower(u.Scheme)] {
		return "has a scheme that is not allowed"
	}
	if u.Opaque != "" || u.Host == "" {
		return "has no host"
	}
	if u.User != nil {
		return "has user info"
	}
	h, err := normHost(u.Hostname())
	if err != nil {
		return "has an invalid host"
	}
	for _, want := range r.hosts {
		if h == want || (want[0] == '.' && strings.HasSuffix(h, want) && len(h) > len(want)) {
			return ""
		}
	}
	return "has a host that is not allowed"
}

// normHost lowercases a host, removes one trailing dot and converts it to IDNA ASCII form; an IP
// address is returned in its canonical form.
func normHost(h string) (string, error) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" {
		return "", errors.New("empty host")
	}
	if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
		return ip.String(), nil
	}
	a, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("host %s: %w", strconv.Quote(h), err)
	}
	if a == "" || strings.HasSuffix(a, ".") {
		return "", errors.New("empty label")
	}
	return a, nil
}
