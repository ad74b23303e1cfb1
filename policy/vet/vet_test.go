package vet

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func f(v float64) *float64 { return &v }

// rulesFromJSON decodes rules as a protocol definition holds them.
func rulesFromJSON(t testing.TB, s string) []Rule {
	t.Helper()
	var rs []Rule
	if err := json.Unmarshal([]byte(s), &rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

func mustRules(t testing.TB, rs []Rule) *RuleSet {
	t.Helper()
	set, err := CompileRules(rs)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestRules(t *testing.T) {
	rules := rulesFromJSON(t, `[
	  {"id":"docs","tool":"web_fetch","path":"url","pattern":"^https://docs\\.example\\.com/"},
	  {"id":"mode","tool":"set_mode","path":"mode","oneOf":["fast","safe",3,true]},
	  {"id":"count","tool":"repeat","path":"n","max":10,"min":1},
	  {"id":"files","tool":"read_file","path":"path","pathPrefix":["/data","/srv/app/"]},
	  {"id":"many","tool":"read_files","path":"files.#.path","pathPrefix":["/data"]},
	  {"id":"hosts","tool":"fetch","path":"url","hosts":["api.example.com","*.example.org","bücher.de","127.0.0.1"]},
	  {"id":"ftp","tool":"ftp","path":"url","hosts":["ftp.example.com"],"schemes":["ftp"]},
	  {"id":"opt","tool":"opt","path":"limit","max":5,"optional":true},
	  {"tool":"*","path":"urls.#","hosts":["ok.example.com"],"optional":true},
	  {"id":"nested","tool":"nested","path":"a.#.b.#.c","oneOf":["x"]},
	  {"id":"arr","tool":"arr","path":"tags","pattern":"^[a-z]+$"},
	  {"id":"nocard","tool":"mail","path":"body","notPattern":"\\b(?:\\d[ -]?){13,16}\\b"},
	  {"id":"notregion","tool":"deploy","path":"region","not":{"oneOf":["us-east-1"]}},
	  {"id":"notbig","tool":"pay","path":"amount","not":{"min":1000}},
	  {"id":"notetc","tool":"read","path":"path","not":{"pathPrefix":["/etc"]}},
	  {"id":"notevil","tool":"get","path":"url","not":{"hosts":["evil.net","*.evil.net"]}},
	  {"id":"plainhttp","tool":"plain","path":"url","hosts":["www.example.com"],"schemes":["http"]}
	]`)
	set := mustRules(t, rules)
	allowed := map[string]bool{}
	for _, r := range rules {
		allowed[r.Tool] = true
	}
	for _, n := range []string{"a", "b"} {
		allowed[n] = true
	}
	c := NewChecker(Policy{Allowed: allowed, Rules: set})
	for _, tc := range []struct {
		tool, args, reason string
	}{
		// pattern
		{"web_fetch", `{"url":"https://docs.example.com/x"}`, ""},
		{"web_fetch", `{"url":"https://docs.example.com.evil.net/"}`, "rule docs: url does not match the pattern"},
		{"web_fetch", `{"url":"http://docs.example.com/"}`, "rule docs: url does not match the pattern"},
		{"web_fetch", `{"url":42}`, "rule docs: url is not a string"},
		{"web_fetch", `{"u\u0072l":"https://evil.net/"}`, "rule docs: url does not match the pattern"},
		{"web_fetch", `{"other":1}`, "rule docs: url is missing"},
		{"web_fetch", `{"url":null}`, "rule docs: url is missing"},
		// oneOf
		{"set_mode", `{"mode":"fast"}`, ""},
		{"set_mode", `{"mode":3.0}`, ""},
		{"set_mode", `{"mode":true}`, ""},
		{"set_mode", `{"mode":"Fast"}`, "rule mode: mode is not one of the allowed values"},
		{"set_mode", `{"mode":"3"}`, "rule mode: mode is not one of the allowed values"},
		{"set_mode", `{"mode":false}`, "rule mode: mode is not one of the allowed values"},
		{"set_mode", `{"mode":{"x":1}}`, "rule mode: mode is not one of the allowed values"},
		{"set_mode", `{"mode":["fast","slow"]}`, "rule mode: mode is not one of the allowed values"},
		{"set_mode", `{"mode":["fast","safe"]}`, ""},
		// max / min
		{"repeat", `{"n":10}`, ""},
		{"repeat", `{"n":1}`, ""},
		{"repeat", `{"n":10.5}`, "rule count: n is above the maximum"},
		{"repeat", `{"n":1e3}`, "rule count: n is above the maximum"},
		{"repeat", `{"n":0}`, "rule count: n is below the minimum"},
		{"repeat", `{"n":-5}`, "rule count: n is below the minimum"},
		{"repeat", `{"n":"5"}`, "rule count: n is not a number"},
		// pathPrefix
		{"read_file", `{"path":"/data"}`, ""},
		{"read_file", `{"path":"/data/x/y.txt"}`, ""},
		{"read_file", `{"path":"/data/./x/../y"}`, ""},
		{"read_file", `{"path":"/srv/app/main.go"}`, ""},
		{"read_file", `{"path":"//data//x"}`, ""},
		{"read_file", `{"path":"/database/x"}`, "rule files: path is not under an allowed path"},
		{"read_file", `{"path":"/data/../etc/passwd"}`, "rule files: path is not under an allowed path"},
		{"read_file", `{"path":"/data\\..\\etc\\passwd"}`, "rule files: path is not under an allowed path"},
		{"read_file", `{"path":"/data/x\u0000.txt"}`, "rule files: path contains a NUL byte"},
		{"read_file", `{"path":"../data/x"}`, "rule files: path climbs out of its directory"},
		{"read_file", `{"path":"data/x"}`, "rule files: path is not under an allowed path"},
		{"read_file", `{"path":"/srv/application"}`, "rule files: path is not under an allowed path"},
		{"read_file", `{"path":["/data/a","/data/b"]}`, ""},
		{"read_file", `{"path":["/data/a","/etc/b"]}`, "rule files: path is not under an allowed path"},
		{"read_file", `{"path":7}`, "rule files: path is not a string"},
		// arrays with #
		{"read_files", `{"files":[{"path":"/data/a"},{"path":"/data/b"}]}`, ""},
		{"read_files", `{"files":[]}`, ""},
		{"read_files", `{"files":[{"path":"/data/a"},{"path":"/etc/b"}]}`, "rule many: files.#.path is not under an allowed path"},
		{"read_files", `{"files":[{"path":"/data/a"},{"pth":"/etc/b"}]}`, "rule many: files.#.path is missing"},
		{"read_files", `{"files":{"path":"/etc/b"}}`, "rule many: files.#.path is not under an allowed path"},
		{"read_files", `{}`, "rule many: files.#.path is missing"},
		{"nested", `{"a":[{"b":[{"c":"x"},{"c":"x"}]},{"b":[{"c":"x"}]}]}`, ""},
		{"nested", `{"a":[{"b":[{"c":"x"},{"c":"y"}]}]}`, "rule nested: a.#.b.#.c is not one of the allowed values"},
		{"arr", `{"tags":["a","b"]}`, ""},
		{"arr", `{"tags":["a",["b","C"]]}`, "rule arr: tags does not match the pattern"},
		{"arr", `{"tags":["a",null]}`, "rule arr: tags is missing"},
		// hosts
		{"fetch", `{"url":"https://api.example.com/v1"}`, ""},
		{"fetch", `{"url":"HTTP://API.EXAMPLE.COM./v1"}`, ""},
		{"fetch", `{"url":"https://api.example.com:8443/"}`, ""},
		{"fetch", `{"url":"https://a.b.example.org/"}`, ""},
		{"fetch", `{"url":"https://xn--bcher-kva.de/"}`, ""},
		{"fetch", `{"url":"https://BÜCHER.de/"}`, ""},
		{"fetch", `{"url":"http://127.0.0.1/"}`, ""},
		{"fetch", `{"url":"https://example.org/"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"https://evilexample.org/"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"https://api.example.com.evil.net/"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"https://api.example.com@evil.net/"}`, "rule hosts: url has user info"},
		{"fetch", `{"url":"https://user:pw@api.example.com/"}`, "rule hosts: url has user info"},
		{"fetch", `{"url":"https://evil.net\\@api.example.com/"}`, "rule hosts: url is not a valid url"},
		{"fetch", `{"url":"ftp://api.example.com/"}`, "rule hosts: url has a scheme that is not allowed"},
		{"fetch", `{"url":"javascript:alert(1)"}`, "rule hosts: url has a scheme that is not allowed"},
		// without a scheme: read as https, refused for the real reason
		{"fetch", `{"url":"//api.example.com/"}`, ""},
		{"fetch", `{"url":"api.example.com"}`, ""},
		{"fetch", `{"url":"api.example.com/v1?x=1"}`, ""},
		{"fetch", `{"url":"api.example.com:8443/v1"}`, ""},
		{"fetch", `{"url":"www.example.com/login"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"evil.net"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"localhost:8080/x"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"evil.net@api.example.com"}`, "rule hosts: url has user info"},
		{"fetch", `{"url":"api.example.com@evil.net/"}`, "rule hosts: url has user info"},
		{"fetch", `{"url":"mailto:a@api.example.com"}`, "rule hosts: url has a scheme that is not allowed"},
		{"fetch", `{"url":""}`, "rule hosts: url has no host"},
		{"fetch", `{"url":"bad host.com"}`, "rule hosts: url is not a valid url"},
		{"plain", `{"url":"http://www.example.com/"}`, ""},
		{"plain", `{"url":"www.example.com/login"}`, "rule plainhttp: url has no scheme, and https is not an allowed scheme"},
		{"fetch", `{"url":"https:api.example.com"}`, "rule hosts: url has no host"},
		{"fetch", `{"url":"https:///x"}`, "rule hosts: url has no host"},
		{"fetch", `{"url":"https://api.exa mple.com/"}`, "rule hosts: url is not a valid url"},
		{"fetch", `{"url":"https://ex%61mple.org/"}`, "rule hosts: url is not a valid url"},
		{"fetch", `{"url":"https://аpi.example.com/"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"https://127.0.0.2/"}`, "rule hosts: url has a host that is not allowed"},
		{"fetch", `{"url":"https://2130706433/"}`, "rule hosts: url is read with another host by a browser (readers disagree)"},
		{"fetch", `{"url":7}`, "rule hosts: url is not a string"},
		{"ftp", `{"url":"FTP://ftp.example.com/a"}`, ""},
		{"ftp", `{"url":"https://ftp.example.com/a"}`, "rule ftp: url has a scheme that is not allowed"},
		// optional, and "*" rules
		{"opt", `{}`, ""},
		{"opt", `{"limit":null}`, ""},
		{"opt", `{"limit":6}`, "rule opt: limit is above the maximum"},
		{"a", `{"urls":["https://ok.example.com/"]}`, ""},
		{"b", `{"urls":["https://ok.example.com/","https://evil.net/"]}`, "rule rules[8]: urls.# has a host that is not allowed"},
		{"b", `{"urls":"https://evil.net/"}`, "rule rules[8]: urls.# has a host that is not allowed"},
		{"b", `{}`, ""},
		// notPattern and not: the value must fail the check; a value the check cannot judge is
		// refused
		{"mail", `{"body":"invoice 2024-77 attached"}`, ""},
		{"mail", `{"body":"card 4111 1111 1111 1111 exp 12/29"}`, "rule nocard: body matches the excluded pattern"},
		{"mail", `{"body":["ok","4111111111111111"]}`, "rule nocard: body matches the excluded pattern"},
		{"mail", `{"body":4111111111111111}`, "rule nocard: body is not a string"},
		{"mail", `{}`, "rule nocard: body is missing"},
		{"deploy", `{"region":"eu-west-1"}`, ""},
		{"deploy", `{"region":7}`, ""},
		{"deploy", `{"region":"us-east-1"}`, "rule notregion: region is one of the excluded values"},
		{"pay", `{"amount":999.5}`, ""},
		{"pay", `{"amount":1000}`, "rule notbig: amount is within the excluded range"},
		{"pay", `{"amount":"5"}`, "rule notbig: amount is not a number"},
		{"read", `{"path":"/srv/x"}`, ""},
		{"read", `{"path":"/etc/passwd"}`, "rule notetc: path is under an excluded path"},
		{"read", `{"path":"/srv/../etc/passwd"}`, "rule notetc: path is under an excluded path"},
		{"read", `{"path":"../../etc/passwd"}`, "rule notetc: path climbs out of its directory"},
		{"read", `{"path":"/srv/\u0000"}`, "rule notetc: path contains a NUL byte"},
		{"get", `{"url":"https://docs.example.com/"}`, ""},
		{"get", `{"url":"docs.example.com/a"}`, ""},
		{"get", `{"url":"https://a.evil.net/"}`, "rule notevil: url has an excluded host"},
		{"get", `{"url":"EVIL.NET./x"}`, "rule notevil: url has an excluded host"},
		{"get", `{"url":"ftp://docs.example.com/"}`, "rule notevil: url has a scheme that is not allowed"},
		{"get", `{"url":"https://x@docs.example.com/"}`, "rule notevil: url has user info"},
		{"get", `{"url":"https://ex%61mple.org/"}`, "rule notevil: url is not a valid url"},
	} {
		reason, rule, ok := c.Check(tc.tool, []byte(tc.args))
		if reason != tc.reason || ok != (tc.reason == "") {
			t.Errorf("%s %s: got %q (ok %v), want %q", tc.tool, tc.args, reason, ok, tc.reason)
			continue
		}
		if tc.reason != "" {
			wantRule := strings.TrimPrefix(strings.SplitN(tc.reason, ":", 2)[0], "rule ")
			if rule != wantRule {
				t.Errorf("%s %s: rule %q, want %q", tc.tool, tc.args, rule, wantRule)
			}
		}
	}
}

func TestCheckNamesAndArguments(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"city":{"type":"string","pattern":"^[A-Z]"},
	  "unit":{"enum":["c","f"]},"days":{"type":"integer","maximum":7},"secret":{"type":"string","maxLength":3}},
	  "required":["city"],"additionalProperties":false}`)
	c := NewChecker(Policy{
		Allowed: map[string]bool{"get_weather": true, "free": true, "broken": true, "reffile": true, "deep": true},
		Schemas: map[string][]byte{
			"get_weather": schema,
			"broken":      []byte(`{"type":"object","properties":{"a":{"pattern":"("}}}`),
			"reffile":     []byte(`{"$ref":"file:///etc/passwd"}`),
			"free":        []byte("  "),
		},
		MaxDepth: 3,
	})
	for _, tc := range []struct {
		name, tool, args, reason string
	}{
		{"ok", "get_weather", `{"city":"Zürich","unit":"c","days":3}`, ""},
		{"no schema", "free", `{"anything":[1,2,{"x":null}]}`, ""},
		{"case", "Get_weather", `{"city":"Bern"}`, ReasonNotAllowed},
		{"upper", "GET_WEATHER", `{"city":"Bern"}`, ReasonNotAllowed},
		{"trailing space", "get_weather ", `{"city":"Bern"}`, ReasonNotAllowed},
		{"leading space", " get_weather", `{"city":"Bern"}`, ReasonNotAllowed},
		{"zero width", "get_weather\u200b", `{"city":"Bern"}`, ReasonNotAllowed},
		{"zero width inside", "get_\u200bweather", `{"city":"Bern"}`, ReasonNotAllowed},
		{"cyrillic a", "get_weаther", `{"city":"Bern"}`, ReasonNotAllowed},
		{"fullwidth", "ｇet_weather", `{"city":"Bern"}`, ReasonNotAllowed},
		{"empty name", "", `{}`, ReasonNotAllowed},
		{"unknown", "rm_rf", `{}`, ReasonNotAllowed},
		{"empty args", "free", ``, "arguments are not valid json: empty"},
		{"blank args", "free", "  \n", "arguments are not valid json: empty"},
		{"array", "free", `[{"a":1}]`, ReasonNotObject},
		{"string", "free", `"{\"a\":1}"`, ReasonNotObject},
		{"number", "free", `42`, ReasonNotObject},
		{"null", "free", `null`, ReasonNotObject},
		{"true", "free", `true`, ReasonNotObject},
		{"truncated", "free", `{"a":"hunter2`, "arguments are not valid json: syntax error at offset 5"},
		{"two objects", "free", `{"a":1}{"a":2}`, "arguments are not valid json: syntax error at offset 7"},
		{"trailing garbage", "free", `{"a":1} x`, "arguments are not valid json: syntax error at offset 8"},
		{"bad utf8", "free", "{\"a\":\"\xff\"}", "arguments are not valid json: invalid UTF-8 at offset 6"},
		{"lone surrogate", "free", `{"a":"\ud800"}`, "arguments are not valid json: invalid UTF-8 at offset 6"},
		{"duplicate key", "free", `{"a":1,"a":2}`, "arguments are not valid json: duplicate key at offset 7"},
		{"duplicate escaped key", "free", `{"path":"/ok","p\u0061th":"/etc"}`, "arguments are not valid json: duplicate key at offset 14"},
		{"duplicate nested key", "free", `{"x":{"b":1,"b":1}}`, "arguments are not valid json: duplicate key at offset 12"},
		{"too deep", "deep", `{"a":{"b":{"c":{}}}}`, "arguments are not valid json: nesting too deep at offset 15"},
		{"case variant", "free", `{"recipient":"DE1","amount":120,"RECIPIENT":"GB2"}`, reasonCaseVariant + "at offset 32"},
		{"case variant escaped", "free", `{"url":"/ok","\u0055RL":"/etc"}`, reasonCaseVariant + "at offset 13"},
		{"kelvin sign", "free", `{"kind":"a","\u212aind":"b"}`, reasonCaseVariant + "at offset 12"},
		{"long s", "free", `{"subject":"a","ſubject":"b"}`, reasonCaseVariant + "at offset 15"},
		{"final sigma", "free", `{"σ":1,"ς":2}`, reasonCaseVariant + "at offset 8"},
		{"case variant in an array", "free", `{"to":[{"x":1,"X":2}]}`, reasonCaseVariant + "at offset 14"},
		{"case variant before the schema", "get_weather", `{"city":"Bern","City":"hunter2"}`, reasonCaseVariant + "at offset 15"},
		{"dotless i is another letter", "free", `{"i":1,"ı":2,"İ":3}`, ""},
		{"case variants in sibling objects", "free", `{"a":{"to":1},"b":{"TO":2}}`, ""},
		{"missing required", "get_weather", `{"unit":"c"}`, "arguments do not match schema: at #: missing property 'city'"},
		{"wrong type", "get_weather", `{"city":5}`, "arguments do not match schema: at #/properties/city: got number, want string"},
		{"pattern", "get_weather", `{"city":"hunter2"}`, "arguments do not match schema: at #/properties/city: pattern"},
		{"enum", "get_weather", `{"city":"Bern","unit":"k"}`, "arguments do not match schema: at #/properties/unit: value must be one of 'c', 'f'"},
		{"maximum", "get_weather", `{"city":"Bern","days":99}`, "arguments do not match schema: at #/properties/days: maximum"},
		{"maxLength", "get_weather", `{"city":"Bern","secret":"hunter2"}`, "arguments do not match schema: at #/properties/secret: maxLength"},
		{"additional", "get_weather", `{"city":"Bern","x":1}`, "arguments do not match schema: at #: additional properties not allowed"},
		{"schema does not compile", "broken", `{"a":"x"}`, ReasonSchemaCompile},
		{"schema ref to a file", "reffile", `{}`, ReasonSchemaCompile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, _, ok := c.Check(tc.tool, []byte(tc.args))
			if reason != tc.reason || ok != (tc.reason == "") {
				t.Fatalf("got %q (ok %v), want %q", reason, ok, tc.reason)
			}
			if strings.Contains(reason, "hunter2") || strings.Contains(reason, "/etc") {
				t.Fatalf("reason leaks an argument value: %q", reason)
			}
		})
	}
}

func TestCompileRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		rules string
		want  []string
	}{
		{`[{"tool":"a","path":"x","pattern":"("}]`, []string{"rules[0].pattern: error parsing regexp: missing closing ): `(`"}},
		{`[{"tool":"a","path":"x"},{"tool":"a","path":"x","pattern":"[z-a]"}]`, []string{
			"rules[0]: needs one check: pattern, oneOf, max/min, pathPrefix, hosts, notPattern or not",
			"rules[1].pattern: error parsing regexp: invalid character class range: `z-a`"}},
		{`[{"path":"x","max":1}]`, []string{`rules[0].tool: required: a tool name, or "*" for every tool`}},
		{`[{"tool":"a","max":1}]`, []string{"rules[0].path: required"}},
		{`[{"tool":"a","path":"x","max":1,"pattern":"a"}]`, []string{"rules[0]: has pattern and max/min: give exactly one check per rule"}},
		{`[{"tool":"a","path":"x","max":1,"min":2}]`, []string{"rules[0].min: must not be greater than max"}},
		{`[{"tool":"a","path":"x","oneOf":[]}]`, []string{"rules[0].oneOf: must list at least one value"}},
		{`[{"tool":"a","path":"x","oneOf":["a",{"b":1},null]}]`, []string{
			"rules[0].oneOf[1]: must be a string, a number or a boolean, not map[string]interface {}",
			"rules[0].oneOf[2]: must be a string, a number or a boolean, not <nil>"}},
		{`[{"tool":"a","path":"x","pathPrefix":["","/a\u0000b","../up"]}]`, []string{
			`rules[0].pathPrefix[0]: "" is empty`, `rules[0].pathPrefix[1]: "/a\x00b" contains a NUL byte`,
			`rules[0].pathPrefix[2]: "../up" climbs out of its directory`}},
		{`[{"tool":"a","path":"x","hosts":["ok.com","bad host","*.","a.*.com"]}]`, []string{
			`rules[0].hosts[1]: "bad host" is not a host name`, `rules[0].hosts[2]: "*." is not a host name`,
			`rules[0].hosts[3]: "a.*.com" is not a host name`}},
		{`[{"tool":"a","path":"x","hosts":["ok.com"],"schemes":["1http",""]}]`, []string{
			`rules[0].schemes[0]: "1http" is not a URL scheme`, `rules[0].schemes[1]: "" is not a URL scheme`}},
		{`[{"tool":"a","path":"x","pattern":"a","schemes":["ftp"]}]`, []string{"rules[0].schemes: only applies to a hosts rule"}},
		{`[{"tool":"a","path":"x","notPattern":"("}]`, []string{"rules[0].notPattern: error parsing regexp: missing closing ): `(`"}},
		{`[{"tool":"a","path":"x","notPattern":"a","pattern":"b"}]`, []string{"rules[0]: has pattern and notPattern: give exactly one check per rule"}},
		{`[{"tool":"a","path":"x","not":{}}]`, []string{"rules[0].not: must hold exactly one check"}},
		{`[{"tool":"a","path":"x","not":{"pattern":"a","oneOf":["b"]}}]`, []string{"rules[0].not: must hold exactly one check"}},
		{`[{"tool":"a","path":"x","not":{"hosts":["bad host"],"schemes":[]}}]`, []string{
			`rules[0].not.hosts[0]: "bad host" is not a host name`, "rules[0].not.schemes: must list at least one scheme"}},
		{`[{"tool":"a","path":"x","not":{"max":1,"min":2}}]`, []string{"rules[0].not.min: must not be greater than max"}},
		{`[{"tool":"a","path":"x","hosts":["a.com"],"not":{"pattern":"x"}}]`, []string{"rules[0]: has hosts and not: give exactly one check per rule"}},
		{`[{"id":"r","tool":"a","path":"x","pattern":"a"},{"id":"r","tool":"a","path":"y","pattern":"a"}]`, []string{
			`rules[1].id: "r" is already the id of rules[0]`}},
	} {
		_, err := CompileRules(rulesFromJSON(t, tc.rules))
		if err == nil {
			t.Errorf("%s: no error", tc.rules)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tc.want) {
			t.Errorf("%s: got %d errors: %v", tc.rules, len(lines), err)
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%s: error %d = %q, want prefix %q", tc.rules, i, lines[i], w)
			}
		}
	}
	// Rules built in Go work too.
	if _, err := CompileRules([]Rule{{Tool: "a", Path: "n", Check: Check{Max: f(3)}}, {Tool: "a", Path: "m", Check: Check{OneOf: []any{1, "x", true}}}}); err != nil {
		t.Fatal(err)
	}
	if set, err := CompileRules(nil); err != nil || set.Len() != 0 {
		t.Fatalf("nil rules: %v %v", set, err)
	}
}

