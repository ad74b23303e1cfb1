package plugins

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy/modules"
)

// Defaults of a plugin entry.
const (
	DefaultTimeout  = 150 * time.Millisecond
	DefaultCacheTTL = 30 * time.Second
	DefaultMinMode  = modules.Minimal
)

// Spec is one entry of the config's plugins section: a context source.
type Spec struct {
	// Name is the source's key in the runtime context JSON.
	Name string `yaml:"name"`
	// Path is the plugin binary.
	Path string `yaml:"path"`
	// SHA256 is the binary's checksum (64 hex characters), checked before every start.
	SHA256 string `yaml:"sha256"`
	// Module is the prompt module the source belongs to; prompt_modules:<module>_off switches it
	// off.
	Module string `yaml:"module"`
	// MinMode is the smallest module mode of a request the source is asked in. "" means
	// DefaultMinMode.
	MinMode modules.Mode `yaml:"minMode"`
	// Timeout bounds one answer. 0 means DefaultTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// Required makes a failure of the source fail the request (503 context_unavailable).
	Required bool `yaml:"required"`
	// CacheTTL is how long an answer is reused for the same user, conversation, protocol and mode;
	// 0 switches caching off (the config file gives DefaultCacheTTL where the key is missing).
	CacheTTL time.Duration `yaml:"cacheTTL"`
	// Config is handed to the plugin's Configure.
	Config map[string]any `yaml:"config"`
	// ReceiveUserMessage sends the source the text of the latest user message.
	ReceiveUserMessage bool `yaml:"receiveUserMessage"`
	// TrustedDirectives lets the source's directives into the trusted RUNTIME DIRECTIVES block.
	TrustedDirectives bool `yaml:"trustedDirectives"`
	// Lists names top-level fields of the source's answer that are operator lists for the
	// information-flow rules (list:NAME): the strings of each (an array, or one value) are trusted
	// values such as known payees. They stay untrusted data in the runtime context the model reads.
	Lists []string `yaml:"lists"`
}

// ApplyDefaults fills the zero timeout and minMode. The cache TTL is left as it is: 0 switches
// caching off.
func (s *Spec) ApplyDefaults() {
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.MinMode == "" {
		s.MinMode = DefaultMinMode
	}
}

var (
	namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	hexPattern  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// reservedNames are the keys of the runtime context JSON that are not a plugin's.
var reservedNames = []string{"meta", "request", gather.NotesSource}

// ValidateSpecs returns every problem of the plugin entries, each naming its key path under key
// (the section's own key, e.g. "plugins") and the fix.
func ValidateSpecs(key string, specs []Spec) []error {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", k, fmt.Sprintf(format, args...)))
	}
	seen := map[string]bool{}
	for i, p := range specs {
		k := fmt.Sprintf("%s[%d]", key, i)
		if p.Name != "" {
			k = fmt.Sprintf("%s[%d] (%s)", key, i, p.Name)
		}
		switch {
		case p.Name == "":
			bad(k+".name", "missing: the plugin's key in the runtime context JSON")
		case !namePattern.MatchString(p.Name):
			bad(k+".name", "%q: use letters, digits, _ . -", p.Name)
		case isReserved(p.Name):
			bad(k+".name", "%q is reserved in the runtime context JSON; choose another name", p.Name)
		case seen[p.Name]:
			bad(k+".name", "duplicate plugin name %q", p.Name)
		}
		seen[p.Name] = true
		if p.Path == "" {
			bad(k+".path", "missing: the plugin binary")
		}
		if !hexPattern.MatchString(strings.ToLower(p.SHA256)) {
			bad(k+".sha256", "required: the binary's sha256 as 64 hex characters (sha256sum %s)", p.Path)
		}
		if !p.MinMode.Valid() {
			bad(k+".minMode", "%q: use minimal, standard or full", p.MinMode)
		}
		if p.Timeout < 0 {
			bad(k+".timeout", "must be positive, e.g. 150ms")
		}
		if p.CacheTTL < 0 {
			bad(k+".cacheTTL", "must be zero or positive, e.g. 30s")
		}
		for j, l := range p.Lists {
			if !namePattern.MatchString(l) {
				bad(fmt.Sprintf("%s.lists[%d]", k, j), "%q: name a top-level field of the answer: letters, digits, _ . -", l)
			}
		}
	}
	return errs
}

func isReserved(name string) bool {
	for _, r := range reservedNames {
		if name == r {
			return true
		}
	}
	return false
}
