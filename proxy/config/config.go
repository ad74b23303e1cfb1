// Package config composes the deployment file given with --config from the sections its users own —
// policy (defaultProtocol, routes, tools), plugins (plugins), proxy (limits), proxy/guard (listen),
// proxy/mitm (mitm), policy/audit (audit), assembly (security), proxy/mcp (mcp) — and decodes
// (strict YAML), fills the defaults of and validates the whole file, reporting every problem with
// its key path and the fix. It imports only downward; what the values mean at run time belongs to
// the sections' packages.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/mcp"
	"github.com/promptgate/promptgate/proxy/mitm"
)

// File is the whole deployment config. The zero value (no --config) is valid and means: default
// protocol neutral, no routes, every tool enabled, no plugins, default limits.
type File struct {
	// Config is the policy part: defaultProtocol, routes, tools.
	policy.Config `yaml:",inline"`
	// Plugins are the context sources started by serve.
	Plugins []plugins.Spec `yaml:"plugins"`
	// Limits bound what one request may cost.
	Limits proxy.Limits `yaml:"limits"`
	// Listen says which requests the base-URL listener (--listen) answers besides loopback,
	// same-origin and non-browser ones.
	Listen guard.Config `yaml:"listen"`
	// MITM configures the HTTPS-proxy door (--proxy-listen).
	MITM *mitm.Config `yaml:"mitm"`
	// Audit configures the decision log.
	Audit audit.Config `yaml:"audit"`
	// Security holds the optional prompt-injection hardening; its zero value keeps the default
	// rendering.
	Security assembly.Security `yaml:"security"`
	// MCP configures the MCP door (--mcp-listen): the servers it serves and how it governs them.
	MCP mcp.Config `yaml:"mcp"`
}

