package gemini

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/surface"
)

// routeTarget serves path through a net/http.ServeMux with the surface's routes, as the proxy
// listener does, and reads the matched route's target from the mux's wildcard value.
func routeTarget(t *testing.T, path string) (tgt surface.Target, matched, ok bool, err error) {
	t.Helper()
	mux := http.NewServeMux()
	for _, rt := range (Surface{}).Routes() {
		mux.HandleFunc(rt.Pattern, func(_ http.ResponseWriter, r *http.Request) {
			matched = true
			tgt, ok, err = rt.Target(r.PathValue, r.URL.Query())
		})
	}
	req := httptest.NewRequest(http.MethodPost, "http://x"+path, nil)
	mux.ServeHTTP(httptest.NewRecorder(), req)
	return tgt, matched, ok, err
}

// TestRouteTarget reads the model and the method from the path as Google's router does: the last
// segment split at its last colon, a colon escaped as %3A read as one; a model name that could be
// read otherwise is refused, other methods pass through, and a stream needs alt=sse.
func TestRouteTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path         string
		model        string
		stream, ok   bool
		refused      bool
		matched      bool
		refusedParam string
	}{
		{path: "/v1beta/models/gemini-2.5-flash:generateContent", model: "gemini-2.5-flash", ok: true, matched: true},
		{path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", model: "gemini-2.5-flash", stream: true, ok: true, matched: true},
		{path: "/v1beta/models/gemini-2.5-flash%3AgenerateContent", model: "gemini-2.5-flash", ok: true, matched: true},
		{path: "/v1beta/models/gemini-2.5-flash%3agenerateContent", model: "gemini-2.5-flash", ok: true, matched: true},
		{path: "/v1beta/models/gemini-2.5-flash:GenerateContent", model: "gemini-2.5-flash", ok: true, matched: true},
		{path: "/v1beta/tunedModels/my-model-1:generateContent", model: "tunedModels/my-model-1", ok: true, matched: true},
		{path: "/v1beta/models/gemini-2.5-flash:countTokens", matched: true},
		{path: "/v1beta/models/gemini-2.5-flash", matched: true},
		{path: "/v1beta/models/a:b:generateContent", ok: true, refused: true, matched: true, refusedParam: "model"},
		{path: "/v1beta/models/a%3Ab:generateContent", ok: true, refused: true, matched: true, refusedParam: "model"},
		{path: "/v1beta/models/a%2Fb:generateContent", ok: true, refused: true, matched: true, refusedParam: "model"},
		{path: "/v1beta/models/a%253Ab:generateContent", ok: true, refused: true, matched: true, refusedParam: "model"},
		{path: "/v1beta/models/:generateContent", ok: true, refused: true, matched: true, refusedParam: "model"},
		{path: "/v1beta/models/m:streamGenerateContent", ok: true, refused: true, matched: true, refusedParam: "alt"},
		{path: "/v1beta/models/m:streamGenerateContent?alt=json", ok: true, refused: true, matched: true, refusedParam: "alt"},
		{path: "/v1beta/models/m:streamGenerateContent?alt=sse&$alt=json", ok: true, refused: true, matched: true, refusedParam: "alt"},
		{path: "/v1beta/models/m:generateContent?alt=sse", ok: true, refused: true, matched: true, refusedParam: "alt"},
		{path: "/v1beta/models/m:generateContent?alt=json", model: "m", ok: true, matched: true},
		{path: "/v1beta/models/a/b:generateContent"},
	} {
		tgt, matched, ok, err := routeTarget(t, tc.path)
		if matched != tc.matched || ok != tc.ok || (err != nil) != tc.refused {
			t.Errorf("%s: matched %v ok %v err %v", tc.path, matched, ok, err)
			continue
		}
		var pe *policy.Error
		if tc.refused && (!errors.As(err, &pe) || pe.Param != tc.refusedParam) {
			t.Errorf("%s: refused with %v, want param %s", tc.path, err, tc.refusedParam)
		}
		if !tc.refused && ok && (tgt.Model != tc.model || tgt.Stream != tc.stream) {
			t.Errorf("%s: target %+v", tc.path, tgt)
		}
	}
}

// parseBody parses body as the pipeline does.
func parseBody(t *testing.T, body string) (surface.Request, error) {
	t.Helper()
	return parse(assembly.NewBody([]byte(body)), surface.Target{Model: "m", Stream: true})
}

