package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/proxy/console"
)

// editorRule is the rule the editor tests add to the protocol tech's rules.
const editorRule = "- EDITOR RULE: answer in one line."

// The edits the editor tests make to the JSON of tech's active version, as the editor shows it
// (pretty-printed with two spaces): one that breaks the JSON (a comma taken away at the end of line
// 2), two the admin API refuses (an unknown key in a rule, a rule whose pattern does not compile),
// and one it stores (a rule more).
var (
	editBrokenJSON  = [2]string{`"id": "tech",`, `"id": "tech"`}
	editUnknownKey  = [2]string{`"rules": []`, `"rules": [{"tool": "web_fetch", "path": "url", "patern": "x"}]`}
	editBadPattern  = [2]string{`"rules": []`, `"rules": [{"tool": "web_fetch", "path": "url", "pattern": "("}]`}
	editAddsTheRule = [2]string{`"rules": "- `, `"rules": "` + editorRule + `\n- `}
)

// edited is text with the edit made once; it fails the test when the text does not have what the
// edit replaces.
func edited(t *testing.T, text string, edit [2]string) string {
	t.Helper()
	if !strings.Contains(text, edit[0]) {
		t.Fatalf("the editor's text lacks %q:\n%s", edit[0], text)
	}
	return strings.Replace(text, edit[0], edit[1], 1)
}

// openEditor selects the protocol tech on Definitions (open in ctx) and opens the new-version
// editor on it; it returns the editor's text.
func openEditor(t *testing.T, ctx context.Context) string {
	t.Helper()
	waitFor(t, ctx, "protocol list", `document.querySelector('#list-protocols button[data-name=tech]')`)
	runIn(t, ctx, script(`document.querySelector('#list-protocols button[data-name=tech]').click()`))
	waitFor(t, ctx, "tech selected", `document.getElementById('def-title').textContent === 'protocols/tech'`)
	runIn(t, ctx, chromedp.Click(chromedp.CSS(`#def-new`)))
	waitFor(t, ctx, "the editor with the active version", `!document.getElementById('edit-card').hidden && document.getElementById('edit-text').value.includes('"id": "tech"')`)
	return eval[string](t, ctx, `document.getElementById('edit-text').value`)
}

// setEditor replaces the editor's text as typing it would.
func setEditor(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	runIn(t, ctx, script(`(() => { const ta = document.getElementById('edit-text'); ta.value = `+js(text)+`; ta.dispatchEvent(new Event('input')); })()`))
}

// saveEditor clears what the last save showed and saves the editor's text.
func saveEditor(t *testing.T, ctx context.Context) {
	t.Helper()
	runIn(t, ctx, script(`(() => { const e = document.getElementById('edit-errors'); e.hidden = true; e.replaceChildren(); })()`))
	runIn(t, ctx, chromedp.Click(chromedp.CSS(`#edit-save`)))
}

// editorErrors waits for the editor's errors and returns their text.
func editorErrors(t *testing.T, ctx context.Context) string {
	t.Helper()
	waitFor(t, ctx, "the editor's errors", `!document.getElementById('edit-errors').hidden && document.querySelector('#edit-errors li')`)
	return eval[string](t, ctx, `document.getElementById('edit-errors').textContent`)
}

