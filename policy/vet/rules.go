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

	wurl "github.com/nlnwa/whatwg-url/url"
	"github.com/tidwall/gjson"
	"golang.org/x/net/idna"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// Rule is one argument rule of a protocol (in its definition: "toolCalls":{"rules":[...]}).
//
// Path is a gjson path into the call's arguments, walked as Walk describes. A missing value, or a
// JSON null, is a violation unless Optional is set; an empty array has nothing to check.
//
// Exactly one kind of check is set: one of Check's (pattern, oneOf, max/min, pathPrefix, hosts),
// NotPattern, or Not. NotPattern is an RE2 expression the string value must not match ("no card
// numbers in a mail body"); Not holds one check that the value must fail. A negated check still
// refuses a value it cannot judge: a value of the wrong type, a path with a NUL byte or climbing
// out of its start, a URL that does not parse, has user info, an invalid host or a scheme outside
// Schemes.
//
// Tool is "*" (every tool) or one exact tool name.
type Rule struct {
	ID   string `json:"id,omitempty"`
	Tool string `json:"tool"`
	Path string `json:"path"`
	// Check is the rule's value check (its keys sit in the rule's object).
	Check
	NotPattern string `json:"notPattern,omitempty"`
	Not        *Check `json:"not,omitempty"`
	Optional   bool   `json:"optional,omitempty"`
}

// Check is one value check of a Rule, the part that Not negates. Exactly one kind is set:
//   - Pattern: an RE2 regular expression the string value must match (unanchored, as
//     regexp.MatchString; write ^ and $ to anchor it).
//   - OneOf: the allowed JSON values (strings, numbers, booleans); numbers compare by value.
//   - Max and/or Min: inclusive numeric bounds of a number value.
//   - PathPrefix: the value is a file path. NUL bytes are refused, backslashes count as
//     separators, the path is cleaned (path.Clean) and may not climb above its start with "..";
//     it must then be one of the prefixes or lie under one: "/data/x" is under "/data",
//     "/database" is not.
//   - Hosts: the value is a URL (see ParseURL: without a scheme it is read as https). Its scheme
//     must be http or https, or one of Schemes when given; it may not carry user info; its host,
//     lowercased, without a trailing dot and in IDNA ASCII (punycode) form, must match the list
//     (see HostList), and a browser must read the same host (see ReadURL). Ports are not checked.
//
// A number of the arguments is compared as an exact reader reads it (Python's int, Decimal) and
// as a float64 reader does (Go's and TypeScript's SDKs); where the two verdicts differ the value
// cannot be judged and the rule refuses it, negated or not. A bound or a oneOf number is the
// shortest decimal of its float64 (policy.ParseProtocol refuses one that a float64 does not hold as
// written).
type Check struct {
	Pattern    string   `json:"pattern,omitempty"`
	OneOf      []any    `json:"oneOf,omitempty"`
	Max        *float64 `json:"max,omitempty"`
	Min        *float64 `json:"min,omitempty"`
	PathPrefix []string `json:"pathPrefix,omitempty"`
	Hosts      []string `json:"hosts,omitempty"`
	Schemes    []string `json:"schemes,omitempty"`
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
	negate   bool // the value must fail check (notPattern, not)
	check    compiledCheck
}

type compiledCheck struct {
	kind     ruleKind
	re       *regexp.Regexp
	oneOf    []any      // string, ruleNumber or bool
	max, min ruleNumber // absent bounds are infinite
	prefixes []string   // cleaned
	hosts    HostList
	schemes  map[string]bool
}

