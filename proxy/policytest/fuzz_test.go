package policytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParseCaseFile: any bytes as a case file give cases or problems, never a panic; a file read
// without a problem has, in every case, a name, a rewritten route and a request; read without files
// (the admin API), no case it gives names a file.
func FuzzParseCaseFile(f *testing.F) {
	for _, dir := range []string{examplesTests, filepath.Join("..", "..", "cmd", "promptgate", "testdata", "policytest")} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.test.yaml"))
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte("cases: [{name: a, request: '{}', expect: {status: 200}}]\nprotocol: x@1\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		if cases, problems := Parse("", "", src, Options{NoFiles: true}); len(problems) == 0 {
			for _, c := range cases {
				if c.Protocol.File != "" {
					t.Fatalf("a case read without files names the file %q", c.Protocol.File)
				}
			}
		}
		cases, problems := Parse("f.test.yaml", "f", src, Options{})
		if len(problems) > 0 {
			return
		}
		for _, c := range cases {
			if c.Name == "" || c.Path == "" || c.request == nil || (c.Protocol.ID == "" && c.Protocol.File == "") {
				t.Fatalf("a case read without a problem is incomplete: %+v", c)
			}
		}
	})
}

// FuzzYAMLValueAsJSON: a YAML value that jsonValue writes as JSON is valid JSON, and encoding/json
// reads it as the value YAML gives (through JSON: numbers are float64 to both).
func FuzzYAMLValueAsJSON(f *testing.F) {
	for _, s := range []string{"{b: 1, a: [true, null, 1.5, '1.50', x, -0x10]}", "{z: &v {k: v}, y: *v}", "[1e3, 0o17, .5, ~]",
		`{"k": "é\u2028\n"}`, "{a: {b: {c: [[]]}}}", "{1: a}", "{a: !!binary aGk=}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var doc yaml.Node
		if yaml.Unmarshal([]byte(s), &doc) != nil || len(doc.Content) == 0 {
			return
		}
		n := doc.Content[0]
		if n.Kind != yaml.MappingNode && n.Kind != yaml.SequenceNode {
			return
		}
		r := &yamlReader{file: "f"}
		out, ok := r.jsonValue(n, "x")
		if !ok {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q gave invalid JSON %s", s, out)
		}
		var fromYAML any
		if n.Decode(&fromYAML) != nil {
			t.Fatalf("%q: YAML does not decode what jsonValue took", s)
		}
		via, err := json.Marshal(fromYAML)
		if err != nil {
			return // a value encoding/json cannot write (a map with non-string keys) that jsonValue wrote as strings
		}
		var want, got any
		if json.Unmarshal(via, &want) != nil || json.Unmarshal(out, &got) != nil {
			t.Fatalf("%q: %s / %s", s, via, out)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%q: YAML reads %s, jsonValue wrote %s", s, via, out)
		}
	})
}
