package jsoncheck

import "testing"

// TestFoldableKey: ObjectMembers says whether some key, at any depth, holds an escape, an ASCII
// capital or a non-ASCII byte; values never count.
func TestFoldableKey(t *testing.T) {
	for in, want := range map[string]bool{
		`{"type":"A","item":{"id":"É","content":[{"text":"\u0041"}]}}`: false,
		`{"type":"x","item":{"Type":"function_call"}}`:                 true,
		`{"a":[{"b":[{"cD":1}]}]}`:                                     true,
		`{"\u0061":1}`:                                                 true,
		`{"a\"":1}`:                                                    true,
		`{"é":1}`:                                                      true,
		`{"tool_callſ":1}`:                                             true,
		`{"":{"k":"V"}}`:                                               false,
	} {
		var m Members
		if err := ObjectMembers([]byte(in), Limits{}, "", &m); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if m.FoldableKey != want {
			t.Errorf("%s: FoldableKey %t, want %t", in, m.FoldableKey, want)
		}
	}
	// A reused Members is cleared by its caller only.
	m := Members{FoldableKey: true}
	if err := ObjectMembers([]byte(`{"a":1}`), Limits{}, "", &m); err != nil || !m.FoldableKey {
		t.Fatalf("ObjectMembers cleared FoldableKey (%v)", err)
	}
}