// CompileRules checks and compiles rules. It reports every problem, each naming the rule and the
// field: `rules[2].pattern: error parsing regexp: ...`.
func CompileRules(rules []Rule) (*RuleSet, error) {
	var errs []error
	set := &RuleSet{rules: make([]compiledRule, 0, len(rules))}
	ids := map[string]int{}
	for i, r := range rules {
		bad := func(field, format string, args ...any) {
			where := fmt.Sprintf("rules[%d]", i)
			if field != "" {
				where += "." + field
			}
			errs = append(errs, fmt.Errorf("%s: "+format, append([]any{where}, args...)...))
		}
		c := compiledRule{name: r.ID, tool: r.Tool, path: r.Path, optional: r.Optional}
		if c.name == "" {
			c.name = fmt.Sprintf("rules[%d]", i)
		} else if j, dup := ids[r.ID]; dup {
			bad("id", "%q is already the id of rules[%d]", r.ID, j)
		} else {
			ids[r.ID] = i
		}
		if r.Tool == "" {
			bad("tool", `required: a tool name, or "*" for every tool`)
		}
		if r.Path == "" {
			bad("path", "required: a gjson path into the arguments, such as url or files.#.path")
		} else if strings.ContainsRune(r.Path, 0) {
			bad("path", "must not contain NUL")
		}
		var kinds []string
		c.check, kinds = compileCheck(r.Check, "", bad)
		if r.NotPattern != "" {
			kinds = append(kinds, "notPattern")
			c.negate = true
			c.check, _ = compileCheck(Check{Pattern: r.NotPattern}, "", func(_, format string, args ...any) {
				bad("notPattern", format, args...)
			})
		}
		if r.Not != nil {
			kinds = append(kinds, "not")
			c.negate = true
			var inner []string
			c.check, inner = compileCheck(*r.Not, "not.", bad)
			if len(inner) != 1 {
				bad("not", "must hold exactly one check: pattern, oneOf, max/min, pathPrefix or hosts")
			}
		}
		switch len(kinds) {
		case 0:
			bad("", "needs one check: pattern, oneOf, max/min, pathPrefix, hosts, notPattern or not")
		case 1:
		default:
			bad("", "has %s: give exactly one check per rule", strings.Join(kinds, " and "))
		}
		set.rules = append(set.rules, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return set, nil
}

// compileCheck compiles the checks set in k (more than one is the caller's error to report: kinds
// names them), reporting problems through bad with field names under prefix.
func compileCheck(k Check, prefix string, bad func(field, format string, args ...any)) (compiledCheck, []string) {
	var c compiledCheck
	var kinds []string
	if k.Pattern != "" {
		kinds = append(kinds, "pattern")
		c.kind = kindPattern
		re, err := regexp.Compile(k.Pattern)
		if err != nil {
			bad(prefix+"pattern", "%w", err)
		}
		c.re = re
	}
	if k.OneOf != nil {
		kinds = append(kinds, "oneOf")
		c.kind = kindOneOf
		if len(k.OneOf) == 0 {
			bad(prefix+"oneOf", "must list at least one value")
		}
		for j, v := range k.OneOf {
			nv, ok := oneOfValue(v)
			if !ok {
				bad(fmt.Sprintf("%soneOf[%d]", prefix, j), "must be a string, a number or a boolean, not %T", v)
			}
			c.oneOf = append(c.oneOf, nv)
		}
	}
	if k.Max != nil || k.Min != nil {
		kinds = append(kinds, "max/min")
		c.kind = kindRange
		c.max, c.min = newRuleNumber(math.Inf(1)), newRuleNumber(math.Inf(-1))
		if k.Max != nil {
			c.max = newRuleNumber(*k.Max)
			if math.IsNaN(*k.Max) {
				bad(prefix+"max", "must be a number")
			}
		}
		if k.Min != nil {
			c.min = newRuleNumber(*k.Min)
			if math.IsNaN(*k.Min) {
				bad(prefix+"min", "must be a number")
			}
		}
		if c.min.f > c.max.f {
			bad(prefix+"min", "must not be greater than max")
		}
	}
	if k.PathPrefix != nil {
		kinds = append(kinds, "pathPrefix")
		c.kind = kindPathPrefix
		if len(k.PathPrefix) == 0 {
			bad(prefix+"pathPrefix", "must list at least one prefix")
		}
		for j, p := range k.PathPrefix {
			cp, why := cleanPath(p)
			if why != "" || p == "" {
				if p == "" {
					why = "is empty"
				}
				bad(fmt.Sprintf("%spathPrefix[%d]", prefix, j), "%q %s: give a directory such as /data", p, why)
				continue
			}
			c.prefixes = append(c.prefixes, cp)
		}
	}
	if k.Hosts != nil {
		kinds = append(kinds, "hosts")
		c.kind = kindHosts
		if len(k.Hosts) == 0 {
			bad(prefix+"hosts", "must list at least one host")
		}
		var badHosts []int
		c.hosts, badHosts = NewHostList(k.Hosts)
		for _, j := range badHosts {
			bad(fmt.Sprintf("%shosts[%d]", prefix, j), "%q is not a host name: give one such as docs.example.com or *.example.com", k.Hosts[j])
		}
		c.schemes = map[string]bool{"http": true, "https": true}
		if k.Schemes != nil {
			c.schemes = map[string]bool{}
			if len(k.Schemes) == 0 {
				bad(prefix+"schemes", "must list at least one scheme, or be left out for http and https")
			}
			for j, s := range k.Schemes {
				if !validScheme(s) {
					bad(fmt.Sprintf("%sschemes[%d]", prefix, j), "%q is not a URL scheme", s)
				}
				c.schemes[strings.ToLower(s)] = true
			}
		}
	} else if k.Schemes != nil {
		bad(prefix+"schemes", "only applies to a hosts rule")
	}
	return c, kinds
}

// HostList is a compiled list of allowed hosts: exact names, and "*.example.com" for every
// subdomain of example.com (not example.com itself). Entries are normalised as NormHost does.
type HostList struct {
	hosts []string // normalised; "*.x" kept as ".x"
}

// NewHostList compiles hosts; bad lists the indexes of the entries that are not host names
// (they are left out of the list).
func NewHostList(hosts []string) (l HostList, bad []int) {
	for j, h := range hosts {
		wild := strings.HasPrefix(h, "*.")
		n, err := NormHost(strings.TrimPrefix(h, "*."))
		if err != nil || strings.Contains(n, "*") {
			bad = append(bad, j)
			continue
		}
		if wild {
			n = "." + n
		}
		l.hosts = append(l.hosts, n)
	}
	return l, bad
}

// Match reports whether a host, already normalised by NormHost, is in the list.
func (l HostList) Match(h string) bool {
	for _, want := range l.hosts {
		if h == want || (want[0] == '.' && strings.HasSuffix(h, want) && len(h) > len(want)) {
			return true
		}
	}
	return false
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

// oneOfValue turns a oneOf entry into a string, a ruleNumber or a bool.
func oneOfValue(v any) (any, bool) {
	nv, ok := normValue(v)
	if f, isNum := nv.(float64); isNum && ok {
		return newRuleNumber(f), !math.IsInf(f, 0)
	}
	return nv, ok
}

// ruleNumber is a number of a rule: its float64, and its exact value (the shortest decimal that
// reads as that float64); exact is nil for an infinite bound.
type ruleNumber struct {
	f     float64
	exact *jsoncheck.Number
}

func newRuleNumber(f float64) ruleNumber {
	b := ruleNumber{f: f}
	if !math.IsInf(f, 0) && !math.IsNaN(f) {
		n, _ := jsoncheck.ReadNumber(strconv.FormatFloat(f, 'g', -1, 64)) // a short exponent
		b.exact = &n
	}
	return b
}

// cmp compares a number of the arguments with the bound as a float64 reader (v.Num) and as an
// exact reader (n) read it; -1, 0 or +1 each.
func (b ruleNumber) cmp(v gjson.Result, n jsoncheck.Number) (float, exact int) {
	switch {
	case v.Num < b.f:
		float = -1
	case v.Num > b.f:
		float = 1
	}
	switch {
	case b.exact != nil:
		exact = n.Cmp(*b.exact)
	case b.f > 0:
		exact = -1
	default:
		exact = 1
	}
	return float, exact
}

// whyReadersDiffer is the reason for a number that float64 and exact readers judge differently.
const whyReadersDiffer = "is a number that float64 and exact readers judge differently"

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
	Walk(gjson.Parse(doc), r.path, func(v gjson.Result, found bool) bool {
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

// Walk calls visit for every value path selects in v, with found false for a missing one; it
// stops, returning false, when visit returns false.
//
// A path component that is exactly "#" walks every element of the array there ("files.#.path":
// the path of every file; "urls.#": every url); an element that lacks the rest of the path counts
// as missing, and a value that is not an array is taken as a one-element list. A value that is an
// array where no "#" asks for one is visited element by element too (recursively). A JSON null is
// missing. Paths with pipes or modifiers are left to gjson whole.
//
// Where the arguments spell a key of the path only in another letter case ("URL" for "url", as
// strings.EqualFold joins them), the readers of the tool disagree: an exact reader finds nothing, a
// case-insensitive one (encoding/json into a struct) finds that key's value. Walk gives both: visit
// is told the value is missing, then given the value the case-insensitive reader finds.
func Walk(v gjson.Result, path string, visit func(v gjson.Result, found bool) bool) bool {
	prefix, rest, split := splitHash(path)
	if !split {
		return at(v, path, visit, func(r gjson.Result) bool { return leaves(r, visit) })
	}
	each := func(arr gjson.Result) bool { return elements(arr, rest, visit) }
	if prefix == "" {
		return each(v)
	}
	return at(v, prefix, visit, each)
}

// at calls each with the value at path in v (gjson's, an exact reader's). Where there is none but a
// case-insensitive reader finds one (caseVariant), visit is first told the value is missing.
func at(v gjson.Result, path string, visit func(gjson.Result, bool) bool, each func(gjson.Result) bool) bool {
	r := v.Get(path)
	if !r.Exists() {
		if alt, ok := caseVariant(v, path); ok {
			return visit(gjson.Result{}, false) && each(alt)
		}
	}
	return each(r)
}

// elements walks rest in every element of arr (arr itself when it is not an array); a missing arr
// is one missing value.
func elements(arr gjson.Result, rest string, visit func(gjson.Result, bool) bool) bool {
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
			ok = Walk(e, rest, visit)
		}
		if !ok {
			return false
		}
	}
	return true
}

// caseVariant finds the value at a plain path (components of keys and array indexes: no wildcard,
// pipe, modifier or query) as a case-insensitive reader does: at each object, the component's key,
// else the key strings.EqualFold joins with it. ok is false when the path is not plain, a component
// is missing, or every key was found exactly.
func caseVariant(v gjson.Result, path string) (r gjson.Result, ok bool) {
	comps, plain := pathComponents(path)
	if !plain {
		return gjson.Result{}, false
	}
	folded := false
	for _, c := range comps {
		switch {
		case v.IsObject():
			var exact, fold gjson.Result
			v.ForEach(func(k, e gjson.Result) bool {
				if k.Str == c {
					exact = e
					return false
				}
				if !fold.Exists() && strings.EqualFold(k.Str, c) {
					fold = e
				}
				return true
			})
			switch {
			case exact.Exists():
				v = exact
			case fold.Exists():
				v, folded = fold, true
			default:
				return gjson.Result{}, false
			}
		case v.IsArray() && c != "" && strings.Trim(c, "0123456789") == "":
			if v = v.Get(c); !v.Exists() {
				return gjson.Result{}, false
			}
		default:
			return gjson.Result{}, false
		}
	}
	return v, folded
}

// pathComponents splits a gjson path at its unescaped dots and removes its escapes; plain is false
// for a path with a wildcard, pipe, modifier or query, or a JSON Lines prefix.
func pathComponents(p string) (comps []string, plain bool) {
	if p == "" || strings.HasPrefix(p, "..") {
		return nil, false
	}
	var c strings.Builder
	for i := 0; i < len(p); i++ {
		switch ch := p[i]; ch {
		case '\\':
			if i+1 < len(p) {
				i++
				c.WriteByte(p[i])
			}
		case '.':
			comps = append(comps, c.String())
			c.Reset()
		case '*', '?', '|', '@', '#', '!':
			return nil, false
		default:
			c.WriteByte(ch)
		}
	}
	return append(comps, c.String()), true
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
	pass, why, invalid := r.check.test(v)
	switch {
	case invalid:
		return why
	case !r.negate:
		if pass {
			return ""
		}
		return why
	case !pass:
		return ""
	}
	switch r.check.kind {
	case kindPattern:
		return "matches the excluded pattern"
	case kindOneOf:
		return "is one of the excluded values"
	case kindRange:
		return "is within the excluded range"
	case kindPathPrefix:
		return "is under an excluded path"
	}
	return "has an excluded host"
}

// testNumberOneOf is oneOf for a number: in the list for a float64 reader and for an exact one
// alike, or out of it for both.
func (c *compiledCheck) testNumberOneOf(v gjson.Result) (pass bool, why string, invalid bool) {
	n, err := jsoncheck.ReadNumber(v.Raw)
	if err != nil {
		return false, whyReadersDiffer, true
	}
	var inFloat, inExact bool
	for _, want := range c.oneOf {
		if b, ok := want.(ruleNumber); ok {
			float, exact := b.cmp(v, n)
			inFloat, inExact = inFloat || float == 0, inExact || exact == 0
		}
	}
	switch {
	case inFloat != inExact:
		return false, whyReadersDiffer, true
	case !inExact:
		return false, "is not one of the allowed values", false
	}
	return true, "", false
}

// testRange is max/min: a number within the bounds for a float64 reader and for an exact one
// alike, or outside them for both.
func (c *compiledCheck) testRange(v gjson.Result) (pass bool, why string, invalid bool) {
	if v.Type != gjson.Number {
		return false, "is not a number", true
	}
	n, err := jsoncheck.ReadNumber(v.Raw)
	if err != nil {
		return false, whyReadersDiffer, true
	}
	aboveF, aboveE := c.max.cmp(v, n)
	belowF, belowE := c.min.cmp(v, n)
	switch {
	case (aboveF > 0) != (aboveE > 0), (belowF < 0) != (belowE < 0):
		return false, whyReadersDiffer, true
	case aboveE > 0:
		return false, "is above the maximum", false
	case belowE < 0:
		return false, "is below the minimum", false
	}
	return true, "", false
}

// test runs the check on one present, non-null value. When it does not pass, why says so;
// invalid is set when the value cannot be judged at all (wrong type, malformed path or URL), which
// a negated check refuses too.
func (c *compiledCheck) test(v gjson.Result) (pass bool, why string, invalid bool) {
	switch c.kind {
	case kindPattern:
		if v.Type != gjson.String {
			return false, "is not a string", true
		}
		if !c.re.MatchString(v.Str) {
			return false, "does not match the pattern", false
		}
	case kindOneOf:
		if v.Type == gjson.Number {
			return c.testNumberOneOf(v)
		}
		for _, want := range c.oneOf {
			switch want := want.(type) {
			case string:
				if v.Type == gjson.String && v.Str == want {
					return true, "", false
				}
			case bool:
				if (v.Type == gjson.True && want) || (v.Type == gjson.False && !want) {
					return true, "", false
				}
			}
		}
		return false, "is not one of the allowed values", false
	case kindRange:
		return c.testRange(v)
	case kindPathPrefix:
		if v.Type != gjson.String {
			return false, "is not a string", true
		}
		cp, why := cleanPath(v.Str)
		if why != "" {
			return false, why, true
		}
		for _, p := range c.prefixes {
			if underPrefix(cp, p) {
				return true, "", false
			}
		}
		return false, "is not under an allowed path", false
	case kindHosts:
		if v.Type != gjson.String {
			return false, "is not a string", true
		}
		return c.checkURL(v.Str)
	}
	return true, "", false
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
func (c *compiledCheck) checkURL(s string) (pass bool, why string, invalid bool) {
	r, bad := ReadURL(s)
	if r.URL == nil {
		return false, bad, true
	}
	if !c.schemes[r.Scheme] {
		if r.Schemeless {
			return false, "has no scheme, and https is not an allowed scheme", true
		}
		return false, "has a scheme that is not allowed", true
	}
	if bad != "" {
		return false, bad, true
	}
	if !c.hosts.Match(r.Host) {
		return false, "has a host that is not allowed", false
	}
	return true, "", false
}

// URLValue is a URL value as ReadURL reads it.
type URLValue struct {
	URL        *url.URL // as net/url parses it (see ParseURL); nil when it does not parse
	Schemeless bool     // written without a scheme, read as https
	Scheme     string   // lower case
	Host       string   // normalised by NormHost; "" when why is set
}

// ReadURL reads a URL value as a hosts rule does: with net/url (see ParseURL), the way an HTTP
// client in Go or Python opens it, and with the WHATWG URL parser, the way a browser does. why
// says what makes the value one a hosts rule cannot judge: "is not a valid url" (URL is nil then),
// "has no host", "has user info", "has an invalid host", or that the two readers disagree on the
// scheme, the user info or the host ("https://3232235777/" is 192.168.1.1 to a browser, a name to
// net/url). Scheme is set whenever URL is.
func ReadURL(s string) (v URLValue, why string) {
	u, schemeless, err := ParseURL(s)
	if err != nil {
		return URLValue{}, "is not a valid url"
	}
	v = URLValue{URL: u, Schemeless: schemeless, Scheme: strings.ToLower(u.Scheme)}
	switch {
	case u.Opaque != "" || u.Host == "":
		return v, "has no host"
	case u.User != nil:
		return v, "has user info"
	}
	h, err := NormHost(u.Hostname())
	if err != nil {
		return v, "has an invalid host"
	}
	if !browserAgrees(s, schemeless, v.Scheme, h) {
		return v, "is read with another host by a browser (readers disagree)"
	}
	v.Host = h
	return v, ""
}

// browserAgrees reports whether the WHATWG URL parser reads s (as https when schemeless) with the
// same scheme, no user info, and the host h once normalised.
func browserAgrees(s string, schemeless bool, scheme, h string) bool {
	if schemeless {
		if !strings.HasPrefix(s, "//") {
			s = "//" + s
		}
		s = "https:" + s
	}
	w, err := wurl.Parse(s)
	if err != nil || strings.TrimSuffix(w.Protocol(), ":") != scheme || w.Username() != "" || w.Password() != "" {
		return false
	}
	wh, err := NormHost(w.Hostname())
	return err == nil && wh == h
}

// ParseURL parses a URL value as a hosts rule reads it. A value with a scheme ("https://x.com",
// "mailto:a@x.com", "javascript:...") is parsed as it is. A value without one is read as https
// (schemeless is true): "www.x.com/login", "x.com", "x.com:8443/a", "//x.com/a". A leading
// "name:" counts as a scheme unless a port follows it ("localhost:8080"), and never when the name
// holds a dot ("x.com:8080"). The URL's host is not normalised; see NormHost.
func ParseURL(s string) (u *url.URL, schemeless bool, err error) {
	if hasScheme(s) {
		u, err = url.Parse(s)
		return u, false, err
	}
	if !strings.HasPrefix(s, "//") {
		s = "//" + s
	}
	u, err = url.Parse("https:" + s)
	return u, true, err
}

// hasScheme reports whether s starts with "scheme:" that is a scheme rather than a host and port.
func hasScheme(s string) bool {
	colon := strings.IndexByte(s, ':')
	if colon <= 0 || !validScheme(s[:colon]) {
		return false
	}
	if strings.HasPrefix(s[colon:], "://") {
		return true
	}
	if strings.Contains(s[:colon], ".") {
		return false
	}
	rest := s[colon+1:]
	return rest == "" || rest[0] < '0' || rest[0] > '9'
}

// NormHost lowercases a host, removes one trailing dot and converts it to IDNA ASCII form (the
// lookup profile, which also maps full-width letters and ideographic full stops); an IP address is
// returned in its canonical form.
func NormHost(h string) (string, error) {
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
