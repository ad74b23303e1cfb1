package surface

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
)

// What the surfaces' AppendTurn share: writing the items of a turn promptgate answers itself.

// AppendRaw appends raw JSON values to the array at path of body.
func AppendRaw(body []byte, path string, items ...[]byte) ([]byte, error) {
	var err error
	for _, it := range items {
		if body, err = sjson.SetRawBytes(body, path+".-1", it); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// Object writes a JSON object from key, value pairs; a value is a string (written as a JSON
// string), raw JSON ([]byte) or a bool.
func Object(kv ...any) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		assembly.WriteJSONString(&b, kv[i].(string))
		b.WriteByte(':')
		switch v := kv[i+1].(type) {
		case string:
			assembly.WriteJSONString(&b, v)
		case []byte:
			b.Write(v)
		case bool:
			fmt.Fprint(&b, v)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// ArgsOrEmpty is a call's argument JSON, "{}" when it has none.
func ArgsOrEmpty(a []byte) []byte {
	if len(bytes.TrimSpace(a)) == 0 {
		return []byte("{}")
	}
	return a
}

// InputString is a custom tool's input as a Go string (a call's Args holds it as a JSON string).
func InputString(a []byte) string {
	if v := gjson.ParseBytes(a); v.Type == gjson.String {
		return v.Str
	}
	return string(a)
}
