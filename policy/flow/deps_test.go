package flow_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyDownward keeps policy/flow and policy/flow/scan below the proxy and policy: they
// import the standard library, gjson, yaml.v3 (documents of outputs trusted in part), x/net,
// x/text's norm, the WHATWG URL parser (scan: the host a browser opens), policy/vet,
// policy/jsoncheck and each other (flow -> scan), and nothing else of this module.
func TestImportsOnlyDownward(t *testing.T) {
	t.Parallel()
	allowed := map[string][]string{
		".": {"github.com/tidwall/gjson", "gopkg.in/yaml.v3", "golang.org/x/text/unicode/norm", "github.com/promptgate/promptgate/policy/vet",
			"github.com/promptgate/promptgate/policy/jsoncheck", "github.com/promptgate/promptgate/policy/flow/scan"},
		"scan": {"golang.org/x/net/idna", "golang.org/x/net/publicsuffix", "golang.org/x/text/unicode/norm", "github.com/nlnwa/whatwg-url/url"},
	}
	for dir, ok := range allowed {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
					continue // the standard library
				}
				found := false
				for _, a := range ok {
					found = found || p == a
				}
				if !found {
					t.Errorf("%s imports %s", f, p)
				}
			}
		}
	}
}
