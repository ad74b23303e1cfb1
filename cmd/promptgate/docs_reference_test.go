package main

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/proxy/config"
)

// The tests of docs/reference.md: its tables list every command, flag, environment variable, config
// key, error code, header and decision kind the code has, read from the code itself, so that a new
// one cannot go undocumented; and what the tables list exists.

const referencePage = "docs/reference.md"

// sourceFiles are the contents of the non-test Go files under the repository's folders dirs.
func sourceFiles(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		err := filepath.WalkDir(inRepo(d), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			out[p] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d source files under %v", len(out), dirs)
	}
	return out
}

// literals are the distinct first groups of re's matches in the files.
func literals(files map[string]string, re *regexp.Regexp) []string {
	var out []string
	for _, s := range files {
		for _, m := range re.FindAllStringSubmatch(s, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	slices.Sort(out)
	return out
}

// tableOf is the first Markdown table of a section.
func tableOf(t *testing.T, sec string) string {
	t.Helper()
	i := strings.Index(sec, "\n|")
	if i < 0 {
		t.Fatal("no table")
	}
	tab := sec[i+1:]
	if j := strings.Index(tab, "\n\n"); j >= 0 {
		tab = tab[:j]
	}
	return tab
}

// TestReferenceListsEveryCommandAndFlag: every command of promptgate's usage text is in the table
// of commands, and every flag of every command is on the page; serve's flags are in the flags table
// with their environment variables.
func TestReferenceListsEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	page := docPage(t, referencePage)
	cmds := tableOf(t, docSection(t, referencePage, "Commands"))
	for _, m := range regexp.MustCompile(`(?m)^  promptgate ([a-z]+)(?: ([a-z]+(?:\|[a-z]+)*))?`).FindAllStringSubmatch(usage, -1) {
		if !strings.Contains(cmds, "`promptgate "+m[1]) && !strings.Contains(cmds, "`promptgate templates\\|"+m[1]) {
			t.Errorf("the commands table has no promptgate %s", m[1])
		}
	}
	for _, cmd := range [][]string{{"serve"}, {"demo"}, {"preview"}, {"test"}, {"migrate", "up"}, {"protocols", "push"},
		{"protocols", "shadow"}, {"templates", "show"}, {"policy", "suggest"}, {"ca", "init"}, {"store", "copy"}, {"healthcheck"}} {
		for _, f := range flagsOf(t, cmd...) {
			if !strings.Contains(page, "--"+f) {
				t.Errorf("promptgate %s --%s is not on the page", strings.Join(cmd, " "), f)
			}
		}
	}
	flags := tableOf(t, docSection(t, referencePage, "serve flags"))
	envOf := regexp.MustCompile(`\(env ([A-Z_]+)\)`)
	_, help, _ := runCmd(t, nil, "", "serve", "-h")
	for _, f := range flagsOf(t, "serve") {
		row := ""
		for _, r := range strings.Split(flags, "\n") {
			if strings.Contains(r, "`--"+f+"`") {
				row = r
			}
		}
		if row == "" {
			t.Errorf("the serve flags table has no --%s", f)
			continue
		}
		block := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(f) + `(?: \S+)?\n((?:    .*\n)*)`).FindStringSubmatch(help)
		if block == nil {
			t.Fatalf("serve -h has no help for --%s", f)
		}
		if m := envOf.FindStringSubmatch(block[1]); m != nil && !strings.Contains(row, "`"+m[1]+"`") {
			t.Errorf("the row of --%s does not name its variable %s: %s", f, m[1], row)
		}
	}
}

// TestReferenceListsEveryVariable: every environment variable the code reads is on the page.
func TestReferenceListsEveryVariable(t *testing.T) {
	t.Parallel()
	page := docPage(t, referencePage)
	names := literals(sourceFiles(t, "cmd", "proxy", "policy", "plugins", "assembly", "store"), regexp.MustCompile(`"((?:PROMPTGATE|PROMPT)_[A-Z0-9_]+)"`))
	if len(names) < 25 {
		t.Fatalf("only %d variables found: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(page, "`"+n+"`") {
			t.Errorf("%s is not in the page's tables", n)
		}
	}
}

// taggedField is a struct field as a decoder of tag reads it: its name and options in the tag, and
// its type with pointers taken off.
type taggedField struct {
	name, opts string
	embedded   bool
	typ        reflect.Type
}

// taggedFields are the exported fields of a struct type (pointers taken off) that tag does not skip
// ("-").
func taggedFields(typ reflect.Type, tag string) []taggedField {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	var out []taggedField
	for f := range typ.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get(tag), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		out = append(out, taggedField{name: name, opts: opts, embedded: f.Anonymous, typ: ft})
	}
	return out
}

