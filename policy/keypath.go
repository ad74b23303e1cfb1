package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// typeError rewrites a decoder's type mismatch in a definition so that it names the key path with
// its indexes, as every other problem of a definition does ("toolCalls.provenance[1].from: a string
// where a list of strings goes"), instead of Go's field names. Other errors are returned as they
// are.
func typeError(body []byte, err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	at := keyPathAt(body, te.Offset)
	if at == "" {
		return err
	}
	return fmt.Errorf("%s: %s where %s goes", at, article(te.Value), goesHere(te.Type.String()))
}

// keyPathAt is the key path of the value of body that ends at byte offset end, or of the object or
// array that opens there (where encoding/json reports a type mismatch); "" when none does, or for
// the whole document. Object keys are joined by dots, array elements are [i].
func keyPathAt(body []byte, end int64) string {
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		idx     int
	}
	var stack []*frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.obj {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				fmt.Fprintf(&b, "[%d]", f.idx)
			}
		}
		return b.String()
	}
	next := func() { // the current element of the innermost container is complete
		if n := len(stack); n > 0 {
			if stack[n-1].obj {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].idx++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			if k, ok := tok.(string); ok {
				stack[n-1].key, stack[n-1].wantKey = k, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if dec.InputOffset() == end { // the decoder reports an object or array of the wrong type here
				return path()
			}
			stack = append(stack, &frame{obj: tok == json.Delim('{'), wantKey: true})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if dec.InputOffset() == end {
			return path()
		}
		next()
	}
}

// article names a JSON value kind as the decoder reports it ("string", "number -5", "object").
func article(value string) string {
	kind, _, _ := strings.Cut(value, " ")
	switch kind {
	case "object", "array":
		return "an " + kind
	case "bool":
		return "true or false"
	}
	return "a " + kind
}

// goesHere names what a Go type of the definition takes.
func goesHere(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]string"):
		return "a list of strings"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "float"), strings.HasPrefix(goType, "*int"), strings.HasPrefix(goType, "*float"):
		return "a number"
	case strings.HasPrefix(goType, "map["):
		return "an object"
	}
	return "an object"
}