func TestVet(t *testing.T) {
	mk := func(choice int, id, name, args string) *Call {
		c := &Call{Choice: choice, ID: id}
		c.AddName(name)
		c.AppendArgs(args)
		return c
	}
	allowed := map[string]bool{"a": true, "b": true}
	t.Run("ids", func(t *testing.T) {
		c := NewChecker(Policy{Allowed: allowed})
		for _, tc := range []struct {
			call   *Call
			reason string
		}{
			{mk(0, "call_1", "a", `{}`), ""},
			{mk(0, "", "a", `{}`), ReasonMissingID},
			{mk(0, "call_1", "a", `{}`), ReasonDuplicateID},
			{mk(1, "call_1", "a", `{}`), ""}, // ids are per choice
			{&Call{Legacy: true, Name: "b", Args: []byte(`{}`)}, ""},
			{&Call{Legacy: true, Name: "b", Args: []byte(`{}`)}, ""},
		} {
			d := c.Vet(tc.call)
			if d.Reason != tc.reason || d.Kind != KindToolCall || (d.Verdict == VerdictAllowed) != (tc.reason == "") {
				t.Errorf("%+v: got %+v, want %q", tc.call, d, tc.reason)
			}
		}
	})
	t.Run("name changed", func(t *testing.T) {
		c := NewChecker(Policy{Allowed: allowed})
		call := mk(0, "x", "a", `{}`)
		call.AddName("")
		if d := c.Vet(call); d.Verdict != VerdictAllowed {
			t.Fatalf("an empty name fragment is not a change: %+v", d)
		}
		call = mk(0, "y", "a", `{}`)
		call.AddName("b")
		if d := c.Vet(call); d.Reason != ReasonNameChanged || d.Tool != "a" {
			t.Fatalf("got %+v", d)
		}
		call = mk(0, "z", "a", `{}`)
		call.AddName("a")
		if d := c.Vet(call); d.Reason != ReasonNameChanged {
			t.Fatalf("a repeated name is a change: %+v", d)
		}
	})
	t.Run("modes and batches", func(t *testing.T) {
		for _, tc := range []struct {
			mode     Mode
			atomic   bool
			verdicts []Verdict
			reasons  []string
		}{
			{ModeRefuse, false, []Verdict{"allowed", "blocked", "allowed"}, []string{"", ReasonNotAllowed, ""}},
			{"", false, []Verdict{"allowed", "blocked", "allowed"}, []string{"", ReasonNotAllowed, ""}},
			{ModeError, false, []Verdict{"allowed", "blocked", "allowed"}, []string{"", ReasonNotAllowed, ""}},
			{ModeAudit, false, []Verdict{"allowed", "audited", "allowed"}, []string{"", ReasonNotAllowed, ""}},
			{ModeRefuse, true, []Verdict{"blocked", "blocked", "blocked"}, []string{ReasonBatch, ReasonNotAllowed, ReasonBatch}},
			{ModeAudit, true, []Verdict{"allowed", "audited", "allowed"}, []string{"", ReasonNotAllowed, ""}},
			{"bogus", false, []Verdict{"allowed", "blocked", "allowed"}, []string{"", ReasonNotAllowed, ""}},
		} {
			c := NewChecker(Policy{Allowed: allowed, Mode: tc.mode, Atomic: tc.atomic})
			ds := c.VetBatch([]*Call{mk(0, "1", "a", `{}`), mk(0, "2", "evil", `{}`), mk(0, "3", "b", `{}`)})
			for i, d := range ds {
				if d.Verdict != tc.verdicts[i] || d.Reason != tc.reasons[i] {
					t.Errorf("mode %q atomic %v call %d: got %s %q", tc.mode, tc.atomic, i, d.Verdict, d.Reason)
				}
			}
		}
		if NewChecker(Policy{Mode: "bogus"}).Mode() != ModeError {
			t.Error("an unknown mode must fail closed as error")
		}
	})
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeRefuse, "refuse": ModeRefuse, "error": ModeError, "audit": ModeAudit} {
		if m, err := ParseMode(in); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, m, err)
		}
	}
	if _, err := ParseMode("Refuse"); err == nil {
		t.Error("modes are case-sensitive")
	}
}