// Load reads and validates a config file. An empty path returns the defaults.
func Load(file string) (*File, error) {
	if file == "" {
		f := &File{}
		f.ApplyDefaults()
		return f, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	return f, nil
}

// Parse decodes YAML strictly (unknown keys are errors), applies defaults and validates.
func Parse(b []byte) (*File, error) {
	f := &File{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		return nil, explainYAML(err, b)
	}
	f.ApplyDefaults()
	// A plugin's cacheTTL: 0 written out switches its cache off; only a missing key means the
	// default.
	var ttls struct {
		Plugins []struct {
			CacheTTL *time.Duration `yaml:"cacheTTL"`
		} `yaml:"plugins"`
	}
	if yaml.Unmarshal(b, &ttls) == nil && len(ttls.Plugins) == len(f.Plugins) {
		for i, p := range ttls.Plugins {
			if p.CacheTTL == nil {
				f.Plugins[i].CacheTTL = plugins.DefaultCacheTTL
			}
		}
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// ApplyDefaults fills every zero value that has a default (a plugin's cacheTTL excepted: Parse
// fills it where the key is missing).
func (f *File) ApplyDefaults() {
	f.Config.ApplyDefaults()
	for i := range f.Plugins {
		f.Plugins[i].ApplyDefaults()
	}
	f.Limits.ApplyDefaults()
	f.Listen.Section = "listen"
	if f.MITM != nil {
		f.MITM.ApplyDefaults()
	}
	f.Audit.ApplyDefaults()
	f.MCP.ApplyDefaults()
}

// Validate returns every problem of the file joined, sorted by key path, each naming the key path
// and the fix.
func (f *File) Validate() error {
	errs := f.Config.Validate()
	errs = append(errs, plugins.ValidateSpecs("plugins", f.Plugins)...)
	errs = append(errs, f.Limits.Validate("limits")...)
	errs = append(errs, f.Listen.Validate("listen")...)
	if f.MITM != nil {
		errs = append(errs, f.MITM.Validate("mitm")...)
	}
	errs = append(errs, f.Audit.Validate("audit")...)
	errs = append(errs, f.MCP.Validate("mcp")...)
	slices.SortStableFunc(errs, func(a, b error) int { return naturalCompare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// naturalCompare orders strings as text, but runs of digits by their value (routes[2] before
// routes[10]).
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, _ := strconv.Atoi(a[:da])
			nb, _ := strconv.Atoi(b[:db])
			if na != nb {
				return na - nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && n < 9 && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// Policy is the policy part of the file.
func (f *File) Policy() policy.Config { return f.Config }

var (
	unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)
	badValue     = regexp.MustCompile("(?s)^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
)

// sections names each struct type of the file for messages about its keys.
var sections = map[reflect.Type]string{
	reflect.TypeFor[File]():              "the top level",
	reflect.TypeFor[policy.Route]():      "a route",
	reflect.TypeFor[policy.Match]():      "a route's match",
	reflect.TypeFor[policy.ToolConfig](): "a tool entry",
	reflect.TypeFor[plugins.Spec]():      "a plugin entry",
	reflect.TypeFor[proxy.Limits]():      "limits",
	reflect.TypeFor[guard.Config]():      "listen",
	reflect.TypeFor[mitm.Config]():       "mitm",
	reflect.TypeFor[audit.Config]():      "audit",
	reflect.TypeFor[assembly.Security](): "security",
	reflect.TypeFor[mcp.Config]():        "mcp",
	reflect.TypeFor[mcp.Server]():        "an MCP server entry",
}

// section is the name and the valid keys of the struct type yaml.v3 names typ ("policy.Route").
func section(typ string) (name string, keys []string) {
	for t, n := range sections {
		if t.String() == typ {
			return n, yamlKeys(t)
		}
	}
	return typ, nil
}

// yamlKeys are the keys of a struct type in the file, in field order (an inline field's keys in its
// place).
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case opts == "inline":
			keys = append(keys, yamlKeys(f.Type)...)
		case name != "":
			keys = append(keys, name)
		default:
			keys = append(keys, strings.ToLower(f.Name))
		}
	}
	return keys
}

// explainYAML turns yaml.v3's messages about unknown keys and values of the wrong type into ones
// that name the key and the fix; every problem the decoder found is kept, in the order of the
// document.
func explainYAML(err error, src []byte) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	var errs []error
	var spots []yamlSpot
	used := map[*yaml.Node]bool{}
	for _, msg := range te.Errors {
		if m := unknownField.FindStringSubmatch(msg); m != nil {
			name, keys := section(m[3])
			errs = append(errs, fmt.Errorf("line %s: unknown key %q in %s; valid keys: %s", m[1], m[2], name, strings.Join(keys, ", ")))
		} else if m := badValue.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			if spots == nil {
				spots = spotsOf(src)
			}
			got := yamlKinds[m[2]]
			if got == "" {
				got = "!!" + m[2]
			}
			if m[3] != "" {
				got += fmt.Sprintf(" %q", m[3])
			}
			errs = append(errs, fmt.Errorf("line %s: %s: got %s, want %s", m[1], keyAt(spots, used, line, m[2], m[3]), got, wantOf(m[4])))
		} else {
			errs = append(errs, fmt.Errorf("invalid YAML: %s", msg))
		}
	}
	return errors.Join(errs...)
}

var yamlKinds = map[string]string{"str": "a string", "int": "a number", "float": "a number", "bool": "a boolean", "seq": "a list", "map": "a mapping", "null": "null", "timestamp": "a timestamp"}

// wantOf says, for a Go type named by yaml.v3, what the file should hold instead.
func wantOf(typ string) string {
	switch {
	case typ == "modules.Mode":
		return "one of minimal, standard or full"
	case typ == "time.Duration":
		return "a duration with a unit, e.g. 150ms or 30s"
	case typ == "bool" || typ == "*bool":
		return "true or false"
	case strings.HasPrefix(typ, "int") || strings.HasPrefix(typ, "uint"):
		return "a whole number"
	case typ == "string":
		return "a string (quote it)"
	case strings.HasPrefix(typ, "[]"):
		return "a list, e.g. [a, b]"
	}
	return "a mapping of key: value"
}

// yamlSpot is one value node of the document and its key path, e.g. limits.maxBodyBytes,
// plugins[0].timeout.
type yamlSpot struct {
	key  string
	node *yaml.Node
}

// spotsOf lists the value nodes of src in document order, parents before children.
func spotsOf(src []byte) []yamlSpot {
	var doc yaml.Node
	if yaml.Unmarshal(src, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	var out []yamlSpot
	var walk func(n *yaml.Node, key string)
	walk = func(n *yaml.Node, key string) {
		out = append(out, yamlSpot{key, n})
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if key != "" {
					k = key + "." + k
				}
				walk(n.Content[i+1], k)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", key, i))
			}
		}
	}
	walk(doc.Content[0], "")
	return out
}

// keyAt names the key whose value yaml.v3 refused on line: a scalar equal to value (which yaml.v3
// may cut to 7 characters and "..."), else the innermost list or mapping, skipping spots already
// named.
func keyAt(spots []yamlSpot, used map[*yaml.Node]bool, line int, tag, value string) string {
	value, cut := strings.CutSuffix(value, "...")
	fits := func(n *yaml.Node) bool {
		switch tag {
		case "seq":
			return n.Kind == yaml.SequenceNode
		case "map":
			return n.Kind == yaml.MappingNode
		}
		return n.Kind == yaml.ScalarNode && (n.Value == value || cut && strings.HasPrefix(n.Value, value))
	}
	pick := -1
	for i, sp := range spots {
		if sp.node.Line != line || used[sp.node] || !fits(sp.node) {
			continue
		}
		pick = i
		if tag != "seq" && tag != "map" {
			break // the first scalar that fits; containers: the innermost, i.e. the last
		}
	}
	if pick < 0 {
		return fmt.Sprintf("the value on line %d", line)
	}
	used[spots[pick].node] = true
	if spots[pick].key == "" {
		return "the top level"
	}
	return spots[pick].key
}
