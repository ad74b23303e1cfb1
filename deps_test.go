// Package promptgate_test holds the tests that keep the layout true: the package graph runs one way
// (see docs/architecture.md), and every package says in one doc comment what it owns.
package promptgate_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is this module's path.
const module = "github.com/promptgate/promptgate"

// pkg is one package of the module: its directory (slash-separated, "." for the root), the module
// packages its non-test files import (as directories), and how many of those files carry a package
// doc comment.
type pkg struct {
	dir     string
	imports []string
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

// layer is a set of packages and the layers they may import. The graph is an allowlist: a package
// that no layer names fails the test, and an import is allowed only where a rule says so. Patterns
// are a directory, "dir/..." (it and everything below) or "dir/*" (its direct children).
type layer struct {
	name string
	pkgs []string
	// may are the layers its packages may import; self lets them import each other.
	may  []string
	self bool
	why  string
}

// layers is the intended graph of docs/architecture.md, bottom to top.
var layers = []layer{
	{name: "store", pkgs: []string{"store/..."}, self: true,
		why: "store is a leaf: definitions and their versions know nothing of what uses them"},
	{name: "base", pkgs: []string{"policy/jsoncheck", "policy/modules", "policy/flow/scan", "proxy/sse", "proxy/guard", "proxy/owners",
		"proxy/origin", "proxy/console", "proxy/telemetry/redact", "proxy/prepfuzz"},
		why: "readers and small parts that know nothing else of promptgate"},
	{name: "decisions", pkgs: []string{"policy/audit"}, may: []string{"store"},
		why: "the decision log's event and its sinks (its ring is a bolt file)"},
	{name: "vet", pkgs: []string{"policy/vet"}, may: []string{"base"},
		why: "call vetting knows JSON and schemas, not conversations"},
	{name: "flow", pkgs: []string{"policy/flow", "policy/flow/flowtest"}, may: []string{"base", "vet"}, self: true,
		why: "information flow judges a surface-neutral transcript"},
	{name: "policy", pkgs: []string{"policy"}, may: []string{"base", "vet", "flow"},
		why: "protocols and routing compile the rules, they do not know the prompt"},
	{name: "learn", pkgs: []string{"policy/learn"}, may: []string{"store", "base", "vet", "flow", "policy"},
		why: "learn mode's counters read calls through flow and propose protocols that policy loads; its file is a bolt file"},
	{name: "assembly", pkgs: []string{"assembly", "assembly/ctxjson"}, may: []string{"base", "policy"}, self: true,
		why: "the layered prompt is built from policy's decisions"},
	{name: "assemblytest", pkgs: []string{"assembly/assemblytest"}, may: []string{"base", "policy", "assembly", "store"},
		why: "the assembly test kit loads the built-in templates"},
	{name: "telemetry", pkgs: []string{"proxy/telemetry/metrics", "proxy/telemetry/tracing"}, may: []string{"base", "decisions"}, self: true,
		why: "telemetry is imported by the proxy's stages, so it imports none of them (metrics counts decision events)"},
	{name: "sdk", pkgs: []string{"plugins/sdk"}, may: []string{"base"},
		why: "what a plugin author imports pulls in nothing of the host or the proxy"},
	{name: "plugin programs", pkgs: []string{"plugins/examples/...", "plugins/internal/testplugins/..."}, may: []string{"sdk"},
		why: "a plugin is written against the sdk alone"},
	{name: "gather", pkgs: []string{"plugins/gather"}, may: []string{"base", "assembly"},
		why: "the context query and result that the proxy and the host share"},
	{name: "host", pkgs: []string{"plugins", "plugins/internal/answer", "plugins/sdk/sdktest"}, may: []string{"base", "assembly", "sdk", "gather"}, self: true,
		why: "the plugin host never imports the proxy, its telemetry included (serve hands it a span opener)"},
	{name: "join", pkgs: []string{"proxy/mcpjoin"}, may: []string{"base", "vet", "flow"},
		why: "the join of the model's calls and the MCP door's knows calls and digests, not either path"},
	{name: "pins", pkgs: []string{"proxy/mcppin"}, may: []string{"base", "vet", "flow"},
		why: "the stored format of an MCP server's pinned definitions: the store's validation and the door read it"},
	{name: "relay", pkgs: []string{"proxy/relay", "proxy/relay/relaytest"}, may: []string{"base", "vet", "flow"}, self: true,
		why: "the stream relay knows no surface"},
	{name: "surface", pkgs: []string{"proxy/surface"}, may: []string{"base", "vet", "flow", "policy", "assembly", "relay"},
		why: "what a surface is, and what surfaces share"},
	{name: "surfaces", pkgs: []string{"proxy/surface/*"}, may: []string{"base", "vet", "flow", "policy", "assembly", "relay", "surface"},
		why: "a surface does not import the proxy or another surface"},
	{name: "parts", pkgs: []string{"proxy/toolseen"}, may: []string{"base", "policy"},
		why: "the proxy's small parts do not import the proxy"},
	{name: "proxy", pkgs: []string{"proxy"},
		may: []string{"store", "base", "decisions", "vet", "flow", "policy", "learn", "assembly", "telemetry", "gather", "relay", "surface", "surfaces", "parts", "join", "pins"},
		why: "the proxy does not import what is built on it (admin, the door, config) nor the plugin host"},
	{name: "policytest", pkgs: []string{"proxy/policytest"}, may: []string{"store", "base", "decisions", "vet", "policy", "assembly", "relay", "proxy"},
		why: "policy tests run cases through the proxy's own handler; the CLI and the admin API run them, the proxy does not know them"},
	{name: "mcp door", pkgs: []string{"proxy/mcp"}, may: []string{"store", "base", "decisions", "vet", "flow", "policy", "telemetry", "proxy", "join", "pins"},
		why: "the MCP door sits on the proxy's engine (its Governance), shares the join and keeps its pins in the store; admin and config know it, not the reverse"},
	{name: "door", pkgs: []string{"proxy/mitm"}, may: []string{"base"},
		why: "the HTTPS-proxy door is handed its pipeline, it does not build one"},
	{name: "admin", pkgs: []string{"proxy/admin"}, may: []string{"store", "base", "decisions", "policy", "learn", "host", "proxy", "parts", "policytest"},
		why: "the admin API sits on the proxy"},
	{name: "config", pkgs: []string{"proxy/config"}, may: []string{"base", "decisions", "policy", "assembly", "host", "proxy", "door", "mcp door"},
		why: "the config file is composed from the sections of the packages below it; only cmd imports it"},
	{name: "demo model", pkgs: []string{"proxy/demo"},
		why: "the scripted upstream speaks the APIs from the far side of the wire: it imports nothing of promptgate, so what it checks is the proxy as a real upstream sees it"},
	{name: "cmd", pkgs: []string{"cmd/..."}, self: true, why: "cmd wires everything; nothing imports it",
		may: []string{"store", "base", "decisions", "vet", "flow", "policy", "learn", "assembly", "assemblytest", "telemetry", "sdk",
			"gather", "host", "relay", "surface", "surfaces", "parts", "proxy", "door", "admin", "config", "join", "pins", "mcp door", "demo model",
			"policytest"}},
}

// matches reports whether dir is covered by a layer pattern.
func matches(pattern, dir string) bool {
	switch {
	case strings.HasSuffix(pattern, "/..."):
		root := strings.TrimSuffix(pattern, "/...")
		return dir == root || strings.HasPrefix(dir, root+"/")
	case strings.HasSuffix(pattern, "/*"):
		parent := strings.TrimSuffix(pattern, "/*")
		return strings.HasPrefix(dir, parent+"/") && !strings.Contains(dir[len(parent)+1:], "/")
	}
	return dir == pattern
}

// layerOf returns the layers a package belongs to: the most specific pattern wins
// ("policy/flow/scan" over "policy/flow"; an exact name over a wildcard), so each package should
// get exactly one.
func layerOf(dir string) []*layer {
	var out []*layer
	best := -1
	for i := range layers {
		for _, p := range layers[i].pkgs {
			if !matches(p, dir) {
				continue
			}
			score := len(p)
			if !strings.HasSuffix(p, "...") && !strings.HasSuffix(p, "*") {
				score += 1000
			}
			switch {
			case score > best:
				out, best = []*layer{&layers[i]}, score
			case score == best && !slices.Contains(out, &layers[i]):
				out = append(out, &layers[i])
			}
		}
	}
	return out
}

// allowed reports whether a package of layer from may import one of layer to, directly.
func allowed(from, to *layer) bool {
	return from == to && from.self || slices.Contains(from.may, to.name)
}

// reach is every layer that a layer's packages may depend on, transitively.
func reach(l *layer) map[string]bool {
	out := map[string]bool{}
	var walk func(*layer)
	walk = func(l *layer) {
		for _, n := range l.may {
			if out[n] {
				continue
			}
			out[n] = true
			for i := range layers {
				if layers[i].name == n {
					walk(&layers[i])
				}
			}
		}
	}
	if l.self {
		out[l.name] = true
	}
	walk(l)
	return out
}

// closure is every module package that dir depends on, transitively (itself left out).
func closure(pkgs map[string]*pkg, dir string) []string {
	seen := map[string]bool{dir: true}
	var out []string
	var walk func(string)
	walk = func(d string) {
		p := pkgs[d]
		if p == nil {
			return
		}
		for _, imp := range p.imports {
			if !seen[imp] {
				seen[imp] = true
				out = append(out, imp)
				walk(imp)
			}
		}
	}
	walk(dir)
	slices.Sort(out)
	return out
}

// TestEveryPackageInOneLayer: the allowlist names every package, once.
func TestEveryPackageInOneLayer(t *testing.T) {
	t.Parallel()
	for dir := range packages(t) {
		if dir == "." {
			continue
		}
		switch ls := layerOf(dir); len(ls) {
		case 0:
			t.Errorf("%s belongs to no layer: add it to layers in deps_test.go with what it may import", dir)
		case 1:
		default:
			t.Errorf("%s belongs to %d layers (%s, %s): make one pattern more specific", dir, len(ls), ls[0].name, ls[1].name)
		}
	}
}

// TestImportsOnlyDownward fails when a package imports, directly or through others, a package that
// its layer may not reach.
func TestImportsOnlyDownward(t *testing.T) {
	t.Parallel()
	pkgs := packages(t)
	for _, want := range []string{"store", "policy", "policy/flow", "assembly", "plugins", "plugins/sdk", "proxy", "proxy/surface", "proxy/telemetry/tracing", "cmd/promptgate"} {
		if pkgs[want] == nil {
			t.Fatalf("package %s not found: the test reads the wrong tree", want)
		}
	}
	for dir, p := range pkgs {
		ls := layerOf(dir)
		if dir == "." || len(ls) != 1 {
			continue
		}
		from := ls[0]
		for _, imp := range p.imports {
			if to := layerOf(imp); len(to) == 1 && !allowed(from, to[0]) {
				t.Errorf("%s (%s) imports %s (%s): %s", dir, from.name, imp, to[0].name, from.why)
			}
		}
		ok := reach(from)
		for _, dep := range closure(pkgs, dir) {
			if to := layerOf(dep); len(to) == 1 && !ok[to[0].name] {
				t.Errorf("%s (%s) depends on %s (%s) through its imports: %s", dir, from.name, dep, to[0].name, from.why)
			}
		}
	}
}

// TestLayersCatchAnImport checks the allowlist on imports that must break it (among them edges that
// the former list of forbidden pairs let through), so that a rule that can never fail is noticed,
// and on imports that must pass.
func TestLayersCatchAnImport(t *testing.T) {
	t.Parallel()
	check := func(from, to string) bool {
		f, g := layerOf(from), layerOf(to)
		if len(f) != 1 || len(g) != 1 {
			t.Fatalf("%s or %s has no single layer", from, to)
		}
		return allowed(f[0], g[0])
	}
	for _, c := range []struct{ from, to string }{
		{"store", "policy"}, {"store/etcdstore", "proxy"}, {"policy", "proxy"}, {"assembly", "proxy/surface"},
		{"policy/vet", "assembly"}, {"policy/vet", "policy/flow"}, {"policy/flow", "policy"}, {"policy/flow/scan", "policy/vet"},
		{"proxy/telemetry/metrics", "proxy"}, {"policy", "proxy/telemetry/tracing"}, {"plugins/sdk", "plugins"},
		{"plugins/sdk", "assembly/ctxjson"}, {"plugins/examples/filememory", "proxy"}, {"plugins/examples/filememory", "policy/jsoncheck"},
		{"plugins", "proxy/surface"}, {"plugins", "proxy/telemetry/tracing"}, {"proxy/surface/chat", "proxy"},
		{"proxy/surface/chat", "proxy/surface/responses"}, {"proxy/relay", "proxy/surface/chat"}, {"proxy/relay", "proxy/surface"},
		{"proxy", "proxy/config"}, {"proxy", "plugins"}, {"proxy/mitm", "proxy"}, {"proxy/mitm", "proxy/admin"},
		{"proxy/admin", "proxy/config"}, {"proxy", "cmd/promptgate"}, {"proxy/toolseen", "proxy"}, {"proxy/guard", "proxy"},
		{"proxy/sse", "proxy/relay"}, {"proxy/origin", "proxy/mitm"}, {"proxy/console", "proxy/admin"},
		{"proxy/telemetry/metrics", "policy/flow"}, {"policy/audit", "policy"}, {"proxy", "proxy/mcp"}, {"proxy/mcpjoin", "proxy"},
		{"proxy/mcp", "proxy/admin"}, {"proxy/mcp", "proxy/surface"},
		{"proxy/telemetry/metrics", "policy/flow"}, {"policy/audit", "policy"}, {"proxy/demo", "proxy/sse"},
		{"proxy/demo", "proxy/surface/chat"}, {"proxy", "proxy/demo"},
		{"proxy", "proxy/policytest"}, {"proxy/policytest", "proxy/admin"}, {"proxy/policytest", "proxy/config"},
	} {
		if check(c.from, c.to) {
			t.Errorf("%s importing %s breaks no rule", c.from, c.to)
		}
	}
	for _, c := range []struct{ from, to string }{
		{"proxy/surface/chat", "proxy/surface"}, {"proxy/surface/chat", "proxy/relay"}, {"proxy", "proxy/surface/chat"},
		{"cmd/promptgate", "proxy/config"}, {"policy/audit", "store/boltfile"}, {"proxy/telemetry/metrics", "policy/audit"},
		{"plugins/examples/filememory", "plugins/sdk"}, {"plugins", "plugins/internal/answer"}, {"store/etcdstore", "store"},
		{"cmd/promptgate", "proxy/demo"}, {"proxy/admin", "proxy/policytest"}, {"cmd/promptgate", "proxy/policytest"},
	} {
		if !check(c.from, c.to) {
			t.Errorf("%s importing %s should be allowed", c.from, c.to)
		}
	}
}

// TestPluginBinaryIsSmall: a plugin author's program (the example sources) links, of promptgate,
// only the sdk and the module modes, and none of the proxy's heavy dependencies.
func TestPluginBinaryIsSmall(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{.ImportPath}}", "./plugins/examples/filememory").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(dep, module+"/"); ok {
			if !slices.Contains([]string{"plugins/sdk", "policy/modules", "plugins/examples/filememory"}, rest) {
				t.Errorf("a plugin's binary links %s: the sdk must pull in only what a plugin needs", rest)
			}
			continue
		}
		for _, heavy := range []string{"github.com/tidwall/", "github.com/santhosh-tekuri/", "go.etcd.io/", "github.com/prometheus/",
			"go.opentelemetry.io/", "github.com/elazarl/goproxy", "github.com/dgraph-io/", "gopkg.in/yaml"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("a plugin's binary links %s", dep)
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
