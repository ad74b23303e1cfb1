package config

import (
	"strings"
	"testing"
)

func TestSecurityDatamarkToolOutput(t *testing.T) {
	f, err := Parse([]byte("security: {datamarkToolOutput: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Security.DatamarkToolOutput {
		t.Error("security.datamarkToolOutput: true was not read")
	}
	f, err = Parse(nil)
	if err != nil || f.Security.DatamarkToolOutput {
		t.Errorf("default: %v, %+v; want datamarking off", err, f.Security)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"security: {datamarkToolOutputs: true}\n", `unknown key "datamarkToolOutputs" in security; valid keys: datamarkToolOutput`},
		{"security: {datamarkToolOutput: sometimes}\n", `security.datamarkToolOutput: got a string "sometimes", want true or false`},
		{"security: [datamarkToolOutput]\n", "security"},
		{"securty: {}\n", `unknown key "securty"`},
	} {
		_, err := Parse([]byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to contain %q", tt.yaml, err, tt.want)
		}
	}
}
