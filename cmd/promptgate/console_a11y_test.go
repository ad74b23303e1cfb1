package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// axePath is axe-core's browser build, vendored with its licences (testdata/axe-core/README.md).
const axePath = "testdata/axe-core/axe.min.js"

// viewport is a window size the console must work at.
type viewport struct {
	name          string
	width, height int64
	phone         bool
}

var viewports = []viewport{{"desktop 1280x800", 1280, 800, false}, {"phone 390x844", 390, 844, true}}

// axeFinding is one violation of an axe-core rule: the rule, its impact and the elements that break
// it.
type axeFinding struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// axeCheck runs axe-core (every rule, best practices included) on the page as it is now and fails
// the test for each violation of impact moderate, serious or critical, naming the rule and the
// elements.
func axeCheck(t *testing.T, ctx context.Context, axe, where string) {
	t.Helper()
	runIn(t, ctx, script("void (window.axe || (function () {"+axe+"\n}).call(window))"))
	findings := evalAwait[[]axeFinding](t, ctx, `axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations.map((v) => ({
		id: v.id, impact: v.impact || '', help: v.help,
		nodes: v.nodes.map((n) => n.target.join(' ') + ' — ' + (n.failureSummary || '').replace(/\s+/g, ' '))})))`)
	for _, f := range findings {
		if f.Impact == "minor" {
			continue
		}
		t.Errorf("%s: axe %s (%s): %s\n\t%s", where, f.ID, f.Impact, f.Help, strings.Join(f.Nodes, "\n\t"))
	}
}

// sidewaysScroll lists what scrolls sideways on the page: the page itself, or any element whose
// content is wider than its box and may be scrolled (overflow auto or scroll). The page's width is
// the layout viewport's (clientWidth): on a phone, window.innerWidth grows with content wider than
// the screen.
const sidewaysScroll = `(() => {
	const out = [];
	const width = document.documentElement.clientWidth;
	if (document.documentElement.scrollWidth > width + 1) out.push('the page: ' + document.documentElement.scrollWidth + ' px wide in ' + width);
	for (const e of document.querySelectorAll('body *')) {
		if (e.getClientRects().length === 0) continue;
		const ox = getComputedStyle(e).overflowX;
		if ((ox === 'auto' || ox === 'scroll') && e.scrollWidth > e.clientWidth + 1)
			out.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + e.className + ': ' + e.scrollWidth + ' px in ' + e.clientWidth);
	}
	return out;
})()`

// offScreen lists the elements of selector (at least one must be there) that are not wholly inside
// the layout viewport's width.
func offScreen(t *testing.T, ctx context.Context, selector string) []string {
	t.Helper()
	return eval[[]string](t, ctx, `(() => {
		const els = [...document.querySelectorAll(`+js(selector)+`)].filter((e) => e.getClientRects().length);
		if (!els.length) return ['nothing matches ' + `+js(selector)+`];
		const width = document.documentElement.clientWidth;
		return els.filter((e) => { const r = e.getBoundingClientRect(); return r.left < 0 || r.right > width + 1; })
			.map((e) => e.textContent.slice(0, 40) + ' at ' + Math.round(e.getBoundingClientRect().left) + '..' + Math.round(e.getBoundingClientRect().right));
	})()`)
}

