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