func TestNotice(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"get_weather", "[promptgate] blocked tool call get_weather: tool not allowed"},
		{"get_weather\u200b", `[promptgate] blocked tool call "get_weather\u200b": tool not allowed`},
		{"get_weаther", `[promptgate] blocked tool call "get_we\u0430ther": tool not allowed`},
		{"a b\n", `[promptgate] blocked tool call "a b\n": tool not allowed`},
		{"", `[promptgate] blocked tool call "": tool not allowed`},
		{strings.Repeat("x", 65), `[promptgate] blocked tool call "` + strings.Repeat("x", 64) + `"…: tool not allowed`},
	} {
		if got := Notice(Decision{Tool: tc.name, Reason: ReasonNotAllowed}); got != tc.want {
			t.Errorf("Notice(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSplitHash(t *testing.T) {
	for _, tc := range []struct {
		in, prefix, rest string
		ok               bool
	}{
		{"a.#.b", "a", "b", true},
		{"a.#", "a", "", true},
		{"#.b", "", "b", true},
		{"#", "", "", true},
		{"a.b", "", "", false},
		{`a\.#.b`, "", "", false},
		{"a.#(b=1).c", "", "", false},
		{"a.#.b.#.c", "a", "b.#.c", true},
		{"a|#", "", "", false},
	} {
		p, r, ok := splitHash(tc.in)
		if p != tc.prefix || r != tc.rest || ok != tc.ok {
			t.Errorf("splitHash(%q) = %q %q %v", tc.in, p, r, ok)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	c := NewChecker(Policy{
		Allowed: map[string]bool{"fetch": true},
		Schemas: map[string][]byte{"fetch": []byte(`{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`)},
		Rules:   mustRules(b, rulesFromJSON(b, `[{"tool":"fetch","path":"url","hosts":["*.example.com"]}]`)),
	})
	args := []byte(`{"url":"https://docs.example.com/a/b?c=d"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := c.Check("fetch", args); !ok {
			b.Fatal("blocked")
		}
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(`[{"tool":"*","path":"url","hosts":["*.example.com"]},{"tool":"t","path":"files.#.path","pathPrefix":["/data"]}]`,
		"t", []byte(`{"url":"https://a.example.com/","files":[{"path":"/data/x"}]}`))
	f.Add(`[{"tool":"t","path":"n","max":3,"min":1},{"tool":"t","path":"m","oneOf":["a",1,true]}]`, "t", []byte(`{"n":2,"m":"a"}`))
	f.Add(`[{"tool":"t","path":"a.#.b.#","pattern":"^x"}]`, "t", []byte(`{"a":[{"b":["x",["xy"]]}]}`))
	f.Add(`[]`, "t", []byte(`{"a":{"a":1,"a":2}}`))
	f.Fuzz(func(t *testing.T, rulesJSON, name string, args []byte) {
		var rs []Rule
		if json.Unmarshal([]byte(rulesJSON), &rs) != nil {
			return
		}
		set, err := CompileRules(rs)
		if err != nil {
			return
		}
		c := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Rules: set,
			Schemas: map[string][]byte{"t": []byte(`{"type":"object"}`)}})
		reason, rule, ok := c.Check(name, args)
		if ok {
			var v map[string]any
			if name != "t" || reason != "" || rule != "" || json.Unmarshal(args, &v) != nil {
				t.Fatalf("allowed %q %q: reason %q rule %q", name, args, reason, rule)
			}
		} else if reason == "" {
			t.Fatal("blocked without a reason")
		}
	})
}

// TestReasonsHoldNoArgumentContent: whatever check fails, the reason names the check and a
// position, never a key or a value the model wrote; the schema's own words (its property names,
// enum values) may appear.
func TestReasonsHoldNoArgumentContent(t *testing.T) {
	t.Parallel()
	const key, val = "SECRETKEY_4f9a", "SECRETVAL_4f9a"
	schema := `{"type":"object","properties":{
	    "s":{"type":"string","pattern":"^x","minLength":40,"format":"email"},
	    "e":{"enum":["a","b"]}, "c":{"const":"k"}, "n":{"type":"integer","multipleOf":7},
	    "arr":{"type":"array","items":{"type":"string","maxLength":3},"uniqueItems":true},
	    "tup":{"type":"array","prefixItems":[{"const":"p"}]},
	    "one":{"oneOf":[{"type":"string"},{"type":"string"}]}, "no":{"not":{"type":"string"}},
	    "ref":{"$ref":"#/$defs/short"}, "m":{"type":"object","additionalProperties":{"type":"integer"}},
	    "pp":{"type":"object","patternProperties":{"^S":{"type":"integer"}}},
	    "pn":{"type":"object","propertyNames":{"maxLength":3}},
	    "dep":{"type":"object","dependentRequired":{"a":["b"]}},
	    "cond":{"if":{"type":"string"},"then":{"maxLength":1}}},
	  "$defs":{"short":{"type":"string","maxLength":2}},
	  "additionalProperties":false}`
	c := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": []byte(schema)}, MaxDepth: 4})
	for _, args := range []string{
		`{"` + key + `":1}`,
		`{"s":"` + val + `"}`, `{"s":"x` + val + `@"}`, `{"e":"` + val + `"}`, `{"c":"` + val + `"}`, `{"n":8}`,
		`{"arr":["` + val + `"]}`, `{"arr":["ab","ab"]}`, `{"tup":["` + val + `"]}`, `{"one":"` + val + `"}`,
		`{"no":"` + val + `"}`, `{"ref":"` + val + `"}`, `{"m":{"` + key + `":"` + val + `"}}`,
		`{"pp":{"S` + key + `":"` + val + `"}}`, `{"pn":{"` + key + `":1}}`, `{"dep":{"a":"` + val + `"}}`,
		`{"cond":"` + val + `"}`,
		`{"` + key + `":1,"` + key + `":2}`, `{"` + key + `":1,"` + strings.ToLower(key) + `":2}`, `{"s":"` + val, `{"s":"` + val + `"} ` + key, `{"` + key + `":[[[[1]]]]}`,
		`["` + val + `"]`,
	} {
		reason, _, ok := c.Check("t", []byte(args))
		if ok {
			t.Errorf("%s: passed", args)
			continue
		}
		if strings.Contains(reason, "SECRET") || strings.Contains(reason, "4f9a") {
			t.Errorf("%s: reason %q holds argument content", args, reason)
		}
	}
}

// TestWalkCaseVariants: where the arguments spell a key of the path only in another letter case,
// Walk reports the value missing (an exact reader's view), then gives the value a case-insensitive
// reader takes; keys found exactly, keys EqualFold does not join (ı for i) and paths that are not
// plain are read as before.
func TestWalkCaseVariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc, path string
		want      []string // each visit: the value's raw text, or "-" for missing
	}{
		{`{"to":"a"}`, "to", []string{`"a"`}},
		{`{"To":"a"}`, "to", []string{"-", `"a"`}},
		{`{"TO":["a","b"]}`, "to", []string{"-", `"a"`, `"b"`}},
		{`{"To":null}`, "to", []string{"-", "-"}},
		{`{"mail":{"TO":"a"}}`, "mail.to", []string{"-", `"a"`}},
		{`{"Mail":{"to":"a"}}`, "mail.to", []string{"-", `"a"`}},
		{`{"mail":{"cc":"a"}}`, "mail.to", []string{"-"}},
		{`{"files":[{"Path":"/a"},{"path":"/b"}]}`, "files.#.path", []string{"-", `"/a"`, `"/b"`}},
		{`{"URLs":["x","y"]}`, "urls.#", []string{"-", `"x"`, `"y"`}},
		{`{"Items":[{"Url":"x"}]}`, "items.#.url", []string{"-", "-", `"x"`}},
		{`{"a.b":{"C":1}}`, `a\.b.c`, []string{"-", "1"}},
		{`{"list":[{"K":1}]}`, "list.0.k", []string{"-", "1"}},
		{`{"\u212a":1}`, "k", []string{"-", "1"}},
		{`{"ſ":1}`, "S", []string{"-", "1"}},
		{`{"ς":1}`, "Σ", []string{"-", "1"}},
		{`{"ı":1}`, "i", []string{"-"}},
		{`{"İd":1}`, "id", []string{"-"}},
		{`{"to":"a","x":{"To":"b"}}`, "x.to", []string{"-", `"b"`}},
		{`{"To":"a"}`, "t*", []string{"-"}},
		{`{"to":"a"}`, "t*", []string{`"a"`}},
		{`{"To":"a"}`, "to|@this", []string{"-"}},
		{`{"to":{"k":1}}`, "to.k.x", []string{"-"}},
	} {
		var got []string
		Walk(gjson.Parse(tc.doc), tc.path, func(v gjson.Result, found bool) bool {
			if found {
				got = append(got, v.Raw)
			} else {
				got = append(got, "-")
			}
			return true
		})
		if !slices.Equal(got, tc.want) {
			t.Errorf("Walk(%s, %q) visits %q, want %q", tc.doc, tc.path, got, tc.want)
		}
	}
}

// TestRulesReadCaseVariants: an argument rule judges the value a case-insensitive reader takes for
// its key; a rule that requires the key still finds it missing.
func TestRulesReadCaseVariants(t *testing.T) {
	t.Parallel()
	rules, err := CompileRules([]Rule{
		{ID: "docs", Tool: "fetch", Path: "url", Check: Check{Hosts: []string{"docs.acme.com"}}, Optional: true},
		{ID: "region", Tool: "deploy", Path: "region", Check: Check{OneOf: []any{"eu-west-1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := NewChecker(Policy{Allowed: map[string]bool{"fetch": true, "deploy": true}, Rules: rules})
	for _, tc := range []struct{ tool, args, reason string }{
		{"fetch", `{"URL":"https://evil.net/x"}`, "rule docs: url has a host that is not allowed"},
		{"fetch", `{"Url":"https://docs.acme.com/a"}`, ""},
		{"fetch", `{}`, ""},
		{"deploy", `{"Region":"eu-west-1"}`, "rule region: region is missing"},
		{"deploy", `{"region":"eu-west-1"}`, ""},
	} {
		if reason, _, _ := c.Check(tc.tool, []byte(tc.args)); reason != tc.reason {
			t.Errorf("%s %s: %q, want %q", tc.tool, tc.args, reason, tc.reason)
		}
	}
}