// TestConsoleAccessibility opens every page and dialog of the console at a desktop and a phone size
// and runs axe-core on it; on the phone nothing may scroll sideways, the key columns (a decision's
// reason, a tool's kill switch) must be on screen, and the chart's text as large as the page's.
func TestConsoleAccessibility(t *testing.T) {
	path := findBrowser()
	if path == "" {
		t.Skip("no Chromium found: install the Debian package chromium (apt-get install chromium), or set " + envBrowser + " to a Chromium or Chrome binary")
	}
	axeSrc, err := os.ReadFile(axePath)
	if err != nil {
		t.Fatalf("axe-core is vendored at %s: %v", axePath, err)
	}
	axe := string(axeSrc)
	s := startConsoleStack(t)
	seedConsole(t, s)
	bctx := s.browser(path)

	for _, vp := range viewports {
		t.Run(vp.name, func(t *testing.T) {
			tab := func(t *testing.T) context.Context {
				ctx := s.tab(t, bctx)
				runIn(t, ctx, chromedp.EmulateViewport(vp.width, vp.height, func(p *emulation.SetDeviceMetricsOverrideParams, touch *emulation.SetTouchEmulationEnabledParams) {
					if vp.phone {
						p.Mobile, p.DeviceScaleFactor, touch.Enabled = true, 3, true
					}
				}))
				return ctx
			}
			check := func(t *testing.T, ctx context.Context, where string, keys ...string) {
				t.Helper()
				axeCheck(t, ctx, axe, where)
				if !vp.phone {
					return
				}
				for _, s := range eval[[]string](t, ctx, sidewaysScroll) {
					t.Errorf("%s: scrolls sideways: %s", where, s)
				}
				for _, sel := range keys {
					for _, s := range offScreen(t, ctx, sel) {
						t.Errorf("%s: %s off screen: %s", where, sel, s)
					}
				}
			}

			t.Run("sign-in", func(t *testing.T) {
				ctx := tab(t)
				runIn(t, ctx, chromedp.Navigate(s.admin+"/console/decisions"))
				waitFor(t, ctx, "login form", `!document.getElementById('login').hidden`)
				check(t, ctx, "sign-in")
			})
			t.Run("decisions and an event's details", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "decisions")
				waitFor(t, ctx, "events and chart", `document.querySelectorAll('#events tbody tr').length >= 3 && document.querySelector('#chart [data-count]')`)
				check(t, ctx, "decisions", "#events td.reason")
				small := eval[[]string](t, ctx, `[...document.querySelectorAll('#chart-card *')].filter((e) => [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim()))
					.filter((e) => e.getClientRects().length && e.getBoundingClientRect().height < 11).map((e) => e.textContent.slice(0, 30) + ': ' + e.getBoundingClientRect().height.toFixed(1) + ' px')`)
				for _, s := range small {
					t.Errorf("chart text smaller than 11 px: %s", s)
				}
				runIn(t, ctx, script(`document.querySelector('#events tbody tr button').click()`))
				waitFor(t, ctx, "event dialog", `document.getElementById('dialog').open`)
				check(t, ctx, "event details")
				// A call's details offer to record it as a policy test.
				runIn(t, ctx, chromedp.Click(chromedp.CSS("#dialog-cancel")))
				waitFor(t, ctx, "event dialog closed", `!document.getElementById('dialog').open`)
				runIn(t, ctx, script(`[...document.querySelectorAll('#events tbody tr')].find((tr) => tr.dataset.kind === 'tool_call').querySelector('button').click()`))
				waitFor(t, ctx, "a call's dialog with Record as a test", `document.getElementById('dialog').open && document.getElementById('record-test')`)
				check(t, ctx, "a call's details")
			})
			t.Run("preview", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "preview")
				waitFor(t, ctx, "example loaded", `document.getElementById('p-request').value.includes('messages')`)
				runIn(t, ctx, script(`document.querySelector('#preview-form button[type=submit]').click()`))
				waitFor(t, ctx, "preview shown", `!document.getElementById('preview-out').hidden`)
				check(t, ctx, "preview")
				// The policy test's results, a failure and what was decided shown; then a bad case
				// file's problems.
				waitFor(t, ctx, "the example case", `document.getElementById('pt-file').value.includes('cases:')`)
				for _, run := range []struct{ where, file, shown, key string }{
					{"policy test results", policyTestFailing, `document.querySelector('#pt-cases li[data-passed="false"] .pt-failures')`, "#pt-cases .pt-failures li"},
					{"policy test of a bad case file", strings.Replace(policyTestFailing, "    expect:", "    expct: {}\n    expect:", 1), `!document.getElementById('pt-error').hidden`, "#pt-error li"},
				} {
					runIn(t, ctx, script(`(() => { document.getElementById('pt-file').value = `+js(run.file)+`; document.getElementById('pt-out').hidden = true;
						document.getElementById('pt-error').hidden = true; document.querySelector('#pt-form button[type=submit]').click(); })()`))
					waitFor(t, ctx, run.where, run.shown)
					runIn(t, ctx, script(`document.querySelectorAll('#pt-cases details').forEach((d) => { d.open = true; })`))
					check(t, ctx, run.where, run.key)
				}
			})
			t.Run("definitions and the rollback dialog", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "definitions")
				waitFor(t, ctx, "protocol list", `document.querySelector('#list-protocols button[data-name=neutral]')`)
				runIn(t, ctx, script(`document.querySelector('#list-protocols button[data-name=neutral]').click()`))
				waitFor(t, ctx, "versions", `document.querySelectorAll('#def-versions tbody tr').length >= 2`)
				runIn(t, ctx, script(`document.querySelector('#diff-form button[type=submit]').click()`))
				waitFor(t, ctx, "diff", `document.querySelector('#diff td.add')`)
				check(t, ctx, "definitions", "#def-versions tbody tr td:last-child button")
				runIn(t, ctx, script(`document.getElementById('def-rollback').click()`))
				waitFor(t, ctx, "rollback dialog", `document.getElementById('dialog').open && document.querySelector('#dialog-body table')`)
				check(t, ctx, "rollback dialog")
			})
			t.Run("definitions: the new-version editor, its errors, a saved version", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "definitions")
				original := openEditor(t, ctx)
				check(t, ctx, "new-version editor", "#edit-text", "#edit-save")
				setEditor(t, ctx, edited(t, original, editBrokenJSON))
				saveEditor(t, ctx)
				editorErrors(t, ctx)
				check(t, ctx, "editor with a JSON error", "#edit-text", "#edit-errors li")
				setEditor(t, ctx, edited(t, original, editUnknownKey))
				saveEditor(t, ctx)
				editorErrors(t, ctx)
				check(t, ctx, "editor with the admin API's error", "#edit-text", "#edit-errors li")
				setEditor(t, ctx, edited(t, original, editAddsTheRule))
				saveEditor(t, ctx)
				waitFor(t, ctx, "the saved version with its preview", `!document.getElementById('edit-result').hidden && document.querySelector('#edit-preview pre')`)
				runIn(t, ctx, script(`document.querySelector('#edit-preview details').open = true`))
				check(t, ctx, "a saved version: its diff and preview", "#edit-diff td.add", "#edit-preview pre", "#edit-activate")
			})
			t.Run("definitions: shadow, learned data and a proposal", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "definitions")
				waitFor(t, ctx, "protocol list", `document.querySelector('#list-protocols button[data-name=shop]')`)
				runIn(t, ctx, script(`document.querySelector('#list-protocols button[data-name=shop]').click()`))
				waitFor(t, ctx, "shadow and learned", `document.querySelectorAll('#shadow-changes tbody tr th').length >= 1 && document.querySelectorAll('#learned tbody tr th').length >= 2`)
				check(t, ctx, "definitions with a shadow", "#shadow-changes tbody td.reason")
				runIn(t, ctx, script(`document.getElementById('learn-suggest').click()`))
				waitFor(t, ctx, "proposal dialog", `document.getElementById('dialog').open && document.querySelector('#suggestions tbody')`)
				check(t, ctx, "proposal dialog")
			})
			t.Run("tools", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "tools")
				waitFor(t, ctx, "tools with an override", `[...document.querySelectorAll('#tools button')].some((b) => b.textContent.startsWith('Clear'))`)
				check(t, ctx, "tools", "#tools tbody td.kill button")
			})
			t.Run("mcp and the review dialog", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "mcp")
				waitFor(t, ctx, "a change to review", `document.querySelector('button[aria-label="Review change of lookup on crm"]') && document.querySelectorAll('#mcp-recent tbody tr').length >= 3`)
				check(t, ctx, "mcp", "#mcp-pins tbody td:last-child button", "#mcp-recent td.reason")
				runIn(t, ctx, script(`document.querySelector('button[aria-label="Review change of lookup on crm"]').click()`))
				waitFor(t, ctx, "review dialog", `document.getElementById('dialog').open && document.querySelector('#dialog-body table')`)
				check(t, ctx, "mcp review dialog")
				runIn(t, ctx, chromedp.Click(chromedp.CSS("#dialog-cancel")))
				waitFor(t, ctx, "review dialog closed", `!document.getElementById('dialog').open`)
				runIn(t, ctx, script(`document.querySelector('button[aria-label="Versions of the pin set of crm"]').click()`))
				waitFor(t, ctx, "versions dialog", `document.getElementById('dialog').open && document.querySelector('#dialog-body table')`)
				check(t, ctx, "mcp versions dialog")
			})
			t.Run("health", func(t *testing.T) {
				ctx := tab(t)
				s.open(t, ctx, "health")
				waitFor(t, ctx, "health report", `document.getElementById('h-store').textContent.includes('bbolt')`)
				check(t, ctx, "health")
			})
		})
	}
	s.requestsMu.Lock()
	defer s.requestsMu.Unlock()
	for _, e := range s.browserErrors {
		t.Errorf("browser: %s", e)
	}
}

