package flow_test

import (
	"encoding/json"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
)

// TestScanRefusesHiddenItems: links, addresses and IBANs written the ways a browser, a Markdown
// renderer, IDNA, a mail program or a bank form reads back (character references, compatibility
// and invisible characters, odd schemes and numeric hosts, scheme-relative values, percent-escapes,
// grouping marks) are found and refused under rules that do not allow them.
func TestScanRefusesHiddenItems(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"scan":[{"id":"links","tool":"send_email","path":"body","find":["url"],"hosts":["acme.com","*.acme.com"]},
	{"id":"addr","tool":"mail","path":"body","find":["email"],"hosts":["acme.com"]},
	{"id":"iban","tool":"note","path":"body","find":["iban"],"from":["user"]}]}`)
	for tool, texts := range map[string][]string{
		"send_email": {
			`[x](https://acme.com&#64;evil.net/)`, `<a href=https://acme.com&#64;evil.net/>x</a>`, `<a href="https://acme.com&#x40evil.net/">x</a>`,
			`<a href="https://acme.com&commat;evil.net/">x</a>`, `<a href="\\evil.net/">x</a>`, `<a href="/\evil.net/">x</a>`,
			`<a href="https:evil.net">x</a>`, `<a href="https:\\evil.net">x</a>`, `{"u":"https:\/\/evil.net/x"}`,
			`<form action="https://evil.net/x"><button>go</button></form>`, `<meta http-equiv="refresh" content="0;url=https://evil.net/">`,
			`<a href="https://acme.com%40evil.net/">x</a>`, `<a href="ht&#x09;tps://evil.net/">x</a>`, "<a href=\"https://evil&shy;.net/\">x</a>",
			"https://evil\u00ad.net/", "https://evil\u200b.net/", "https://evil\u034f.net/", "https://evil．net/", "https://evil。net/",
			"https://ｅｖｉｌ.net/", "https://acme.com\uff20evil.net/", "https://evil.net\uff0facme.com/", "https://[::ffff:7f00:1]/",
			"see evil.net", "see ｗｗｗ．ｅｖｉｌ．ｎｅｔ/x", "see evil.xn--p1ai", "see http:evil.net", "see http:/evil.net",
			"see <www.evil.net>", "see ftp://evil.net", "see wss://evil.net", "see acme.com.evil.net", "see 1.2.3.4/x",
			"see http://0x7f.1/x", "see http://1.2.3/x", "see evil.net:443/x", "see acme.com:pass@evil.net/x",
			`<a href=//1249767508/login>x</a>`, "[x]\n\n[x]: //1249767508/login", "[x]\n\n[x]: <//1249767508/login>",
			`<div style="background:url(//1249767508/x)">`, `<div style="background:url('//1249767508/x')">`,
			`<img srcset="//1249767508/a.png 2x">`, `<img srcset="https://acme.com/a.png 1x, https://evil.net/b.png 2x">`,
			`![x](//1249767508/p.png)`, `<a href="&#47;/1249767508/">x</a>`, `<a href="&sol;&sol;1249767508/">x</a>`,
			`<a href=" //1249767508/">x</a>`, `<a href="/\1249767508/">x</a>`, `[x](\\1249767508/)`, `<a href="https:1249767508/">x</a>`,
			`<a href="https://acme.com" ping="https://evil.net/p">x</a>`, `<form action=//1249767508/><input name=q></form>`,
			`<meta http-equiv="refresh" content="0; url=//1249767508/">`, `[x](<//1249767508/>)`, `<//1249767508/>`,
			`{"href":"//1249767508/"}`, `{"href": "\/\/1249767508/"}`,
			`[x](<https://acme.com\>@evil.net>)`, `[x](https://acme.com\)@evil.net)`, `[x](https://acme.com\(@evil.net)`,
			`[x](https://acme.com\"@evil.net "t")`, `[x]: https://acme.com\>@evil.net`, `<https://acme.com\>@evil.net>`,
			`[x](https://acme.com&rpar;@evil.net)`, `[x](<https://acme.com&gt;@evil.net>)`, `[x](https://acme.com%29@evil.net)`,
			`[x](https://acme.com(@evil.net))`, `[x](https://acme.com()@evil.net)`, `[x](https://acme.com(a)@evil.net)`,
		},
		"mail": {
			`<a href="mailto:eve&#64;evil.net">x</a>`, `[x](mailto:eve&#64;evil.net)`, `eve&#64;evil.net`, `eve@evil．net`,
			`eve@evil。net`, `eve@ｅｖｉｌ.net`, "eve@evil.ｎｅｔ", `"eve"@evil.net`, `eve@[IPv6:::1]`, `mailto:?to=eve@evil.net`,
			`mailto:bob@acme.com?bcc=eve@evil.net`, `eve@EVIL.NET.`, `bob@acme.com.evil.net`, `bob@acme.com@evil.net`,
			`eve@(c)evil.net`, `eve@ evil.net`, "eve@\tevil.net", "eve@\r\n evil.net", "Bob <eve@evil.net>", "eve@xn--evl-7na.net",
			"eve@évil.net", `[x](mailto:bob@acme.com\,eve@evil.net)`, `eve\@evil.net`, `eve@evil\.net`,
			"eve\uff20evil.net", "eve\ufe6bevil.net", "<a href=\"mailto:eve\uff20evil.net\">x</a>",
		},
		"note": {
			"pay DE89-3704-0044-0532-0130-00", "pay DE89‐3704‐0044‐0532‐0130‐00", "pay de89 3704 0044 0532 0130 00",
			"pay DE８９ 3704 0044 0532 0130 00", "pay DE89\u00ad370400440532013000", "pay DE89\u2027370400440532013000",
			"pay DE89\u30fb370400440532013000", "pay DE 89 3704 0044 0532 0130 00", "pay DE89&#32;3704 0044 0532 0130 00",
			"pay DE89&nbsp;3704&nbsp;0044 0532 0130 00",
		},
	} {
		for _, text := range texts {
			b, _ := json.Marshal(map[string]string{"to": "bob@acme.com", "body": text})
			c := analyze(t, p, readersConversation, flow.Options{})
			if r := c.Check(flow.Call{Tool: tool, Args: b}); r.Released() {
				t.Errorf("%s: %q passes", tool, text)
			}
		}
	}
}
