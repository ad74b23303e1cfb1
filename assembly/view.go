package assembly

import (
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
// The results share body's memory, as get's do.
func members(body []byte, out []gjson.Result, keys ...string) {
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	if !root.IsObject() {
		return
	}
	found := 0
	root.ForEach(func(k, v gjson.Result) bool {
		for i, key := range keys {
			if key == k.Str && !out[i].Exists() {
				out[i] = v
				found++
				break
			}
		}
		return found < len(keys)
	})
}

// rawOf is v's raw bytes: a slice of body, capped so that an append cannot write into body, when v was
// read from body by get or members; else a copy.
func rawOf(body []byte, v gjson.Result) []byte {
	if end := v.Index + len(v.Raw); v.Index > 0 && end <= len(body) && string(body[v.Index:end]) == v.Raw {
		return body[v.Index:end:end]
	}
	return []byte(v.Raw)
}
