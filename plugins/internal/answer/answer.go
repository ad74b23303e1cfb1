// Package answer checks and parses the answer of a context source (the Gather envelope) as the host
// reads it. The host (package plugins) and the plugin authors' test kit (plugins/sdk/sdktest) share
// it, so that a source that passes its sdktest tests is read the same way by the proxy. It does not
// call sources (the sdk's client does) or place answers in the prompt (assembly does); it lives
// outside the sdk so that a plugin's own binary does not link the host's JSON readers.
package answer

import (
	"errors"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/plugins/sdk"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// MaxAnswerDepth is the deepest nesting of objects and arrays allowed inside "fields".
const MaxAnswerDepth = 64

// Answer is a Gather answer that passed Decode.
type Answer struct {
	// Fields is the source's JSON object, keys in the order the plugin wrote them. It is shared
	// by the host's cache: never mutate it.
	Fields *ctxjson.Value
	// Directives and Notes as the plugin sent them (the host decides what to use).
	Directives []string
	Notes      []string
	// Size is the length of the answer envelope in bytes.
	Size int
}

// Decode checks a Gather answer envelope and parses it. It refuses, with an *sdk.AnswerError:
// more than max bytes (checked first, before anything is parsed); anything that is not one
// strict JSON object (invalid UTF-8 anywhere, including \u escapes of lone surrogates, duplicate
// keys, nesting deeper than MaxAnswerDepth inside fields); "fields" that is not an object
// (a missing "fields" is {}); "directives" or "notes" that are not arrays of strings. Unknown
// keys of the envelope are ignored, so that a newer plugin can add some within protocol v1.
//
// Invalid UTF-8 refuses the whole answer rather than being replaced with U+FFFD: a source that
// sends it is broken, and saying so in meta.skipped is more useful than quietly changing its data.
func Decode(raw []byte, max int) (Answer, error) {
	if max <= 0 {
		max = sdk.DefaultMaxAnswerBytes
	}
	if len(raw) > max {
		return Answer{}, &sdk.AnswerError{TooLarge: true, Max: max}
	}
	if err := jsoncheck.Object(raw, jsoncheck.Limits{MaxDepth: MaxAnswerDepth + 1}); err != nil {
		var je *jsoncheck.Error
		if errors.As(err, &je) {
			return Answer{}, &sdk.AnswerError{Problem: je.Kind.String()}
		}
		return Answer{}, &sdk.AnswerError{Problem: "not JSON"}
	}
	env, err := ctxjson.Parse(raw)
	if err != nil { // not reached after jsoncheck; kept so that a gap between the two fails closed
		return Answer{}, &sdk.AnswerError{Problem: "not JSON"}
	}
	a := Answer{Fields: env.Get("fields"), Size: len(raw)}
	switch {
	case a.Fields == nil:
		a.Fields = ctxjson.Object()
	case a.Fields.Kind() != ctxjson.KindObject:
		return Answer{}, &sdk.AnswerError{Problem: "fields is " + article(a.Fields.Kind()) + ", not a JSON object"}
	}
	if a.Directives, err = stringList(env.Get("directives"), "directives"); err != nil {
		return Answer{}, err
	}
	if a.Notes, err = stringList(env.Get("notes"), "notes"); err != nil {
		return Answer{}, err
	}
	return a, nil
}

func stringList(v *ctxjson.Value, name string) ([]string, error) {
	if v == nil || v.Kind() == ctxjson.KindNull {
		return nil, nil
	}
	if v.Kind() != ctxjson.KindArray {
		return nil, &sdk.AnswerError{Problem: name + " is not an array of strings"}
	}
	out := make([]string, 0, v.Len())
	for _, e := range v.Elems() {
		if e.Kind() != ctxjson.KindString {
			return nil, &sdk.AnswerError{Problem: name + " is not an array of strings"}
		}
		out = append(out, e.Text())
	}
	return out, nil
}

func article(k ctxjson.Kind) string {
	switch k {
	case ctxjson.KindNull:
		return "null"
	case ctxjson.KindArray, ctxjson.KindObject:
		return "an " + k.String()
	}
	return "a " + k.String()
}
