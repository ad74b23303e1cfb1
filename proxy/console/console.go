// Package console is promptgate's web console: the HTML pages (decisions, preview, definitions,
// tools, MCP, health), their style sheet and scripts, embedded in the binary and served under
// /console/ on the admin listener. The pages hold no data: their scripts read and change everything
// through the admin API, with the token the operator enters once (kept in the tab's session
// storage, never in a URL or cookie). No script or style is inline, and nothing is loaded from
// another origin, so the admin listener's strict Content-Security-Policy applies unchanged.
//
// It owns the pages and their assets. It does not authenticate, set security headers or refuse
// cross-site requests (package admin, which mounts it, does), nor hold any data or endpoint of its
// own.
package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Prefix is the folder the console is served under.
const Prefix = "/console/"

//go:embed templates/*.html static/*
var files embed.FS

// Page is one page of the console.
type Page struct {
	// Name is the page's path under Prefix and the base name of its script (static/NAME.js).
	Name  string
	Title string
}

// Pages are the console's pages, in the order of its navigation; the first is also served at
// Prefix.
func Pages() []Page {
	return []Page{
		{"decisions", "Decisions"},
		{"preview", "Preview"},
		{"definitions", "Definitions"},
		{"tools", "Tools"},
		{"mcp", "MCP"},
		{"health", "Health"},
	}
}

// contentTypes are the types of the static files, by extension.
var contentTypes = map[string]string{
	".css": "text/css; charset=utf-8",
	".js":  "text/javascript; charset=utf-8",
}

// handler serves the rendered pages and the static files.
type handler struct {
	pages  map[string][]byte // by path under Prefix ("" for Prefix itself)
	static fs.FS
}

// New renders every page once and returns the handler of everything under Prefix: GET and HEAD of a
// page or a static file; anything else is 404.
func New() (http.Handler, error) {
	static, err := fs.Sub(files, "static")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	h := &handler{pages: map[string][]byte{}, static: static}
	pages := Pages()
	for _, p := range pages {
		t, err := template.ParseFS(files, "templates/layout.html", "templates/"+p.Name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: page %s: %w", p.Name, err)
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, "layout", struct {
			Page
			Nav []Page
		}{p, pages}); err != nil {
			return nil, fmt.Errorf("console: page %s: %w", p.Name, err)
		}
		h.pages[p.Name] = buf.Bytes()
	}
	h.pages[""] = h.pages[pages[0].Name]
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if page, ok := h.pages[rest]; ok {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
		return
	}
	name, ok := strings.CutPrefix(rest, "static/")
	ct := contentTypes[path.Ext(name)]
	if !ok || ct == "" || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	b, err := fs.ReadFile(h.static, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	_, _ = w.Write(b)
}
