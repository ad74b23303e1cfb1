package flow_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// readersConversation is the user's task: their own links, addresses and IBAN.
var readersConversation = []turn{
	{App: "You are Acme's assistant."},
	{User: "Mail bob@acme.com and carol@acme.com the notes; open https://acme.com/docs; pay GB82 WEST 1234 5698 7654 32."},
}

// body is a send_email call whose body is s.
func body(s string) string {
	b, _ := json.Marshal(map[string]string{"to": "bob@acme.com", "body": s})
	return string(b)
}

// TestScanLinksAsBrowsersRead: a link's host is the host every reader that could end the link
// elsewhere opens (a browser parsing an attribute value, a Markdown renderer, GFM's autolinks, a
// linkifier that reads user info); where one of them opens another host, or none, the link fails.
// Ordinary text keeps passing.
func TestScanLinksAsBrowsersRead(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"scan":[{"id":"links","tool":"send_email","path":"body","find":["url"],"hosts":["acme.com","*.acme.com"]}]}`)
	var cases []checkCase
	for _, s := range []string{
		"Log in: https://acme.com|@evil.net/login",
		`<a href="https://acme.com @evil.net/">Log in</a>`,
		`<a href='https://acme.com @evil.net/'>Log in</a>`,
		`[Log in](https://acme.com"@evil.net/)`,
		`[Log in](https://acme.com @evil.net/)`,
		"Log in: https://acme.com`@evil.net/",
		"Log in: https://acme.com^@evil.net/",
		"Log in: https://acme.com{@evil.net/",
		"Log in: https://acme.com\u3000@evil.net/",
		"Log in: https://acme.com\u2022@evil.net/",
		`Log in: "https://acme.com"@evil.net/login`,
		`{"link": "https://acme.com @evil.net/"}`,
		"Log in: <https://acme.com @evil.net/>",
		"Log in: https://acme.com%2F@evil.net/",
		"Log in: https://2130706433/",
		`<a href="//1249767508/login">Log in</a>`,
		`[Log in](//0x4a.0x7e.0x3.0x54/)`,
		`<a href='//intranet.corp/reset'>Log in</a>`,
		`<a href=//1249767508/login>Log in</a>`,
		`<div style="background:url(//1249767508/pixel.png)">`,
		`<meta http-equiv="refresh" content="0; url=//1249767508/">`,
	} {
		cases = append(cases, checkCase{"send_email", body(s), "links", "body: link 1"})
	}
	for _, s := range []string{
		"javascript:alert(1)",
		"JaVaScRiPt:alert(1)",
		`<a href="java&#x09;script:alert(1)">x</a>`,
		`<a href="&#106;avascript:alert(1)">x</a>`,
		`<a href=" javascript:alert(1)">x</a>`,
		`<a href="javascript: alert(1)">x</a>`,
		"[x](javascript:alert(1))",
		"data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
		"vbscript:msgbox(1)",
		"blob:https://acme.com/0c8f",
		"view-source:https://acme.com/",
		"about:blank",
		"file:///etc/passwd",
		"file:/etc/passwd",
	} {
		cases = append(cases, checkCase{"send_email", body("See " + s), "links", "has no host"})
	}
	for _, s := range []string{
		`"https://acme.com" and mail bob@acme.com`,
		"(see https://acme.com/x).",
		"https://acme.com, https://b.acme.com",
		`[docs](https://docs.acme.com/a "Docs") and [b](<https://acme.com/b c>) and [c](https://acme.com/c)`,
		`<a href="https://acme.com/x" title="Acme home" class="link">Acme</a> <img src="https://cdn.acme.com/i.png" alt="logo">`,
		`<p>Visit <a href='https://acme.com'>acme.com</a>, or https://b.acme.com/a?x=1&amp;y=2.</p>`,
		"**https://acme.com/a**, _https://acme.com/b_, ~https://acme.com/c~",
		"'https://acme.com/a' and `https://acme.com/b` and {https://acme.com/c}",
		"Tables: | https://acme.com/a | https://b.acme.com/ |",
		`{"url": "https://acme.com/x", "next": "https://b.acme.com/y"}`,
		"https://acme.com/a|b and https://acme.com/?q=a@b",
		"Note: this. Ratio 3:4 at 10:30. Data: 42 rows. JavaScript: the good parts. About: us.",
		"post it to www.acme.com.They sent the rest",
		"HTTPS://ACME.COM/A and https://ACME.com.",
		`<a href="https://acme.com/">bob@acme.com</a> and <a href="https://acme.com"> bob@acme.com</a>`,
		`<a href="//cdn.acme.com/a.png">x</a> [y](//acme.com/y) and a\_b \*not bold\* https://acme.com/a\_b`,
	} {
		cases = append(cases, checkCase{"send_email", body(s), "", ""})
	}
	cases = append(cases,
		checkCase{"send_email", body("post it to www.evil.com.They sent the rest"), "links", "has a host that is not allowed"},
		checkCase{"send_email", body("post it to www.acme.com.evil.They sent the rest"), "links", "has a host that is not allowed"},
		checkCase{"send_email", body("post it to www.acme.com.Net, they said"), "links", "has a host that is not allowed"},
		checkCase{"send_email", body("post it to https://www.acme.com.They/x"), "links", "has a host that is not allowed"},
		checkCase{"send_email", body(`<a href="https://acme.com">bob@acme.com</a>`), "links", "has a host that cannot be read"},
		checkCase{"send_email", body(`[Log in](https://acme.com\@evil.net/)`), "links", "has user info"},
		checkCase{"send_email", body("[Log in]\n\n[Log in]: https://acme.com\\@evil.net/"), "links", "has user info"},
		checkCase{"send_email", body("[Log in]\n\n[Log in]: //1249767508/login"), "links", "has a host that is not allowed"},
	)
	runChecks(t, p, readersConversation, cases)
}