// seedConsole gives the console something on every page: a removal by the kill switch (whose
// override stays set), a call blocked by its schema, a second version of the neutral protocol,
// active, an MCP tool whose changed definition waits for approval, and a protocol whose second
// version is in shadow, with traffic it judged and learn mode learned from.
func seedConsole(t *testing.T, s *consoleStack) {
	t.Helper()
	s.adminCall("PUT", "/admin/tools/old_tool/enabled", `{"enabled":false}`, 200)
	s.chat(chatWithTools("hello", "old_tool", "web_fetch"))
	s.chat(blockedShellRequest)
	v1 := gjson.GetBytes(s.adminCall("GET", "/admin/protocols/neutral/versions/1", "", 200), "body").Raw
	v2, err := sjson.Set(v1, "promptTemplate.overrides.rules", gjson.Get(v1, "promptTemplate.overrides.rules").String()+"\n"+ruleMarker)
	if err != nil {
		t.Fatal(err)
	}
	s.adminCall("POST", "/admin/protocols/neutral/versions", v2, 201)
	s.adminCall("POST", "/admin/protocols/neutral/activate", `{"version":2}`, 200)
	s.chat(chatWithTools("hello"))
	for range 3 {
		s.chat(blockedShellRequest)
	}
	s.seedMCP(t)
	shopVersions(t, s)
	s.adminCall("POST", "/admin/protocols/shop/shadow", `{"version":2}`, 200)
	for range 3 {
		s.chat(shopShellRequest)
	}
}

// blockedShellRequest declares the tool shell with a schema that the scripted upstream's call of it
// breaks: the request keeps the tool, the answer has its call blocked.
var blockedShellRequest = `{"model":"m","messages":[{"role":"user","content":"call shell"}],"tools":[{"type":"function",` +
	`"function":{"name":"shell","parameters":{"type":"object","properties":{"cmd":{"type":"integer"}}}}}]}`

// evalAwait evaluates a JavaScript expression whose value is a promise, and decodes what it
// resolves to.
func evalAwait[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}
