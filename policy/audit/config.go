package audit

import "fmt"

// DefaultRingSize is how many events the ring keeps when the config does not say.
const DefaultRingSize = 10000

// maxRingSize bounds the ring the config may ask for.
const maxRingSize = 10_000_000

// Config is the config file's audit section: where decision events are kept.
type Config struct {
	// Path is the bbolt file of the audit ring; "" means the one next to the instance's own state
	// (serve decides: next to the definitions file, or the etcd snapshot file).
	Path string `yaml:"path"`
	// RingSize is how many events the ring keeps (oldest dropped first). 0 means DefaultRingSize.
	RingSize int `yaml:"ringSize"`
	// File, when set, also appends every event as one JSON line to this file.
	File string `yaml:"file"`
	// IncludeArguments puts tool-call arguments into events; by default only their sha256 is kept.
	IncludeArguments bool `yaml:"includeArguments"`
}

// ApplyDefaults fills the ring size.
func (c *Config) ApplyDefaults() {
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
}

// Validate returns every problem of the section, each naming its key path under key (e.g. "audit")
// and the fix.
func (c *Config) Validate(key string) []error {
	if c.RingSize < 0 || c.RingSize > maxRingSize {
		return []error{fmt.Errorf("%s.ringSize: must be between 1 and %d, e.g. %d", key, maxRingSize, DefaultRingSize)}
	}
	return nil
}