// TestScanLinksFrom: a link whose readers disagree must occur in the sources in every reading.
func TestScanLinksFrom(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"scan":[{"id":"from","tool":"send_email","path":"body","find":["url"],"from":["user"]},
	  {"id":"not","tool":"send_sms","path":"body","find":["url"],"not":{"from":["tool:read"]}}]}`)
	turns := append(readersConversation[:2:2],
		turn{Calls: []neutralCall{{ID: "r1", Tool: "read"}}},
		turn{Tool: "r1", Output: "Reset at https://evil.net/login"})
	runChecks(t, p, turns, []checkCase{
		{"send_email", body("Docs: https://acme.com/docs/a"), "", ""},
		{"send_email", body("Docs: https://acme.com|@evil.net/"), "from", "does not occur in user"},
		{"send_email", body("Docs: javascript:alert(1)"), "from", "cannot be read"},
		{"send_sms", body("Docs: https://acme.com/docs"), "", ""},
		{"send_sms", body("Docs: https://acme.com`@evil.net/"), "not", "occurs in an excluded source"},
	})
}

// TestScanAddressesAsRFC5322Reads: an address with a quoted local part, or at an IP address, is
// at the domain net/mail reads.
func TestScanAddressesAsRFC5322Reads(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"scan":[{"id":"addr","tool":"send_email","path":"body","find":["email"],"hosts":["acme.com"]},
	  {"id":"addr-from","tool":"send_sms","path":"body","find":["email"],"from":["user"]}]}`)
	var cases []checkCase
	for _, s := range []string{
		`Write to "bob@acme.com"@evil.net`,
		`Write to "Bob Smith"@evil.net`,
		`Write to "bob\"@acme.com"@evil.net`,
		"Write to bob@[203.0.113.9]",
		"Write to bob@203.0.113.9",
		`Write to <a href="mailto:eve%40evil.net">Bob</a>`,
		"Write to [Bob](mailto:bob@acme.com?cc=eve%40evil.net)",
		"Write to eve@evil.n\u200bet or eve@evil.net\u200b",
	} {
		cases = append(cases, checkCase{"send_email", body(s), "addr", "is at a domain that is not allowed"})
	}
	for _, s := range []string{
		`Write to "Bob" <bob@acme.com> or 'carol@acme.com'.`,
		"Write to bob@acme.com (Bob), **carol@acme.com**",
		`He said "hi" and left; mail bob@acme.com`,
	} {
		cases = append(cases, checkCase{"send_email", body(s), "", ""})
	}
	cases = append(cases,
		checkCase{"send_sms", body(`Write to "bob@acme.com"@evil.net`), "addr-from", "address 1 at offset 9 does not occur in user"},
		checkCase{"send_sms", body(`Write to "bob"@acme.com`), "", ""},
	)
	runChecks(t, p, readersConversation, cases)
}

// TestProvenanceAddressesAsNetMailReads: an address value is read as net/mail reads it (display
// names, comments, quoted local parts, lists: every address must pass), and a value the scanner
// reads otherwise is refused.
func TestProvenanceAddressesAsNetMailReads(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"provenance":[{"id":"to","tool":"send_email","path":"to","as":"email","from":["user"]},
	  {"id":"auto","tool":"mail_auto","path":"to","from":["user"]}]}`)
	to := func(tool, v string) checkCase {
		b, _ := json.Marshal(map[string]string{"to": v})
		return checkCase{tool: tool, args: string(b)}
	}
	var cases []checkCase
	for _, v := range []string{"bob@acme.com", "Bob <BOB@acme.com>", `"bob"@acme.com`, "bob@acme.com (Bob)", "bob@acme.com, Carol <carol@acme.com>",
		"bob@ acme.com"} {
		cases = append(cases, to("send_email", v), to("mail_auto", v))
	}
	bad := func(tool, v, reason string) checkCase {
		c := to(tool, v)
		c.rule, c.reason = map[string]string{"send_email": "to", "mail_auto": "auto"}[tool], reason
		return c
	}
	cases = append(cases,
		bad("send_email", `"bob@acme.com"@evil.net`, "readers disagree"),
		bad("mail_auto", `"bob@acme.com"@evil.net`, "readers disagree"),
		bad("send_email", `"bob"@evil.net`, "to does not occur in user"),
		bad("send_email", "bob@acme.com, eve@evil.net", "to (address 2) does not occur in user"),
		bad("mail_auto", "bob@acme.com, eve@evil.net", "to (address 2) does not occur in user"),
		bad("send_email", `"eve@evil.net" <bob@acme.com>`, "readers disagree"),
		bad("send_email", "bob@acme.com (eve@evil.net)", "readers disagree"),
		bad("send_email", "bob@localhost", "readers disagree"),
		bad("send_email", "not an address", "is not an email address"),
		bad("send_email", "bob@ (office) acme.com", "is not an email address"), // net/mail reads no comment there
	)
	runChecks(t, p, readersConversation, cases)
}

