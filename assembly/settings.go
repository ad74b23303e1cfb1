package assembly

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/promptgate/promptgate/assembly/ctxjson"
)

// Environment variables of the seed's operational flags; names and defaults are kept.
const (
	EnvToolDefsMode        = "PROMPT_TOOL_DEFS_MODE"
	EnvCognitiveNotes      = "PROMPT_INCLUDE_COGNITIVE_NOTES"
	EnvDirectivesMaxChars  = "PROMPT_RUNTIME_DIRECTIVES_MAX_CHARS"
	EnvContextMaxChars     = "PROMPT_RUNTIME_CONTEXT_MAX_CHARS"
	EnvContextBudgets      = "PROMPT_RUNTIME_CONTEXT_BUDGETS_JSON"
	EnvStructuredChannel   = "PROMPT_STRUCTURED_RUNTIME_CONTEXT_CHANNEL"
	EnvRedactInSystem      = "PROMPT_STRUCTURED_RUNTIME_CONTEXT_REDACT_IN_SYSTEM"
	DefaultDirectivesMax   = 2500
	DefaultContextMax      = 12000
	MinContextMax          = 64
	StructuredChannelValue = "system_message"
)

// Settings are the operational flags of prompt assembly.
type Settings struct {
	// ToolDefsMode is ToolDefsFull (default) or ToolDefsMinimal.
	ToolDefsMode string
	// IncludeCognitiveNotes puts plugins' debug notes into the runtime context (debug only).
	IncludeCognitiveNotes bool
	// DirectivesMaxChars caps the RUNTIME DIRECTIVES block, in code points.
	DirectivesMaxChars int
	// ContextMaxChars caps the runtime context JSON line, in code points; at least MinContextMax.
	ContextMaxChars int
	// Budgets are per-path budgets resolved against ContextMaxChars.
	Budgets ctxjson.Budgets
	// StructuredChannel sends the context JSON as a second system message.
	StructuredChannel bool
	// RedactInSystem replaces the JSON line in the first message by a pointer (structured channel
	// only).
	RedactInSystem bool
	// DatamarkToolOutput datamarks tool output in the conversation and adds DatamarkRule to the
	// protocol rules (see Datamark). It comes from the config file's security.datamarkToolOutput;
	// default off.
	DatamarkToolOutput bool
}

// DefaultSettings are the seed's defaults.
func DefaultSettings() Settings {
	return Settings{
		ToolDefsMode:       ToolDefsFull,
		DirectivesMaxChars: DefaultDirectivesMax,
		ContextMaxChars:    DefaultContextMax,
		RedactInSystem:     true,
	}
}

// SettingsFromEnv reads the flags through getenv (os.Getenv in main). Every bad value is reported,
// each naming the variable and what it accepts.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	s := DefaultSettings()
	var errs []error
	bad := func(name, v, want string) {
		errs = append(errs, fmt.Errorf("assembly: %s=%q: %s", name, v, want))
	}
	if v := strings.TrimSpace(getenv(EnvToolDefsMode)); v != "" {
		switch v {
		case ToolDefsFull, ToolDefsMinimal:
			s.ToolDefsMode = v
		default:
			bad(EnvToolDefsMode, v, "use full or minimal")
		}
	}
	boolVar := func(name string, dst *bool) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				bad(name, v, "use true or false")
				return
			}
			*dst = b
		}
	}
	boolVar(EnvCognitiveNotes, &s.IncludeCognitiveNotes)
	boolVar(EnvRedactInSystem, &s.RedactInSystem)
	intVar := func(name string, dst *int, minimum int) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < minimum {
				bad(name, v, fmt.Sprintf("use a whole number >= %d", minimum))
				return
			}
			*dst = n
		}
	}
	intVar(EnvDirectivesMaxChars, &s.DirectivesMaxChars, 0)
	intVar(EnvContextMaxChars, &s.ContextMaxChars, MinContextMax)
	if v := strings.TrimSpace(getenv(EnvStructuredChannel)); v != "" {
		switch v {
		case StructuredChannelValue:
			s.StructuredChannel = true
		case "none", "off", "false", "inline":
		default:
			bad(EnvStructuredChannel, v, "use system_message to turn the side channel on, or leave it unset")
		}
	}
	if v := strings.TrimSpace(getenv(EnvContextBudgets)); v != "" {
		b, err := ctxjson.ParseBudgets(v, s.ContextMaxChars)
		if err != nil {
			bad(EnvContextBudgets, v, err.Error())
		} else {
			s.Budgets = b
		}
	}
	return s, errors.Join(errs...)
}

// Security is the config file's security section: optional prompt-injection hardening of the
// assembly. Its zero value keeps the default rendering.
type Security struct {
	// DatamarkToolOutput datamarks tool output (Spotlighting): the white space of every tool result
	// in the conversation is replaced by "ˆ" (U+02C6) and the protocol rules tell the model what
	// that means.
	DatamarkToolOutput bool `yaml:"datamarkToolOutput"`
}

// Apply sets the settings that the security section decides.
func (s Security) Apply(st *Settings) { st.DatamarkToolOutput = s.DatamarkToolOutput }
