package jsoncheck

// StringEnd checks the JSON string whose opening quote is b[i] as Value checks a string (escapes,
// UTF-8, no raw control byte) and returns the offset just after its closing quote; ok is false
// when b holds no valid string there. It is for a reader that finds one string's end in bytes it
// does not check whole.
func StringEnd(b []byte, i int) (end int, ok bool) {
	if i < 0 || i >= len(b) || b[i] != '"' {
		return i, false
	}
	s := scanner{b: b}
	end, _, err := s.str(i)
	return end, err == nil
}