// TestProvenanceURLSchemes: a URL value passes provenance only with an allowed scheme (http and
// https unless the rule lists others), and only when a browser reads the host net/url reads.
func TestProvenanceURLSchemes(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"provenance":[{"id":"site","tool":"open","path":"url","as":"url","from":["user"]},
	  {"id":"auto","tool":"open_auto","path":"url","from":["user"]},
	  {"id":"ftp","tool":"fetch","path":"url","as":"url","schemes":["https","ftp"],"from":["user"]}]}`)
	u := func(tool, v, rule, reason string) checkCase {
		b, _ := json.Marshal(map[string]string{"url": v})
		return checkCase{tool, string(b), rule, reason}
	}
	for _, r := range p.Explain().Rules {
		if shown := strings.Contains(r.Summary, "schemes"); shown != (r.Rule == "ftp") || shown && !strings.Contains(r.Summary, "schemes ftp https") {
			t.Errorf("the preview shows rule %s as %q", r.Rule, r.Summary)
		}
	}
	runChecks(t, p, readersConversation, []checkCase{
		u("open", "https://acme.com/x", "", ""),
		u("open", "acme.com/x", "", ""),
		u("open_auto", "https://acme.com/x", "", ""),
		u("fetch", "ftp://acme.com/x", "", ""),
		u("open", "javascript://acme.com/%0aalert(1)", "site", "has a scheme that is not allowed"),
		u("open", "file://acme.com/etc/passwd", "site", "has a scheme that is not allowed"),
		u("open", "gopher://acme.com/", "site", "has a scheme that is not allowed"),
		u("open_auto", "javascript://acme.com/%0aalert(1)", "auto", "has a scheme that is not allowed"),
		u("open_auto", "file://acme.com/x", "auto", "has a scheme that is not allowed"),
		u("fetch", "http://acme.com/x", "ftp", "has a scheme that is not allowed"),
		u("open", "https://2130706433/", "site", "readers disagree"),
		u("open", "https://acme.com\\@evil.net/", "site", "is not a URL"),
	})
}

// TestIBANsGroupedWithMarks: IBANs grouped with full stops, slashes, low lines, middle dots,
// dashes of any kind, bullets or Unicode spaces, split by invisible characters or by HTML and
// Markdown markup a reader does not see, are found and read; ordinary dotted numbers are not IBANs.
func TestIBANsGroupedWithMarks(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"provenance":[{"id":"payee","tool":"send_money","path":"iban","as":"iban","from":["user"]}],
	  "scan":[{"id":"ibans","tool":"send_email","path":"body","find":["iban"],"from":["user"]}]}`)
	iban := func(v, rule, reason string) checkCase {
		b, _ := json.Marshal(map[string]string{"iban": v})
		return checkCase{"send_money", string(b), rule, reason}
	}
	var cases []checkCase
	for _, sep := range []string{".", "/", "_", "\u00b7", "\u00a0", "\u202f", "\u2009", "\u3000", " . "} {
		g := func(s string) string {
			out := ""
			for i, part := range []string{s[:4], s[4:8], s[8:12], s[12:16], s[16:20], s[20:]} {
				if i > 0 {
					out += sep
				}
				out += part
			}
			return out
		}
		cases = append(cases,
			iban(g("GB82WEST12345698765432"), "", ""),
			iban(g("DE89370400440532013000"), "payee", "does not occur in user"),
			checkCase{"send_email", body("New account: " + g("DE89370400440532013000") + "."), "ibans", "IBAN 1 at offset 13 does not occur"},
		)
	}
	for _, written := range []string{
		"DE89\u20133704\u20130044\u20130532\u20130130\u201300", "DE89\u2014370400440532013000", "DE89\u2212370400440532013000",
		"DE89\u2022370400440532013000", "DE89:3704:0044:0532:0130:00", "DE89|3704|0044|0532|0130|00", "DE89+370400440532013000",
		"D\u200bE89 3704 0044 0532 0130 00", "DE89 37\u206004 0044 0532 0130 00", "<b>DE89</b> 3704 0044 0532 0130 00",
		"DE89 **3704** 0044 0532 0130 00", "`DE89` 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130 0<!-- -->0",
		"DE89 <span class=\"x\">3704</span> 0044 0532 0130 00",
	} {
		cases = append(cases, checkCase{"send_email", body("New account: " + written + "."), "ibans", "does not occur"})
	}
	cases = append(cases,
		checkCase{"send_email", body("Pay <b>GB82 WEST</b> 1234\u20135698 7654 32 today, ref 12:30 | 4, 5 + 6"), "", ""},
		checkCase{"send_email", body("Version 1.2.3.4, build GB12.3456.7890, ratio 1/2/3"), "", ""},
		iban("GB82..WEST.1234.5698.7654.32", "payee", "is not a valid IBAN"),
	)
	runChecks(t, p, readersConversation, cases)
}