// TestConsoleNewVersion drives Definitions' editor in headless Chromium against a real serve: a new
// version of a protocol made from the active one's JSON, refused while it is not valid JSON
// (nothing sent, the place shown by line and column) and while the admin API refuses it (its
// messages with their key paths), the text kept each time; once stored, not active, it is shown
// with its diff and the exact request the proxy would send under it, then activated after the
// confirmation and served.
func TestConsoleNewVersion(t *testing.T) {
	path := findBrowser()
	if path == "" {
		t.Skip("no Chromium found: install the Debian package chromium (apt-get install chromium), or set " + envBrowser + " to a Chromium or Chrome binary")
	}
	s := startConsoleStack(t)
	ctx := s.tab(t, s.browser(path))
	s.open(t, ctx, "definitions")
	original := openEditor(t, ctx)

	// A monospace textarea with its label, focused; the Tab key leaves it.
	if got := eval[string](t, ctx, `(() => { const ta = document.getElementById('edit-text');
		return [document.activeElement === ta, getComputedStyle(ta).fontFamily, ta.labels[0].textContent].join(' | '); })()`); !strings.HasPrefix(got, "true | ") ||
		!strings.Contains(got, "monospace") || !strings.HasSuffix(got, "| Definition (JSON)") {
		t.Fatalf("editor: %s", got)
	}
	if !strings.HasPrefix(original, "{\n  \"id\": \"tech\",\n") || gjson.Get(original, "id").String() != "tech" {
		t.Fatalf("the editor does not start with the active version, pretty-printed:\n%s", original)
	}
	runIn(t, ctx, chromedp.KeyEvent(kb.Tab))
	if got := eval[string](t, ctx, `document.activeElement.id`); got != "edit-note" {
		t.Fatalf("Tab from the editor went to %q", got)
	}

	// The editor's copy says what is stored: numbers as written, not as a double reads them.
	if got := eval[string](t, ctx, `JSON.stringify(PG.parseExact('{"a":1.0,"b":12345678901234567890,"c":[1e400,-0.10]}'))`); got != `{"a":1.0,"b":12345678901234567890,"c":[1e400,-0.10]}` {
		t.Fatalf("numbers of a definition changed on their way into the editor: %s", got)
	}

	// A dialog opened right after another was closed answers for itself: the first one's close
	// event, which comes in a later task, neither answers nor cancels it.
	runIn(t, ctx, script(`window.modalOrder = null; (async () => {
		const d = document.getElementById('dialog');
		const a = PG.modal('A', 'a', 'OK', false);
		document.getElementById('dialog-cancel').click();
		const b = PG.modal('B', 'b', 'OK', false);
		await new Promise((r) => setTimeout(r, 50));
		const open = d.open;
		document.getElementById('dialog-confirm').click();
		window.modalOrder = [await a, open, await b].join(',');
	})()`))
	waitFor(t, ctx, "both dialogs answered", `window.modalOrder !== null`)
	if got := eval[string](t, ctx, `window.modalOrder`); got != "false,true,true" {
		t.Fatalf("a dialog opened after another closed: first answered, second still open, second answered = %s, want false,true,true", got)
	}

	versions := func() int64 {
		return gjson.GetBytes(s.adminCall("GET", "/admin/protocols/tech", "", 200), "versions.#").Int()
	}
	t.Run("not valid JSON: nothing is sent, the line and column are shown, the text stays", func(t *testing.T) {
		broken := edited(t, original, editBrokenJSON)
		setEditor(t, ctx, broken)
		s.requestsMu.Lock()
		before := len(s.requests)
		s.requestsMu.Unlock()
		saveEditor(t, ctx)
		got := editorErrors(t, ctx)
		s.requestsMu.Lock()
		sent := slices.Contains(s.requests[before:], s.admin+"/admin/protocols/tech/versions")
		s.requestsMu.Unlock()
		if sent {
			t.Fatal("text that is not JSON was sent to the admin API")
		}
		if !strings.Contains(got, "not valid JSON, so nothing was sent") || !strings.Contains(got, "At line 3, column 3: a comma or } should follow the value.") {
			t.Fatalf("errors %q", got)
		}
		if v := eval[string](t, ctx, `document.getElementById('edit-text').value`); v != broken || versions() != 1 {
			t.Fatalf("the text changed or a version was stored (%d versions)", versions())
		}
		if eval[string](t, ctx, `document.getElementById('edit-text').getAttribute('aria-invalid')`) != "true" {
			t.Fatal("the editor is not marked invalid")
		}
		runIn(t, ctx, chromedp.Click(chromedp.CSS(`#edit-errors button`)))
		want := strings.Index(broken, "\n  \"extends\"") + 3
		if got := eval[[]int](t, ctx, `(() => { const ta = document.getElementById('edit-text'); return [document.activeElement === ta ? 1 : 0, ta.selectionStart]; })()`); got[0] != 1 || got[1] != want {
			t.Fatalf("Show line 3, column 3: focus and caret %v, want the caret at %d", got, want)
		}
	})

	t.Run("refused by the admin API: each message names its key path, the text stays", func(t *testing.T) {
		for _, c := range []struct {
			edit       [2]string
			want, path string
		}{
			{editUnknownKey, `unknown field "patern" in toolCalls.rules[0]`, "toolCalls.rules[0].patern"},
			{editBadPattern, "rules[0].pattern: error parsing regexp", "toolCalls.rules[0].pattern"},
		} {
			text := edited(t, original, c.edit)
			setEditor(t, ctx, text)
			saveEditor(t, ctx)
			got := editorErrors(t, ctx)
			if !strings.Contains(got, "The admin API did not store it (400 invalid_definition)") || !strings.Contains(got, c.want) || !strings.Contains(got, "Show "+c.path+" in the editor") {
				t.Fatalf("errors %q, want %q and a link to %s", got, c.want, c.path)
			}
			if v := eval[string](t, ctx, `document.getElementById('edit-text').value`); v != text || versions() != 1 {
				t.Fatalf("the text changed or a version was stored (%d versions)", versions())
			}
			runIn(t, ctx, chromedp.Click(chromedp.CSS(`#edit-errors button`)))
			key := `"` + c.path[strings.LastIndex(c.path, ".")+1:] + `"`
			if got := eval[string](t, ctx, `(() => { const ta = document.getElementById('edit-text'); return ta.value.slice(ta.selectionStart, ta.selectionEnd); })()`); got != key {
				t.Fatalf("Show %s selects %q", c.path, got)
			}
		}
	})

	techChat := func() []byte {
		t.Helper()
		req, _ := http.NewRequest("POST", s.proxy+"/chat/completions", strings.NewReader(eval[string](t, ctx, `document.getElementById('edit-sample').value`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Promptgate-Protocol", "tech")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("proxy: %d", resp.StatusCode)
		}
		return s.up.last()
	}

	t.Run("stored, not active: its diff and the preview of a request under it; activated, it is served", func(t *testing.T) {
		setEditor(t, ctx, edited(t, original, editAddsTheRule))
		// The keyboard saves it: Enter in the note's field submits the form.
		runIn(t, ctx, chromedp.Focus(chromedp.CSS(`#edit-note`)), chromedp.SendKeys(chromedp.CSS(`#edit-note`), "adds the editor rule"+kb.Enter))
		waitFor(t, ctx, "the saved version with its preview", `!document.getElementById('edit-result').hidden && document.querySelector('#edit-preview pre')`)
		if got := eval[string](t, ctx, `document.getElementById('edit-saved').textContent + ' | ' + (document.activeElement && document.activeElement.id)`); got != "Version 2 of protocols/tech is stored, not active | edit-saved" {
			t.Fatalf("after saving: %q", got)
		}
		runIn(t, ctx, script(`document.getElementById('edit-saved').scrollIntoView({block: 'start'})`))
		screenshot(t, ctx, "definitions-new-version")
		if !eval[bool](t, ctx, `[...document.querySelectorAll('#edit-diff td.add')].some((td) => td.textContent.includes(`+js(editorRule)+`))`) ||
			eval[bool](t, ctx, `[...document.querySelectorAll('#edit-diff td.del')].some((td) => td.textContent.includes('EDITOR RULE'))`) {
			t.Fatal("the diff does not show the rule added on the right")
		}
		if got := eval[string](t, ctx, `document.getElementById('edit-preview').textContent`); !strings.Contains(got, "Protocoltech@2 (the new version)") || !strings.Contains(got, editorRule) {
			t.Fatalf("preview %q", got)
		}
		entry := s.adminCall("GET", "/admin/protocols/tech", "", 200)
		if gjson.GetBytes(entry, "active").Int() != 1 || gjson.GetBytes(entry, "versions.1.note").String() != "adds the editor rule" || gjson.GetBytes(entry, "versions.1.author").String() != consoleActor {
			t.Fatalf("stored: %s", entry)
		}
		if sent := techChat(); strings.Contains(string(sent), "EDITOR RULE") {
			t.Fatal("the new version is served before its activation")
		}

		runIn(t, ctx, chromedp.Click(chromedp.CSS(`#edit-activate`)))
		waitFor(t, ctx, "activation dialog", `document.getElementById('dialog').open`)
		if got := eval[string](t, ctx, `document.getElementById('dialog-title').textContent + ' | ' + document.getElementById('dialog-confirm').textContent`); got != "Activate protocols/tech version 2 (now active: 1)? | Activate version 2" {
			t.Fatalf("activation dialog %q", got)
		}
		confirmDialog(t, ctx, "EDITOR RULE")
		waitFor(t, ctx, "active", `document.getElementById('banner').textContent.includes('protocols/tech@2 is active') && document.getElementById('edit-saved').textContent === 'Version 2 of protocols/tech is active'`)
		if got := eval[string](t, ctx, `document.getElementById('def-state').textContent + ' | ' + document.querySelector('#list-protocols button[data-name=tech]').textContent + ' | ' + document.getElementById('edit-activate').hidden`); !strings.HasPrefix(got, "Version 2 is active") || !strings.Contains(got, "| techv2 | true") {
			t.Fatalf("after activation: %q", got)
		}
		// The preview showed, byte for byte, what the upstream now receives for the sample request.
		shown := eval[string](t, ctx, `document.querySelector('#edit-preview details pre').textContent`)
		if sent := techChat(); string(sent) != shown || !strings.Contains(shown, "EDITOR RULE") {
			t.Fatalf("the preview differs from what the upstream received once active:\npreview:  %s\nupstream: %s", shown, sent)
		}
		events := gjson.GetBytes(s.adminCall("GET", "/admin/audit?protocol=tech&verdict=changed", "", 200), "events").Array()
		if len(events) < 2 || events[0].Get("kind").String() != "activated" || events[1].Get("kind").String() != "version_added" || events[1].Get("actor").String() != consoleActor {
			t.Fatalf("audit of the changes: %v", events)
		}
	})

	t.Run("a template's new version is previewed under a protocol based on it", func(t *testing.T) {
		waitFor(t, ctx, "template list", `document.querySelector('#list-templates button[data-name=base_tool_call_v2]')`)
		runIn(t, ctx, script(`document.querySelector('#list-templates button[data-name=base_tool_call_v2]').click()`))
		waitFor(t, ctx, "the template selected, the protocol's editor closed", `document.getElementById('def-title').textContent === 'templates/base_tool_call_v2' && document.getElementById('edit-card').hidden`)
		runIn(t, ctx, chromedp.Click(chromedp.CSS(`#def-new`)))
		waitFor(t, ctx, "the template's editor", `document.getElementById('edit-text').value.includes('"name": "base_tool_call_v2"')`)
		text := edited(t, eval[string](t, ctx, `document.getElementById('edit-text').value`), [2]string{`=== SYSTEM CORE ===\n`, `=== SYSTEM CORE ===\nThe editor's template speaks first.\n`})
		setEditor(t, ctx, text)
		saveEditor(t, ctx)
		waitFor(t, ctx, "the saved template with its preview", `!document.getElementById('edit-result').hidden && document.querySelector('#edit-preview pre')`)
		got := eval[string](t, ctx, `document.getElementById('edit-protocol').value + ' | ' + document.getElementById('edit-preview').textContent`)
		if !strings.Contains(got, "Templatebase_tool_call_v2@2 (the new version)") || !strings.Contains(got, "The editor's template speaks first.") || strings.HasPrefix(got, " | ") {
			t.Fatalf("template preview %q", got)
		}
		if gjson.GetBytes(s.adminCall("GET", "/admin/templates/base_tool_call_v2", "", 200), "active").Int() != 1 {
			t.Fatal("the template's new version is active")
		}
	})

	s.requestsMu.Lock()
	defer s.requestsMu.Unlock()
	for _, e := range s.browserErrors {
		t.Errorf("browser: %s", e)
	}
}

// jsonSeeds are the inputs the differential test of the editor's JSON check starts from:
// definitions, each way JSON can break, escapes, numbers and keys the readers could see otherwise.
var jsonSeeds = []string{
	`{"id": "tech", "promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "- a\n- b"}}, "tools": {"allow": ["*"], "deny": []}}`,
	`{"name": "t", "text": "=== SYSTEM CORE ===\nx \u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\r\t"}`,
	`{"toolCalls": {"rules": [{"tool": "a", "path": "b", "pattern": "^x$", "max": 1.5e3, "min": -0.25, "n": 0}]}}`,
	`{"a": [true, false, null, {}, [], "", 0, -0, 1E-2, 12.5e+07]}`, ` {"é": "ü", "k": "é"} `, `{"a":1,"A":2}`,
	`{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `{"a\u0062":1,"ab":2}`, `{"a":1,}`, `{"a" 1}`, `{"a":01}`, `{"a":1.}`,
	`{"a":.5}`, `{"a":+1}`, `{"a":1e}`, `{"a":tru}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"x\ny\"}",
	"{\"a\":\"x\ty\"}", `{"a":"x}`, `[1,2`, `{"a":1} x`, `{"a":1}{}`, ``, `   `, `{'a':1}`, `{a:1}`, `[1,]`,
	`"x"`, `1`, `null`, `{"a":"\ud800"}`, `{"a":[[[[[[[[[[1]]]]]]]]]]}`, "{\"a\":1}\n", "\ufeff{}",
}

// TestConsoleJSONCheckAgreesWithJSONCheck: the editor's JSON check (PG.scanJSON, run in Chromium)
// refuses exactly what jsoncheck, the admin API's reader of definitions, refuses, on the seeds and
// on thousands of their mutations (a character inserted, deleted or replaced, once or twice) — but
// a lone surrogate's escape, which the editor leaves to the admin API. A text the editor refused
// would never reach the API; one it passed that the API refuses comes back with the API's message.
func TestConsoleJSONCheckAgreesWithJSONCheck(t *testing.T) {
	path := findBrowser()
	if path == "" {
		t.Skip("no Chromium found: install the Debian package chromium (apt-get install chromium), or set " + envBrowser + " to a Chromium or Chrome binary")
	}
	h, err := console.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s := &consoleStack{t: t}
	ctx := s.tab(t, s.browser(path))
	runIn(t, ctx, chromedp.Navigate(srv.URL+"/console/definitions"))
	waitFor(t, ctx, "common.js", `window.PG && window.PG.scanJSON`)

	inputs := slices.Clone(jsonSeeds)
	rng := rand.New(rand.NewPCG(30, 1))
	alphabet := []rune(`{}[]":,\ -+.eE0159aeflnrstu` + "\n\t\u00e9")
	for _, seed := range jsonSeeds {
		for range 120 {
			r := []rune(seed)
			for range 1 + rng.IntN(2) {
				at, c := rng.IntN(len(r)+1), alphabet[rng.IntN(len(alphabet))]
				switch op := rng.IntN(3); {
				case op == 0 || len(r) == 0:
					r = slices.Insert(r, at, c)
				case op == 1:
					r = slices.Delete(r, min(at, len(r)-1), min(at, len(r)-1)+1)
				default:
					r[min(at, len(r)-1)] = c
				}
			}
			inputs = append(inputs, string(r))
		}
	}
	list, _ := json.Marshal(inputs)
	got := eval[[]int](t, ctx, ``+string(list)+`.map((s) => { const r = window.PG.scanJSON(s); return r.error ? r.error.at : -1; })`)
	if len(got) != len(inputs) {
		t.Fatalf("%d answers for %d inputs", len(got), len(inputs))
	}
	refused := 0
	for i, in := range inputs {
		err := jsoncheck.Value([]byte(in), jsoncheck.Limits{MaxDepth: 1000})
		if err != nil {
			refused++
		}
		switch {
		case err == nil && got[i] >= 0:
			t.Errorf("the editor refuses (at %d) what the admin API reads: %q", got[i], in)
		case err != nil && got[i] < 0 && !errors.Is(err, jsoncheck.InvalidUTF8):
			t.Errorf("the editor passes what the admin API refuses (%v): %q", err, in)
		}
	}
	if refused < 300 || len(inputs)-refused < 300 {
		t.Errorf("%d of %d inputs refused: the mutations do not test both sides", refused, len(inputs))
	}
}
