package assembly

import (
	"math/bits"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// get is gjson.GetBytes without its copy of the result: the result's Raw and Str share body's memory.
// gjson.GetBytes copies every result, so that reading an 8 KB messages array costs an 8 KB allocation,
// once per read. The sharing is safe here because no body this package reads is ever written to: request
// bodies are read once and kept as they are, and every edit (sjson, the splices) makes a new slice. A
// result must not be kept past a write to its body.
func get(body []byte, path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(body), len(body)), path)
}

// members finds the top-level members named by keys in one pass over body, where a gjson.Get per key
// would scan the body once each (all of it for an absent key): out[i] is the value of keys[i], or a Result
// that does not exist. The first member of a name wins and keys are compared unescaped, as gjson.Get does.
// The results share body's memory, as get's do. Values are skipped by skipValue, not by gjson: a 40 KB
// promptgate.context is passed over by every reader of the body, a word at a time here.
func members(body []byte, out []gjson.Result, keys ...string) {
	found := 0
	eachMember(unsafe.String(unsafe.SliceData(body), len(body)), 0, func(k string, v gjson.Result) bool {
		for i, key := range keys {
			if key == k && !out[i].Exists() {
				out[i] = v
				found++
				break
			}
		}
		return found < len(keys)
	})
}

// fields calls fn with the unescaped key and the value of each member of obj, an object read from body
// by members, as obj.ForEach would, but skipping values as members does.
func fields(body []byte, obj gjson.Result, fn func(key string, v gjson.Result) bool) {
	if end := obj.Index + len(obj.Raw); obj.Index <= 0 || end > len(body) || string(body[obj.Index:end]) != obj.Raw {
		obj.ForEach(func(k, v gjson.Result) bool { return fn(k.String(), v) })
		return
	}
	eachMember(unsafe.String(unsafe.SliceData(body), len(body)), obj.Index, fn)
}

// eachMember calls fn with the unescaped key and the value of each member of the object that starts at
// s[i:] (after any whitespace), in order, until fn returns false. Each value is gjson.Parse of its raw
// text with Index its offset in s, what gjson.Get gives for it. On malformed JSON it stops where it cannot
// go on, having called fn only for members it read whole; bodies are validated (policy/jsoncheck) first.
func eachMember(s string, i int, fn func(key string, v gjson.Result) bool) {
	if i = skipSpace(s, i); i >= len(s) || s[i] != '{' {
		return
	}
	for i = skipSpace(s, i+1); i < len(s) && s[i] == '"'; i = skipSpace(s, i+1) {
		end := skipString(s, i)
		if end < 0 {
			return
		}
		key := s[i+1 : end-1]
		if strings.IndexByte(key, '\\') >= 0 {
			key = gjson.Parse(s[i:end]).Str
		}
		if i = skipSpace(s, end); i >= len(s) || s[i] != ':' {
			return
		}
		i = skipSpace(s, i+1)
		if end = skipValue(s, i); end < 0 {
			return
		}
		v := gjson.Parse(s[i:end])
		v.Index = i
		if !fn(key, v) {
			return
		}
		if i = skipSpace(s, end); i >= len(s) || s[i] != ',' {
			return
		}
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the offset just after the JSON value that starts at s[i], or -1 when it does not
// end before s does or nothing starts there.
func skipValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				if j = skipString(s, j); j < 0 {
					return -1
				}
				j-- // the loop's j++ moves past the closing quote
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	case ',', ':', '}', ']':
		return -1
	}
	j := i // a number or a literal
	for j < len(s) && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' && s[j] != '\r' {
		j++
	}
	return j
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// skipString returns the offset just after the string whose opening quote is s[i], or -1 when it is not
// closed. It looks at 8 bytes at a time for a quote or a backslash: (x^q)-ones borrows into the high bit of
// the lowest byte equal to q (and &^x keeps only bytes that were below 0x80), so the lowest flagged byte is
// the first quote or backslash of the word.
func skipString(s string, i int) int {
	for j := i + 1; j < len(s); {
		for ; j+8 <= len(s); j += 8 {
			x := uint64(s[j]) | uint64(s[j+1])<<8 | uint64(s[j+2])<<16 | uint64(s[j+3])<<24 |
				uint64(s[j+4])<<32 | uint64(s[j+5])<<40 | uint64(s[j+6])<<48 | uint64(s[j+7])<<56
			q, b := x^('"'*ones), x^('\\'*ones)
			if m := ((q-ones)&^q | (b-ones)&^b) & highs; m != 0 {
				j += bits.TrailingZeros64(m) >> 3
				break
			}
		}
		for j < len(s) && s[j] != '"' && s[j] != '\\' {
			j++
		}
		switch {
		case j >= len(s):
			return -1
		case s[j] == '"':
			return j + 1
		}
		j += 2 // a backslash and the byte it escapes
	}
	return -1
}

// rawOf is v's raw bytes: a slice of body, capped so that an append cannot write into body, when v was
// read from body by get or members; else a copy.
func rawOf(body []byte, v gjson.Result) []byte {
	if end := v.Index + len(v.Raw); v.Index > 0 && end <= len(body) && string(body[v.Index:end]) == v.Raw {
		return body[v.Index:end:end]
	}
	return []byte(v.Raw)
}