// configKeys are the YAML key paths of a config type: lists as NAME[], maps of structs as NAME.KEY.
func configKeys(typ reflect.Type, prefix string) []string {
	var out []string
	for _, f := range taggedFields(typ, "yaml") {
		if f.name == "" && strings.Contains(f.opts, "inline") {
			out = append(out, configKeys(f.typ, prefix)...)
			continue
		}
		if f.name == "" {
			continue
		}
		path, ft := prefix+f.name, f.typ
		switch {
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(ft.Elem(), path+"[].")...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(ft.Elem(), path+".NAME.")...)
		case ft.Kind() == reflect.Struct && ft.PkgPath() != "time":
			out = append(out, configKeys(ft, path+".")...)
		default:
			out = append(out, path)
		}
	}
	return out
}

// TestReferenceListsEveryConfigKey: every key of the config file is in the table of config keys, by
// its path or, in a row that names its parent, by its own name.
func TestReferenceListsEveryConfigKey(t *testing.T) {
	t.Parallel()
	table := tableOf(t, docSection(t, referencePage, "Config keys"))
	keys := configKeys(reflect.TypeFor[config.File](), "")
	if len(keys) < 40 {
		t.Fatalf("only %d keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		parent, leaf := "", k
		if i := strings.LastIndex(k, "."); i >= 0 {
			parent, leaf = k[:i+1], k[i+1:]
		}
		found := strings.Contains(table, "`"+k+"`")
		for _, row := range strings.Split(table, "\n") {
			if strings.Contains(row, "`"+parent) && strings.Contains(row, "`"+leaf+"`") {
				found = true
			}
		}
		if !found {
			t.Errorf("the config key %s is not in the table", k)
		}
	}
}

// TestReferenceListsEveryErrorCode: every error code the proxy answers is in the table of codes,
// and every code of the table is one the code has.
func TestReferenceListsEveryErrorCode(t *testing.T) {
	t.Parallel()
	files := sourceFiles(t, "proxy", "policy")
	table := tableOf(t, docSection(t, referencePage, "Error codes"))
	codes := literals(files, regexp.MustCompile(`(?:\bCode[A-Z]\w*\s*=\s*|Code:\s*)"([a-z]+(?:_[a-z]+)*)"`))
	if len(codes) < 15 {
		t.Fatalf("only %d codes found: %v", len(codes), codes)
	}
	for _, c := range codes {
		if !strings.Contains(table, "`"+c+"`") {
			t.Errorf("the code %s is not in the table", c)
		}
	}
	all := strings.Join(slices.Collect(maps.Values(files)), "\n")
	for _, m := range regexp.MustCompile("\\| `([a-z_]+)` \\|").FindAllStringSubmatch(table, -1) {
		if !strings.Contains(all, `"`+m[1]+`"`) {
			t.Errorf("the table's code %s is not in the code", m[1])
		}
	}
}

// TestReferenceListsEveryHeader: every X-Promptgate-* header the code names is in the tables of
// headers.
func TestReferenceListsEveryHeader(t *testing.T) {
	t.Parallel()
	sec := docSection(t, referencePage, "Headers")
	headers := literals(sourceFiles(t, "proxy", "cmd"), regexp.MustCompile(`"(X-Promptgate-[A-Za-z][A-Za-z-]*)"`))
	if len(headers) < 8 {
		t.Fatalf("only %d headers found: %v", len(headers), headers)
	}
	for _, h := range headers {
		if !strings.Contains(sec, "`"+h+"`") {
			t.Errorf("%s is not in the tables", h)
		}
	}
}

// TestReferenceListsEveryDecision: every kind and verdict of a decision event is in the table.
func TestReferenceListsEveryDecision(t *testing.T) {
	t.Parallel()
	table := tableOf(t, docSection(t, referencePage, "Decision kinds and verdicts"))
	files := sourceFiles(t, "policy/audit", "proxy/mcp")
	names := literals(files, regexp.MustCompile(`(?m)^\s+(?:Kind|Verdict)[A-Za-z]*\s*=\s*"([a-z_]+)"`))
	if len(names) < 25 {
		t.Fatalf("only %d kinds and verdicts found: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(table, "`"+n+"`") {
			t.Errorf("%s is not in the table", n)
		}
	}
}

// TestReferenceAdminRoutes: every route of the admin API is in operating.md's table of routes.
func TestReferenceAdminRoutes(t *testing.T) {
	t.Parallel()
	sec := docSection(t, operatingPage, "The admin API")
	table := tableOf(t, sec[strings.Index(sec, "| route | what |")-1:])
	src := docPage(t, "proxy/admin/admin.go")
	routes := regexp.MustCompile(`s\.handle\("([A-Z]+ [^"]*)"(?:\+base\+"([^"]*)")?`).FindAllStringSubmatch(src, -1)
	if len(routes) < 15 {
		t.Fatalf("only %d routes found", len(routes))
	}
	for _, r := range routes {
		route := r[1]
		if strings.HasSuffix(route, " ") {
			route += `/admin/{templates\|protocols}` + r[2]
		}
		if !strings.Contains(table, route) && !strings.Contains(table, strings.Replace(route, `{templates\|protocols}`, "templates", 1)) {
			t.Errorf("the route %s is not in the table", route)
		}
	}
}
