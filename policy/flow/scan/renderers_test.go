package scan

import (
	"encoding/json"
	"html"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// TestLinksAsRenderersCutThem: the links that Markdown renderers and linkifiers (markdown-it with
// linkify-it, linkify-it alone, micromark with GFM, marked with GFM; versions in links.json) made
// of each text of testdata/renderers/texts.json, recorded by render.mjs beside them. Each link is
// read by the scanner with the host a browser opens for it, or fails every hosts check there (a
// link without a host, such as marked's "java&#x09;script:", included); a mailto: link's address is
// found at its domain. A host that runs into a sentence (GFM links "www.our-company.com.They") is
// read without the capitalised label that is no top-level domain.
func TestLinksAsRenderersCutThem(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/renderers/links.json")
	if err != nil {
		t.Fatal(err)
	}
	var recorded []struct {
		Text  string              `json:"text"`
		Links map[string][]string `json:"links"`
	}
	if err := json.Unmarshal(b, &recorded); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range recorded {
		urls, emails := Find(r.Text, URL), Find(r.Text, Email)
		for renderer, links := range r.Links {
			for _, href := range links {
				href = html.UnescapeString(href) // as a browser reads the attribute
				if addr, ok := strings.CutPrefix(href, "mailto:"); ok {
					addr, _ = url.PathUnescape(addr)
					d, err := vet.NormHost(addr[strings.LastIndexByte(addr, '@')+1:])
					if err == nil && !foundAt(emails, d) {
						t.Errorf("%s links %q in %q; the scanner reads %s", renderer, href, r.Text, showItems(r.Text, emails))
					}
					checked++
					continue
				}
				host, userInfo, ok := opens(href)
				if !ok || !userInfo && !resolvable(host) {
					continue
				}
				checked++
				if !covered(urls, host, userInfo) {
					t.Errorf("%s links %q (host %q, user info %v) in %q; the scanner reads %s", renderer, href, host, userInfo, r.Text, showItems(r.Text, urls))
				}
			}
		}
	}
	if checked < 60 {
		t.Fatalf("only %d links checked", checked)
	}
}