func TestParse(t *testing.T) {
	t.Parallel()
	req, err := parseBody(t, `{"systemInstruction":{"role":"system","parts":[{"text":"a"},{"text":"b"}]},
	  "contents":[{"role":"user","parts":[{"text":"hi"},{"text":"there"}]},{"role":"model","parts":[{"text":"yes"}]},{"parts":[{"text":"last"},{"text":"note","thought":true}]}],
	  "tools":[{"functionDeclarations":[{"name":"get_weather","description":"Weather.","parameters":{"type":"OBJECT","properties":{"city":{"type":"STRING","nullable":true},
	      "days":{"type":"INTEGER","minimum":"1","maxItems":"3","propertyOrdering":["x"]}},"required":["city"]}},
	    {"name":"raw","parametersJsonSchema":{"type":"object","additionalProperties":false}}]},
	   {"googleSearch":{},"code_execution":{}},{"computerUse":{"environment":"ENVIRONMENT_BROWSER"}}],
	  "cachedContent":"cachedContents/abc"}`)
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "m" || !req.Stream || req.LatestUser != "last" || strings.Join(req.Application, "|") != "a|b" || req.StoredPrompt != "cachedContents/abc" || !req.NativeTools {
		t.Errorf("request %+v", req)
	}
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Name+"/"+strings.Join(tl.Aliases, ",")+"/"+map[bool]string{true: "upstream", false: "client"}[tl.UpstreamOnly])
	}
	if got := strings.Join(names, " "); got != "get_weather//client raw//client google_search/googleSearch/upstream code_execution/codeExecution/upstream computer_use/computerUse/client" {
		t.Errorf("tools %s", got)
	}
	wantSchema := `{"type":"object","properties":{"city":{"type":["string","null"]},"days":{"type":"integer","minimum":1,"maxItems":3}},"required":["city"]}`
	if got := string(req.Tools[0].Schema); got != wantSchema {
		t.Errorf("schema\n got %s\nwant %s", got, wantSchema)
	}
	if got := string(req.Tools[1].Schema); got != `{"type":"object","additionalProperties":false}` {
		t.Errorf("json schema %s", got)
	}
	for _, bad := range []string{
		`{"contents":"x"}`,
		`{"contents":[1]}`,
		`{"contents":[{"parts":{}}]}`,
		`{"contents":[{"parts":[1]}]}`,
		`{"contents":[],"systemInstruction":"be nice"}`,
		`{"contents":[],"systemInstruction":{"parts":[{"inlineData":{}}]}}`,
		`{"contents":[],"systemInstruction":{"parts":[]},"system_instruction":{"parts":[]}}`,
		`{"contents":[{"parts":[{"functionCall":{"name":"a"},"function_call":{"name":"b"}}]}]}`,
		`{"contents":[],"tools":{}}`,
		`{"contents":[],"tools":[{"functionDeclarations":[{"description":"no name"}]}]}`,
		`{"contents":[],"tools":[{"functionDeclarations":[{"name":"a"}],"function_declarations":[{"name":"b"}]}]}`,
		`{"contents":[],"tools":[{"functionDeclarations":[{"name":"a","parameters":{},"parametersJsonSchema":{}}]}]}`,
		`{"contents":[],"cachedContent":"a","cached_content":"b"}`,
	} {
		if _, err := parseBody(t, bad); err == nil {
			t.Errorf("%s was read", bad)
		}
	}
}

func TestCheckToolChoice(t *testing.T) {
	t.Parallel()
	kept := []policy.Tool{{Name: "get_weather"}, {Name: "google_search", UpstreamOnly: true}}
	onlySearch := []policy.Tool{{Name: "google_search", UpstreamOnly: true}}
	for _, tc := range []struct {
		body string
		kept []policy.Tool
		ok   bool
	}{
		{`{}`, kept, true},
		{`{"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}}}`, kept, true},
		{`{"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["delete_all"]}}}`, kept, false},
		{`{"tool_config":{"function_calling_config":{"allowed_function_names":["delete_all"]}}}`, kept, false},
		{`{"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}`, onlySearch, false},
		{`{"toolConfig":{"functionCallingConfig":{"mode":"NONE"}}}`, nil, true},
		{`{"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}},"tool_config":{}}`, kept, false},
	} {
		err := checkToolChoice(assembly.NewBody([]byte(tc.body)), tc.kept)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.body, err)
		}
		var pe *policy.Error
		if err != nil && !tc.ok && strings.Contains(tc.body, "delete_all") && (!errors.As(err, &pe) || pe.Code != policy.CodeToolChoiceNotAllowed) {
			t.Errorf("%s: %v is not tool_choice_not_allowed", tc.body, err)
		}
	}
}

// TestRewrite writes the layered prompt into systemInstruction (whichever name the client gave it),
// filters the tools, removes the extension and keeps every other byte.
func TestRewrite(t *testing.T) {
	t.Parallel()
	body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"system_instruction":{"parts":[{"text":"app"}]},
	  "tools":[{"functionDeclarations":[{"name":"get_weather"},{"name":"delete_all"}]},{"googleSearch":{}},{"codeExecution":{},"functionDeclarations":[{"name":"x"}]}],
	  "toolConfig":{"functionCallingConfig":{"mode":"AUTO"}},"safetySettings":[{"category":"HARM_CATEGORY_HATE_SPEECH","threshold":"BLOCK_NONE"}],
	  "promptgate":{"context":{"a":"b"}}}`
	p := assembly.NewPrompt("=== SYSTEM CORE ===\nrules")
	out, err := rewrite(assembly.NewBody([]byte(body)), p, []policy.Tool{{Name: "get_weather"}, {Name: "code_execution"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],
	  "tools":[{"functionDeclarations":[{"name":"get_weather"}]},{"codeExecution":{}}],
	  "toolConfig":{"functionCallingConfig":{"mode":"AUTO"}},"safetySettings":[{"category":"HARM_CATEGORY_HATE_SPEECH","threshold":"BLOCK_NONE"}],
	  "systemInstruction":{"parts":[{"text":"=== SYSTEM CORE ===\nrules"}]}}`
	if !sameJSON(out, want) {
		t.Errorf("rewrite\n got %s\nwant %s", out, want)
	}
	out, err = rewrite(assembly.NewBody([]byte(body)), p, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if gjson.GetBytes(out, "tools").Exists() || gjson.GetBytes(out, "toolConfig").Exists() {
		t.Errorf("tools all removed: %s", out)
	}
}

// sameJSON compares two JSON texts as values, keys in order.
func sameJSON(got []byte, want string) bool {
	return gjson.ParseBytes(got).Get("@ugly").Raw == gjson.Parse(want).Get("@ugly").Raw
}
