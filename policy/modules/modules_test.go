package modules

import "testing"

func TestModes(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"minimal", "standard", "full"} {
		if m, ok := Parse(s); !ok || string(m) != s {
			t.Errorf("Parse(%q) = %q, %v", s, m, ok)
		}
	}
	for _, s := range []string{"", "Full", "max", " minimal"} {
		if _, ok := Parse(s); ok {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
	order := []Mode{Minimal, Standard, Full}
	for i, m := range order {
		for j, min := range order {
			if got := m.AtLeast(min); got != (i >= j) {
				t.Errorf("%s.AtLeast(%s) = %v", m, min, got)
			}
		}
		if Mode("bogus").AtLeast(m) || Mode("").AtLeast(m) {
			t.Errorf("an invalid mode is at least %s", m)
		}
	}
}
