// Package promptgate_test holds the tests that keep the layout true: the package graph runs one way (see
// docs/architecture.md), and every package says in one doc comment what it owns.
package promptgate_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is this module's path.
const module = "github.com/promptgate/promptgate"

// pkg is one package of the module: its directory (slash-separated, "." for the root) and what its non-test
// files import of the module and outside it, and how many of them carry a package doc comment.
type pkg struct {
	dir     string
	imports []string // module packages, as directories
	docs    int
	files   int
}

// packages reads every package of the module from its sources, testdata and hidden folders aside.
func packages(t *testing.T) map[string]*pkg {
	t.Helper()
	out := map[string]*pkg{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		p := out[dir]
		if p == nil {
			p = &pkg{dir: dir}
			out[dir] = p
		}
		p.files++
		if f.Doc != nil {
			p.docs++
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if rest, ok := strings.CutPrefix(ip, module+"/"); ok && !slices.Contains(p.imports, rest) {
				p.imports = append(p.imports, rest)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// under reports whether dir is root or below it.
func under(dir, root string) bool { return dir == root || strings.HasPrefix(dir, root+"/") }

// rule forbids the packages it covers (from) to import the packages it names (to), unless allowed.
type rule struct {
	why   string
	from  func(dir string) bool
	to    func(dir string) bool
	allow func(from, to string) bool // exceptions; nil allows none
}

func in(roots ...string) func(string) bool {
	return func(dir string) bool {
		for _, r := range roots {
			if under(dir, r) {
				return true
			}
		}
		return false
	}
}

// proxyProper is the proxy and its parts, but not its telemetry packages, which any stage may import.
func proxyProper(dir string) bool { return under(dir, "proxy") && !under(dir, "proxy/telemetry") }

func exactly(dirs ...string) func(string) bool {
	return func(dir string) bool { return slices.Contains(dirs, dir) }
}

// rules is the intended graph, as what may not be imported. Read top to bottom, it is the layering of
// docs/architecture.md: store at the bottom, then policy and telemetry, assembly, plugins, the proxy's parts,
// the proxy, what sits on it (admin, mitm, config), and cmd at the top.
var rules = []rule{
	{why: "store is a leaf", from: in("store"),
		to: func(d string) bool { return !under(d, "store") }},
	{why: "policy and assembly never import the proxy, the plugins, telemetry or cmd", from: in("policy", "assembly"),
		to: in("proxy", "plugins", "cmd")},
	{why: "policy does not know the prompt", from: in("policy"), to: in("assembly")},
	{why: "telemetry may be imported by any stage, so it imports none", from: in("proxy/telemetry"),
		to: func(d string) bool { return proxyProper(d) || in("plugins", "assembly", "cmd")(d) }},
	{why: "plugins/sdk, plugins/gather and the examples never import the host or the proxy", from: in("plugins/sdk", "plugins/gather", "plugins/examples"),
		to: func(d string) bool { return d == "plugins" || under(d, "proxy") }},
	{why: "the plugin host never imports the proxy, its telemetry included (serve hands it a span opener)", from: in("plugins"), to: in("proxy")},
	{why: "a surface does not import the proxy or another surface", from: in("proxy/surface"),
		to: func(d string) bool {
			return proxyProper(d) && !under(d, "proxy/surface") && !under(d, "proxy/relay") && !under(d, "proxy/sse")
		}},
	{why: "a surface package does not import another surface", from: func(d string) bool { return strings.HasPrefix(d, "proxy/surface/") },
		to:    func(d string) bool { return strings.HasPrefix(d, "proxy/surface/") },
		allow: func(from, to string) bool { return under(to, from) }},
	{why: "the stream relay and the SSE reader know no surface", from: in("proxy/relay", "proxy/sse"), to: in("proxy/surface")},
	{why: "the proxy does not import what is built on it", from: exactly("proxy"), to: in("proxy/config", "proxy/admin", "proxy/mitm", "proxy/prepfuzz")},
	{why: "the HTTPS-proxy door is handed its pipeline, it does not build one", from: in("proxy/mitm"), to: exactly("proxy", "proxy/config")},
	{why: "only cmd composes the config file", from: func(d string) bool { return !under(d, "cmd") }, to: in("proxy/config")},
	{why: "nothing imports cmd", from: func(string) bool { return true }, to: in("cmd")},
}

// TestImportsOnlyDownward fails when a package imports against the intended graph.
func TestImportsOnlyDownward(t *testing.T) {
	t.Parallel()
	pkgs := packages(t)
	for _, want := range []string{"store", "policy", "assembly", "plugins", "proxy", "proxy/surface", "proxy/telemetry/tracing", "cmd/promptgate"} {
		if pkgs[want] == nil {
			t.Fatalf("package %s not found: the test reads the wrong tree", want)
		}
	}
	for _, p := range pkgs {
		for _, imp := range p.imports {
			for _, r := range rules {
				if r.from(p.dir) && r.to(imp) && (r.allow == nil || !r.allow(p.dir, imp)) {
					t.Errorf("%s imports %s: %s", p.dir, imp, r.why)
				}
			}
		}
	}
}

// TestRulesCatchAnImport checks the rules on imports that break them, so that a rule that can never fail is
// noticed.
func TestRulesCatchAnImport(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ from, to string }{
		{"store", "policy"}, {"store/etcdstore", "proxy"}, {"policy", "proxy"}, {"assembly", "proxy/surface"},
		{"policy/vet", "assembly"}, {"proxy/telemetry/metrics", "proxy"}, {"policy", "proxy/telemetry/tracing"}, {"plugins/sdk", "plugins"},
		{"plugins/examples/filememory", "proxy"}, {"plugins", "proxy/surface"}, {"plugins", "proxy/telemetry/tracing"}, {"proxy/surface/chat", "proxy"},
		{"proxy/surface/chat", "proxy/surface/responses"}, {"proxy/relay", "proxy/surface/chat"},
		{"proxy", "proxy/config"}, {"proxy/mitm", "proxy"}, {"proxy/admin", "proxy/config"}, {"proxy", "cmd/promptgate"},
	} {
		broken := false
		for _, r := range rules {
			broken = broken || (r.from(c.from) && r.to(c.to) && (r.allow == nil || !r.allow(c.from, c.to)))
		}
		if !broken {
			t.Errorf("%s importing %s breaks no rule", c.from, c.to)
		}
	}
	for _, c := range []struct{ from, to string }{
		{"proxy/surface/chat", "proxy/surface"}, {"proxy/surface/chat", "proxy/relay"}, {"proxy", "proxy/surface/chat"},
		{"cmd/promptgate", "proxy/config"}, {"policy/audit", "store/boltfile"}, {"proxy/surface/chat", "proxy/telemetry/tracing"},
	} {
		for _, r := range rules {
			if r.from(c.from) && r.to(c.to) && (r.allow == nil || !r.allow(c.from, c.to)) {
				t.Errorf("%s importing %s breaks %q", c.from, c.to, r.why)
			}
		}
	}
}

// TestOnePackageDoc: every package has exactly one doc comment, saying what it owns (and does not).
func TestOnePackageDoc(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		if p.dir == "." {
			continue // this file's package: tests only
		}
		if p.docs != 1 {
			t.Errorf("%s: %d package doc comments in %d files, want exactly one", p.dir, p.docs, p.files)
		}
	}
}
