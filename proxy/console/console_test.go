package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(b)
}

func TestPagesRender(t *testing.T) {
	t.Parallel()
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Pages() {
		resp, body := get(t, h, "GET", Prefix+p.Name)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("%s: %d", p.Name, resp.StatusCode)
		}
		for _, want := range []string{
			`<title>` + p.Title + ` · promptgate console</title>`,
			`<script src="/console/static/` + p.Name + `.js" defer></script>`,
			`<a href="/console/` + p.Name + `" aria-current="page">`,
			`<body data-page="` + p.Name + `">`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %s", p.Name, want)
			}
		}
		if strings.Count(body, `aria-current="page"`) != 1 {
			t.Errorf("%s: %d current pages in the navigation", p.Name, strings.Count(body, `aria-current`))
		}
		// Every script the page names is served.
		for _, m := range regexp.MustCompile(`(?:src|href)="(/console/static/[^"]+)"`).FindAllStringSubmatch(body, -1) {
			if resp, _ := get(t, h, "GET", m[1]); resp.StatusCode != 200 {
				t.Errorf("%s names %s, which is not served (%d)", p.Name, m[1], resp.StatusCode)
			}
		}
	}
	if _, index := get(t, h, "GET", Prefix); !strings.Contains(index, `<body data-page="decisions">`) {
		t.Error("the folder does not serve the first page")
	}
	if resp, _ := get(t, h, "HEAD", Prefix+"tools"); resp.StatusCode != 200 {
		t.Errorf("HEAD: %d", resp.StatusCode)
	}
	if resp, _ := get(t, h, "POST", Prefix+"tools"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	for _, p := range []string{Prefix + "static/", Prefix + "static/x.js", Prefix + "static/sub/common.js", Prefix + "templates/layout.html", Prefix + "static/console.go", "/elsewhere"} {
		if resp, _ := get(t, h, "GET", p); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
}

// The pages must run under a Content-Security-Policy without 'unsafe-inline': no inline script,
// handler or style in the HTML; and the scripts must put text into the page only as text.
func TestNoInlineCodeAndNoHTMLSinks(t *testing.T) {
	t.Parallel()
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	inline := []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`),          // a script with a body
		regexp.MustCompile(`<script(?:\s(?:[^s>]|s[^r])*)?>`),        // a script without src
		regexp.MustCompile(`\son[a-z]+\s*=`),                         // an event handler attribute
		regexp.MustCompile(`\sstyle\s*=|<style`),                     // inline style
		regexp.MustCompile(`(?i)(?:src|href)\s*=\s*"(?:https?:)?//`), // another origin
		regexp.MustCompile(`(?i)javascript:`),
	}
	for _, p := range Pages() {
		_, body := get(t, h, "GET", Prefix+p.Name)
		for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1) {
			if !strings.Contains(tag, ` src="/console/static/`) {
				t.Errorf("%s: %s is not a file of the console", p.Name, tag)
			}
		}
		for _, re := range inline {
			if m := re.FindString(body); m != "" {
				t.Errorf("%s: %q matches %s", p.Name, m, re)
			}
		}
	}
	sinks := regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setTimeout\(\s*['"]|https?://`)
	err = fs.WalkDir(files, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".js") {
			return err
		}
		b, err := fs.ReadFile(files, path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			// The SVG namespace is a name, not a place to fetch from.
			if m := sinks.FindString(strings.ReplaceAll(line, "'http://www.w3.org/2000/svg'", "")); m != "" {
				t.Errorf("%s:%d: %q: build nodes with textContent (PG.el) instead", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
