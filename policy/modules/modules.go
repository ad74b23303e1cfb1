// Package modules holds the module mode — how much runtime context a protocol takes in: minimal,
// standard or full — as the one vocabulary that protocols (policy), the plugin host and its plugins
// (plugins, plugins/sdk) and the config file share. It does not decide a protocol's mode (policy
// does) or which context sources run in it (plugins does).
package modules

// Mode is a module mode. Its zero value is no mode: below every mode.
type Mode string

// The module modes, in increasing order.
const (
	Minimal  Mode = "minimal"
	Standard Mode = "standard"
	Full     Mode = "full"
)

// Parse reads "minimal", "standard" or "full".
func Parse(s string) (Mode, bool) {
	m := Mode(s)
	return m, m.Valid()
}

// Valid reports whether m is one of the three modes.
func (m Mode) Valid() bool { return m.rank() > 0 }

// AtLeast reports whether m is min or a larger mode. A mode that is not valid is below every mode.
func (m Mode) AtLeast(min Mode) bool { return m.rank() > 0 && m.rank() >= min.rank() }

func (m Mode) rank() int {
	switch m {
	case Minimal:
		return 1
	case Standard:
		return 2
	case Full:
		return 3
	}
	return 0
}
