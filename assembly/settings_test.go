package assembly

import (
	"reflect"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/assembly/ctxjson"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaultSettings(t *testing.T) {
	want := Settings{ToolDefsMode: "full", DirectivesMaxChars: 2500, ContextMaxChars: 12000, RedactInSystem: true}
	if got := DefaultSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultSettings() = %+v, want %+v", got, want)
	}
	s, err := SettingsFromEnv(env(nil))
	if err != nil || !reflect.DeepEqual(s, want) {
		t.Errorf("SettingsFromEnv(empty) = %+v, %v; want %+v", s, err, want)
	}
}

func TestSettingsFromEnvGood(t *testing.T) {
	tests := []struct {
		name, key, val string
		want           func(*Settings)
	}{
		{"minimal", EnvToolDefsMode, "minimal", func(s *Settings) { s.ToolDefsMode = ToolDefsMinimal }},
		{"full, spaces trimmed", EnvToolDefsMode, " full\n", func(s *Settings) {}},
		{"blank is unset", EnvToolDefsMode, "   ", func(s *Settings) {}},
		{"notes true", EnvCognitiveNotes, "true", func(s *Settings) { s.IncludeCognitiveNotes = true }},
		{"notes 1", EnvCognitiveNotes, "1", func(s *Settings) { s.IncludeCognitiveNotes = true }},
		{"notes false", EnvCognitiveNotes, "false", func(s *Settings) {}},
		{"directives 0", EnvDirectivesMaxChars, "0", func(s *Settings) { s.DirectivesMaxChars = 0 }},
		{"directives 100", EnvDirectivesMaxChars, "100", func(s *Settings) { s.DirectivesMaxChars = 100 }},
		{"context minimum", EnvContextMaxChars, "64", func(s *Settings) { s.ContextMaxChars = 64 }},
		{"context 5000", EnvContextMaxChars, " 5000 ", func(s *Settings) { s.ContextMaxChars = 5000 }},
		{"channel on", EnvStructuredChannel, "system_message", func(s *Settings) { s.StructuredChannel = true }},
		{"channel none", EnvStructuredChannel, "none", func(s *Settings) {}},
		{"channel off", EnvStructuredChannel, "off", func(s *Settings) {}},
		{"channel false", EnvStructuredChannel, "false", func(s *Settings) {}},
		{"channel inline", EnvStructuredChannel, "inline", func(s *Settings) {}},
		{"redact false", EnvRedactInSystem, "false", func(s *Settings) { s.RedactInSystem = false }},
		{"redact TRUE", EnvRedactInSystem, "TRUE", func(s *Settings) {}},
		{"budgets", EnvContextBudgets, `{"request.attachments": 0.5, "memory": 4000, "notes": 0}`, func(s *Settings) {
			s.Budgets = ctxjson.Budgets{"request.attachments": 6000, "memory": 4000, "notes": 0}
		}},
		{"budgets blank", EnvContextBudgets, " ", func(s *Settings) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := DefaultSettings()
			tt.want(&want)
			got, err := SettingsFromEnv(env(map[string]string{tt.key: tt.val}))
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s=%q: got %+v, %v; want %+v", tt.key, tt.val, got, err, want)
			}
		})
	}
}

// TestSettingsBudgetsShareOfMax checks that a share is taken of the configured maximum, not the
// default.
func TestSettingsBudgetsShareOfMax(t *testing.T) {
	s, err := SettingsFromEnv(env(map[string]string{EnvContextMaxChars: "1000", EnvContextBudgets: `{"memory":0.25}`}))
	if err != nil || !reflect.DeepEqual(s.Budgets, ctxjson.Budgets{"memory": 250}) {
		t.Errorf("Budgets = %v, %v; want memory 250", s.Budgets, err)
	}
}

func TestSettingsFromEnvBad(t *testing.T) {
	tests := []struct{ key, val, hint string }{
		{EnvToolDefsMode, "verbose", "use full or minimal"},
		{EnvToolDefsMode, "FULL", "use full or minimal"},
		{EnvCognitiveNotes, "yes", "use true or false"},
		{EnvRedactInSystem, "nope", "use true or false"},
		{EnvDirectivesMaxChars, "-1", "use a whole number >= 0"},
		{EnvDirectivesMaxChars, "2.5k", "use a whole number >= 0"},
		{EnvContextMaxChars, "63", "use a whole number >= 64"},
		{EnvContextMaxChars, "lots", "use a whole number >= 64"},
		{EnvStructuredChannel, "message", "use system_message"},
		{EnvContextBudgets, `{"memory":"4000"}`, `key "memory"`},
		{EnvContextBudgets, `[1]`, "want a JSON object"},
		{EnvContextBudgets, `{"memory":-1}`, `key "memory"`},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.val, func(t *testing.T) {
			got, err := SettingsFromEnv(env(map[string]string{tt.key: tt.val}))
			if err == nil {
				t.Fatalf("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "assembly: "+tt.key+"=") || !strings.Contains(msg, tt.hint) {
				t.Errorf("error %q does not name %s or say %q", msg, tt.key, tt.hint)
			}
			if want := DefaultSettings(); !reflect.DeepEqual(got, want) {
				t.Errorf("a bad value changed the settings: %+v", got)
			}
		})
	}
}

func TestSettingsFromEnvAllBadReported(t *testing.T) {
	_, err := SettingsFromEnv(env(map[string]string{
		EnvToolDefsMode:       "x",
		EnvCognitiveNotes:     "x",
		EnvRedactInSystem:     "x",
		EnvDirectivesMaxChars: "x",
		EnvContextMaxChars:    "x",
		EnvStructuredChannel:  "x",
		EnvContextBudgets:     "x",
	}))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, k := range []string{EnvToolDefsMode, EnvCognitiveNotes, EnvRedactInSystem, EnvDirectivesMaxChars, EnvContextMaxChars, EnvStructuredChannel, EnvContextBudgets} {
		if n := strings.Count(msg, "assembly: "+k+"="); n != 1 {
			t.Errorf("%s reported %d times in %q", k, n, msg)
		}
	}
	if u, ok := err.(interface{ Unwrap() []error }); !ok || len(u.Unwrap()) != 7 {
		t.Errorf("want 7 joined errors, got %v", err)
	}
}
