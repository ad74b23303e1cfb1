package vet

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// generalOnly returns a Checker for p whose schemas are validated by the general engine alone, as
// they were before the subset validator: the baseline of the tests and benchmarks that compare the
// two.
func generalOnly(p Policy) *Checker {
	c := NewChecker(p)
	c.schemas = map[string]*compiledSchema{}
	for name, raw := range p.Schemas {
		cs := newCompiledSchema(raw)
		cs.fast = nil
		c.schemas[name] = cs
	}
	return c
}

// engines is what the two validators make of one pair of a schema and arguments.
type engines struct {
	skip     bool          // the arguments are not what vetting passes on, or the schema does not compile
	declined bool          // the subset validator does not take the schema
	subset   subsetVerdict // its verdict
	general  bool          // jsonschema accepts the arguments
	panicked bool          // jsonschema panicked (and does not accept them)
}

// runEngines validates args against schema with both validators, as checkSchema sees them:
// arguments that jsoncheck accepted, a schema that compiled.
func runEngines(schema, args []byte) engines {
	if jsoncheck.Object(args, jsoncheck.Limits{FoldedKeys: true}) != nil {
		return engines{skip: true}
	}
	s, err := compileSchema(schema)
	if err != nil || s == nil {
		return engines{skip: true}
	}
	err = validateGeneral(s, args)
	e := engines{general: err == nil, panicked: errors.Is(err, errValidatorFailed)}
	fast := compileSubset(s)
	if fast == nil {
		e.declined = true
		return e
	}
	e.subset = fast.validate(args)
	return e
}

// disagree reports a pair on which the subset validator says something the general engine does not.
func (e engines) disagree() bool {
	return !e.skip && !e.declined && (e.subset == subsetAccept && !e.general || e.subset == subsetReject && e.general)
}

// subsetCases are the pairs where an engine could go wrong: integers written as 1.0 or 1e2, -0,
// numbers beyond float64 (1e400) or between two float64 (2^53+1), code points against UTF-16 units
// and bytes, escapes, enum and const by value, required and additional properties, nested arrays of
// objects.
var subsetCases = []struct {
	name, schema, args string
	accept             bool
}{
	{"integer 1", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1}`, true},
	{"integer written 1.0", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1.0}`, true},
	{"integer written 1e2", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1e2}`, true},
	{"integer written 1E-2", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1E-2}`, false},
	{"integer 1.5", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1.5}`, false},
	{"integer -0", `{"properties":{"n":{"type":"integer"}}}`, `{"n":-0}`, true},
	{"integer 1e400", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1e400}`, true},
	{"integer 1e-400", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1e-400}`, false},
	{"integer of 23 digits", `{"properties":{"n":{"type":"integer"}}}`, `{"n":12345678901234567890123}`, true},
	{"integer just above 1", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1.0000000000000000001}`, false},
	{"integer as a string", `{"properties":{"n":{"type":"integer"}}}`, `{"n":"1"}`, false},
	{"integer beyond big.Rat", `{"properties":{"n":{"type":"integer"}}}`, `{"n":1e1000001}`, false},
	{"number takes integers", `{"properties":{"n":{"type":"number"}}}`, `{"n":7}`, true},
	{"minimum 0 takes -0", `{"properties":{"n":{"minimum":0}}}`, `{"n":-0}`, true},
	{"exclusiveMinimum 0 refuses -0", `{"properties":{"n":{"exclusiveMinimum":0}}}`, `{"n":-0}`, false},
	{"exclusiveMinimum 0 refuses 0.0", `{"properties":{"n":{"exclusiveMinimum":0}}}`, `{"n":0.0}`, false},
	{"exclusiveMinimum 0 takes 1e-400", `{"properties":{"n":{"exclusiveMinimum":0}}}`, `{"n":1e-400}`, true},
	{"maximum 1e400 refuses 1e401", `{"properties":{"n":{"maximum":1e400}}}`, `{"n":1e401}`, false},
	{"maximum 1e400 takes 1e400", `{"properties":{"n":{"maximum":1e400}}}`, `{"n":1e400}`, true},
	{"maximum 2^53 refuses 2^53+1", `{"properties":{"n":{"maximum":9007199254740992}}}`, `{"n":9007199254740993}`, false},
	{"minimum 0.1 takes 0.1", `{"properties":{"n":{"minimum":0.1}}}`, `{"n":0.1}`, true},
	{"minimum 0.1 refuses less by 1e-20", `{"properties":{"n":{"minimum":0.1}}}`, `{"n":0.09999999999999999999}`, false},
	{"exclusiveMaximum 10 refuses 1e1", `{"properties":{"n":{"exclusiveMaximum":10}}}`, `{"n":1e1}`, false},
	{"int64 bounds", `{"properties":{"n":{"minimum":-9223372036854775808,"maximum":9223372036854775807}}}`, `{"n":-9223372036854775808}`, true},
	{"below the int64 minimum", `{"properties":{"n":{"minimum":-9223372036854775808}}}`, `{"n":-9223372036854775809}`, false},
	{"multipleOf 0.1 takes 0.3", `{"properties":{"n":{"multipleOf":0.1}}}`, `{"n":0.3}`, true},
	{"multipleOf 3 refuses 1e400", `{"properties":{"n":{"multipleOf":3}}}`, `{"n":1e400}`, false},
	{"multipleOf 2 takes 1e400", `{"properties":{"n":{"multipleOf":2}}}`, `{"n":1e400}`, true},
	{"multipleOf 4 refuses -6", `{"properties":{"n":{"multipleOf":4}}}`, `{"n":-6}`, false},
	{"draft-04 boolean exclusiveMinimum", `{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"n":{"minimum":1,"exclusiveMinimum":true}}}`, `{"n":1}`, false},
	{"draft-04 boolean exclusiveMinimum, above", `{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"n":{"minimum":1,"exclusiveMinimum":true}}}`, `{"n":1.5}`, true},
	{"enum 1 takes 1.0", `{"properties":{"n":{"enum":[1]}}}`, `{"n":1.0}`, true},
	{"enum 1.0 takes 1", `{"properties":{"n":{"enum":[1.0]}}}`, `{"n":1}`, true},
	{"enum 1 refuses a string", `{"properties":{"n":{"enum":[1]}}}`, `{"n":"1"}`, false},
	{"enum 1e400", `{"properties":{"n":{"enum":[1e400]}}}`, `{"n":10e399}`, true},
	{"enum false refuses 0", `{"properties":{"n":{"enum":[false]}}}`, `{"n":0}`, false},
	{"enum null", `{"properties":{"n":{"enum":[null,"a"]}}}`, `{"n":null}`, true},
	{"enum object by value", `{"properties":{"n":{"enum":[{"a":1}]}}}`, `{"n":{"a":1.0}}`, true},
	{"enum object with one more member", `{"properties":{"n":{"enum":[{"a":1}]}}}`, `{"n":{"a":1,"b":2}}`, false},
	{"enum object with one less member", `{"properties":{"n":{"enum":[{"a":1,"b":2}]}}}`, `{"n":{"a":1}}`, false},
	{"enum array in order", `{"properties":{"n":{"enum":[[1,"x"]]}}}`, `{"n":[1,"x"]}`, true},
	{"enum array out of order", `{"properties":{"n":{"enum":[[1,"x"]]}}}`, `{"n":["x",1]}`, false},
	{"enum array longer", `{"properties":{"n":{"enum":[[1]]}}}`, `{"n":[1,1]}`, false},
	{"empty enum", `{"properties":{"n":{"enum":[]}}}`, `{"n":"a"}`, false},
	{"const by escape", `{"properties":{"s":{"const":"é"}}}`, `{"s":"\u00e9"}`, true},
	{"const é against e and a combining accent", `{"properties":{"s":{"const":"é"}}}`, `{"s":"e\u0301"}`, false},
	{"maxLength 1 takes a surrogate pair", `{"properties":{"s":{"maxLength":1}}}`, `{"s":"\ud83d\ude00"}`, true},
	{"maxLength 1 takes an emoji", `{"properties":{"s":{"maxLength":1}}}`, `{"s":"😀"}`, true},
	{"maxLength 1 refuses a combining mark", `{"properties":{"s":{"maxLength":1}}}`, `{"s":"e\u0301"}`, false},
	{"minLength 2 takes a combining mark", `{"properties":{"s":{"minLength":2}}}`, `{"s":"e\u0301"}`, true},
	{"maxLength 1 takes a ligature", `{"properties":{"s":{"maxLength":1}}}`, `{"s":"ﬀ"}`, true},
	{"maxLength counts an escaped NUL", `{"properties":{"s":{"maxLength":0}}}`, `{"s":"\u0000"}`, false},
	{"pattern dot is one code point", `{"properties":{"s":{"pattern":"^.$"}}}`, `{"s":"\ud83d\ude00"}`, true},
	{"pattern dot and a combining mark", `{"properties":{"s":{"pattern":"^.$"}}}`, `{"s":"e\u0301"}`, false},
	{"pattern letter class", `{"properties":{"s":{"pattern":"^\\p{L}+$"}}}`, `{"s":"Zürich"}`, true},
	{"pattern unanchored", `{"properties":{"s":{"pattern":"é"}}}`, `{"s":"xéy"}`, true},
	{"pattern on a number is ignored", `{"properties":{"s":{"pattern":"^a"}}}`, `{"s":12}`, true},
	{"additionalProperties false, no properties, empty", `{"additionalProperties":false}`, `{}`, true},
	{"additionalProperties false, no properties", `{"additionalProperties":false}`, `{"a":1}`, false},
	{"additionalProperties false, known", `{"properties":{"a":{}},"additionalProperties":false}`, `{"a":1}`, true},
	{"additionalProperties false, unknown", `{"properties":{"a":{}},"additionalProperties":false}`, `{"b":1}`, false},
	{"additionalProperties false, escaped key", `{"properties":{"é":{"type":"string"}},"additionalProperties":false}`, `{"\u00e9":"x"}`, true},
	{"additionalProperties false, required only", `{"properties":{"b":{}},"required":["a"],"additionalProperties":false}`, `{"a":1}`, false},
	{"additionalProperties schema", `{"properties":{"a":{}},"additionalProperties":{"type":"string"}}`, `{"a":1,"x":"y"}`, true},
	{"additionalProperties schema refuses", `{"properties":{"a":{}},"additionalProperties":{"type":"string"}}`, `{"a":1,"x":2}`, false},
	{"required missing", `{"required":["a"]}`, `{}`, false},
	{"required null", `{"required":["a"]}`, `{"a":null}`, true},
	{"required of a nested object", `{"properties":{"o":{"type":"object","required":["a"]}}}`, `{"o":{"b":1}}`, false},
	{"required applies to objects only", `{"properties":{"o":{"required":["a"]}}}`, `{"o":[1]}`, true},
	{"minProperties", `{"minProperties":2}`, `{"a":1}`, false},
	{"maxProperties", `{"maxProperties":1}`, `{"a":1,"b":{"c":1}}`, false},
	{"nested arrays of objects", listSchema, `{"list":[{"id":1},{"id":2.0,"tags":["a","b"]}]}`, true},
	{"nested arrays of objects, one without id", listSchema, `{"list":[{"id":1},{}]}`, false},
	{"nested arrays of objects, empty", listSchema, `{"list":[]}`, false},
	{"nested arrays of objects, an extra key", listSchema, `{"list":[{"id":1,"x":1}]}`, false},
	{"nested arrays of objects, a long tag", listSchema, `{"list":[{"id":1,"tags":["abcd"]}]}`, false},
	{"nested arrays of objects, too many", listSchema, `{"list":[{"id":1},{"id":2},{"id":3},{"id":4}]}`, false},
	{"prefixItems", tupleSchema, `{"t":["a",1]}`, true},
	{"prefixItems, one more", tupleSchema, `{"t":["a",1,2]}`, false},
	{"prefixItems, shorter", tupleSchema, `{"t":["a"]}`, true},
	{"prefixItems, wrong type", tupleSchema, `{"t":[1]}`, false},
	{"draft-07 items schema", `{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"t":{"items":{"type":"string"}}}}`, `{"t":["a",1]}`, false},
	{"type list", `{"properties":{"n":{"type":["string","null"]}}}`, `{"n":null}`, true},
	{"type list refuses", `{"properties":{"n":{"type":["string","null"]}}}`, `{"n":1}`, false},
	{"type list with integer", `{"properties":{"n":{"type":["string","integer"]}}}`, `{"n":2.0}`, true},
	{"false property", `{"properties":{"a":false}}`, `{"a":1}`, false},
	{"false property absent", `{"properties":{"a":false}}`, `{}`, true},
	{"true schema", `true`, `{"a":1}`, true},
	{"false schema", `false`, `{}`, false},
	{"format not asserted in 2020-12", `{"properties":{"e":{"type":"string","format":"email"}}}`, `{"e":"x"}`, true},
	{"annotations and unknown keywords", `{"title":"t","description":"d","$comment":"c","x-vendor":{"$ref":"#"},"nullable":true,"$defs":{"x":{"type":"string"}},"properties":{"a":{"type":"integer","default":"x","examples":["y"],"deprecated":true,"readOnly":true}}}`, `{"a":"s"}`, false},
}

const listSchema = `{"type":"object","properties":{"list":{"type":"array","minItems":1,"maxItems":3,
	"items":{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":3}}},
	"required":["id"],"additionalProperties":false}}},"required":["list"]}`

const tupleSchema = `{"properties":{"t":{"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}}}`

// TestSubsetTrickyCases: on each pair, the subset validator takes the schema, decides, and decides
// as jsonschema does and as the JSON Schema specification says.
func TestSubsetTrickyCases(t *testing.T) {
	t.Parallel()
	for _, tc := range subsetCases {
		e := runEngines([]byte(tc.schema), []byte(tc.args))
		switch {
		case e.skip:
			t.Errorf("%s: the pair does not reach the schema", tc.name)
		case e.declined:
			t.Errorf("%s: the subset validator declines the schema", tc.name)
		case e.subset == subsetUnsure:
			t.Errorf("%s: the subset validator is unsure", tc.name)
		case (e.subset == subsetAccept) != tc.accept || e.general != tc.accept:
			t.Errorf("%s: subset accepts %v, jsonschema accepts %v, want %v", tc.name, e.subset == subsetAccept, e.general, tc.accept)
		}
	}
}

// TestSubsetUnsureOfNumbersBigRatCannotRead: a bounded number that big.Rat cannot read (its
// exponent is too large) is left to the general engine.
func TestSubsetUnsureOfNumbersBigRatCannotRead(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{`{"properties":{"n":{"minimum":0}}}`, `{"properties":{"n":{"exclusiveMaximum":0}}}`,
		`{"properties":{"n":{"multipleOf":2}}}`} {
		if e := runEngines([]byte(schema), []byte(`{"n":1e1000001}`)); e.declined || e.subset != subsetUnsure {
			t.Errorf("%s: declined %v, verdict %d, want unsure", schema, e.declined, e.subset)
		}
	}
	if e := runEngines([]byte(`{"properties":{"n":{"enum":[1]}}}`), []byte(`{"n":1e1000001}`)); e.subset != subsetReject || e.general {
		t.Errorf("enum: verdict %d, jsonschema accepts %v, want both to refuse", e.subset, e.general)
	}
}

// TestSubsetDeclines: a schema with a keyword outside the subset, or one that means something else
// in the schema's draft, gets no subset validator.
func TestSubsetDeclines(t *testing.T) {
	t.Parallel()
	const d7 = `"$schema":"http://json-schema.org/draft-07/schema#",`
	for _, schema := range []string{
		`{"$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`,
		`{"properties":{"a":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`,
		`{"allOf":[{"required":["a"]}]}`, `{"oneOf":[{"required":["a"]},{"required":["b"]}]}`,
		`{"properties":{"a":{"not":{"type":"null"}}}}`, `{"if":{"required":["a"]},"then":{"required":["b"]}}`,
		`{"if":{"required":["a"]},"else":{"required":["b"]}}`,
		`{"dependentRequired":{"a":["b"]}}`, `{"dependentSchemas":{"a":{"required":["b"]}}}`,
		`{"patternProperties":{"^x":{"type":"string"}}}`, `{"propertyNames":{"maxLength":3}}`,
		`{"unevaluatedProperties":false}`, `{"properties":{"a":{"unevaluatedItems":false}}}`,
		`{"properties":{"a":{"uniqueItems":true}}}`, `{"properties":{"a":{"contains":{"type":"string"}}}}`,
		`{"properties":{"a":{"contains":{"type":"string"},"minContains":2}}}`,
		`{` + d7 + `"properties":{"e":{"format":"email"}}}`,
		`{` + d7 + `"properties":{"t":{"items":[{"type":"string"}]}}}`,
		`{` + d7 + `"properties":{"t":{"items":[{"type":"string"}],"additionalItems":false}}}`,
		`{` + d7 + `"dependencies":{"a":["b"]}}`,
		`{` + d7 + `"definitions":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/definitions/s","maxLength":1}}}`,
		`{"$schema":"https://json-schema.org/draft/2019-09/schema","properties":{"a":{"$recursiveRef":"#"}}}`,
		`{"$dynamicAnchor":"n","properties":{"a":{"$dynamicRef":"#n"}}}`,
		`{"properties":{"a":{"items":{"items":{"items":{"anyOf":[true]}}}}}}`,
		`{"properties":{"a":{"additionalProperties":{"not":true}}}}`,
	} {
		s, err := compileSchema([]byte(schema))
		if err != nil {
			t.Errorf("%s: %v", schema, err)
			continue
		}
		if compileSubset(s) != nil {
			t.Errorf("%s: the subset validator takes it", schema)
		}
	}
	deep := strings.Repeat(`{"items":`, maxSubsetDepth+2) + `{}` + strings.Repeat(`}`, maxSubsetDepth+2)
	if s, err := compileSchema([]byte(deep)); err != nil || compileSubset(s) != nil {
		t.Errorf("a schema nested deeper than %d levels: %v, or the subset validator takes it", maxSubsetDepth, err)
	}
}

// TestSubsetKnowsEverySchemaField: each field of jsonschema's compiled Schema is one the subset
// validator reads, one that makes it decline, or an annotation. A new version of jsonschema with a
// new keyword fails here until the field is sorted into one of the three.
func TestSubsetKnowsEverySchemaField(t *testing.T) {
	t.Parallel()
	read := []string{"Bool", "Types", "Enum", "Const", "Required", "Properties", "AdditionalProperties",
		"MinProperties", "MaxProperties", "Items", "PrefixItems", "Items2020", "MinItems", "MaxItems", "MinLength",
		"MaxLength", "Pattern", "Maximum", "Minimum", "ExclusiveMaximum", "ExclusiveMinimum", "MultipleOf"}
	declined := []string{"Ref", "RecursiveRef", "DynamicRef", "Not", "AllOf", "AnyOf", "OneOf", "If", "Then", "Else",
		"Format", "PropertyNames", "PatternProperties", "Dependencies", "DependentRequired", "DependentSchemas",
		"UnevaluatedProperties", "UniqueItems", "Contains", "MinContains", "MaxContains", "AdditionalItems",
		"UnevaluatedItems", "ContentEncoding", "ContentMediaType", "ContentSchema", "Extensions"}
	// Where references lead and what they are called, and the annotations: no effect without a
	// reference.
	ignored := []string{"DraftVersion", "Location", "ID", "Anchor", "RecursiveAnchor", "DynamicAnchor", "Title",
		"Description", "Default", "Comment", "ReadOnly", "WriteOnly", "Examples", "Deprecated"}
	typ := reflect.TypeFor[jsonschema.Schema]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.IsExported() && !slices.Contains(read, f.Name) && !slices.Contains(declined, f.Name) && !slices.Contains(ignored, f.Name) {
			t.Errorf("jsonschema.Schema.%s: the subset validator does not know it", f.Name)
		}
	}
	for _, name := range declined {
		s := &jsonschema.Schema{}
		setNonZero(t, reflect.ValueOf(s).Elem().FieldByName(name))
		if !outsideSubset(s) {
			t.Errorf("a schema with %s set is taken by the subset validator", name)
		}
	}
}

// setNonZero sets v to a value that is not its zero (a non-empty slice or map, a pointer to a new
// value, true).
func setNonZero(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem())
		v.Set(m)
	case reflect.Interface:
		v.Set(reflect.ValueOf(false))
	default:
		t.Fatalf("field of kind %s", v.Kind())
	}
}

// TestSubsetKeepsReasons: a Checker with the subset validator gives every call the reason the
// general engine alone gives it, the table's calls and calls of the typical tools.
func TestSubsetKeepsReasons(t *testing.T) {
	t.Parallel()
	type call struct{ schema, args string }
	var calls []call
	for _, tc := range subsetCases {
		calls = append(calls, call{tc.schema, tc.args})
	}
	for _, a := range []string{weatherArgs, `{"city":"Zürich","units":"kelvin"}`, `{"city":""}`, `{"units":"metric"}`,
		`{"city":"Bern","days":0}`, `{"city":"Bern","days":2.5}`, `{"city":"Bern","extra":true}`} {
		calls = append(calls, call{weatherSchema, a})
	}
	for _, a := range []string{emailArgs, `{"to":[{"address":"a@example.com","name":7}],"subject":"s","body":"b"}`,
		`{"to":[],"subject":"s","body":"b"}`, `{"to":[{"address":"a@example.com"}],"subject":"s","body":"b","priority":"urgent"}`,
		`{"to":[{"address":"a@example.com"}],"subject":"s","body":"b","attachments":[{"name":"x","size":-1}]}`} {
		calls = append(calls, call{emailSchema, a})
	}
	handled := 0
	for _, c := range calls {
		p := Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": []byte(c.schema)}}
		fast, general := NewChecker(p), generalOnly(p)
		r1, _, ok1 := fast.Check("t", []byte(c.args))
		r2, _, ok2 := general.Check("t", []byte(c.args))
		if r1 != r2 || ok1 != ok2 {
			t.Errorf("%s %s: with the subset %q %v, without %q %v", c.schema, c.args, r1, ok1, r2, ok2)
		}
		if fast.schema("t").fast != nil {
			handled++
		}
	}
	if handled != len(calls) {
		t.Errorf("the subset validator took %d of %d schemas", handled, len(calls))
	}
}

// TestSubsetAgreesOnGeneratedPairs runs the fuzz target's generator on pseudo-random bytes: the two
// engines agree on every pair the subset validator decides, and the generator reaches both verdicts
// and declines.
func TestSubsetAgreesOnGeneratedPairs(t *testing.T) {
	t.Parallel()
	n := 6000
	if testing.Short() {
		n = 1000
	}
	var counts [3]int
	declined, skipped := 0, 0
	seed := uint64(1)
	for range n {
		data := make([]byte, 200)
		for i := range data {
			seed = seed*6364136223846793005 + 1442695040888963407
			data[i] = byte(seed >> 56)
		}
		schema, args := generatePair(data)
		e := runEngines(schema, args)
		switch {
		case e.disagree():
			t.Fatalf("schema %s\nargs %s\nsubset %d, jsonschema accepts %v", schema, args, e.subset, e.general)
		case e.skip:
			skipped++
		case e.declined:
			declined++
		default:
			counts[e.subset]++
		}
	}
	decided := counts[subsetAccept] + counts[subsetReject]
	t.Logf("%d pairs: %d accepted, %d rejected, %d unsure, %d declined, %d skipped", n, counts[subsetAccept],
		counts[subsetReject], counts[subsetUnsure], declined, skipped)
	if counts[subsetAccept] < n/10 || counts[subsetReject] < n/10 || declined < n/50 || decided < n/2 {
		t.Errorf("the generator explores too little: %v decided, %d declined of %d", counts, declined, n)
	}
}

// FuzzSubsetAgrees: on every pair of a schema and arguments, the subset validator declines the
// schema, is unsure, or decides as jsonschema does. The input builds the pair (generatePair); an
// input that starts with 0xFF is the schema and the arguments themselves, split at the first NUL
// byte.
func FuzzSubsetAgrees(f *testing.F) {
	for _, tc := range subsetCases {
		f.Add(append(append(append([]byte{0xFF}, tc.schema...), 0), tc.args...))
	}
	f.Add([]byte{})
	f.Add([]byte("structured seed: objects of objects with bounds and enums"))
	f.Fuzz(func(t *testing.T, data []byte) {
		schema, args := generatePair(data)
		if len(data) > 0 && data[0] == 0xFF {
			schema, args, _ = bytesCut(data[1:], 0)
		}
		if e := runEngines(schema, args); e.disagree() {
			t.Fatalf("schema %s\nargs %s\nsubset %d, jsonschema accepts %v", schema, args, e.subset, e.general)
		}
	})
}

func bytesCut(b []byte, sep byte) (before, after []byte, found bool) {
	if i := slices.Index(b, sep); i >= 0 {
		return b[:i], b[i+1:], true
	}
	return b, nil, false
}

// pairGen builds a schema and arguments from bytes, the same ones from the same bytes; past the end
// every choice is the first.
type pairGen struct {
	b []byte
	i int
}

func (g *pairGen) n(k int) int {
	if g.i >= len(g.b) || k <= 1 {
		return 0
	}
	c := g.b[g.i]
	g.i++
	return int(c) % k
}

func (g *pairGen) pick(xs []string) string { return xs[g.n(len(xs))] }

// genSchema is a generated schema: its JSON text, and what the argument generator aims at.
type genSchema struct {
	text     string
	boolean  bool
	types    []string
	props    []genProp
	required []string
	extra    *genSchema // additionalProperties as a schema
	prefix   []*genSchema
	items    *genSchema
	literals []string // enum and const values
}

type genProp struct {
	name   string
	schema *genSchema
}

var (
	genKeys    = []string{"a", "b", "c", "é", "list", "x y"}
	genTypes   = []string{"string", "integer", "number", "boolean", "null", "object", "array"}
	genStrings = []string{`""`, `"a"`, `"ab"`, `"abc"`, `"é"`, `"\u00e9"`, `"e\u0301"`, `"😀"`, `"\ud83d\ude00"`,
		`"T-1"`, `"12"`, `"a\nb"`, `"\u0000"`, `"aaaaaaa"`, `"x😀y"`, `"Ab"`, `"ﬀ"`, `"\u212a"`, `"b"`}
	genNumbers = []string{`0`, `-0`, `1`, `1.0`, `1e0`, `10`, `-1`, `1.5`, `0.1`, `1e400`, `-1e400`, `1e-400`,
		`123456789012345678901234567890`, `9007199254740993`, `2.5`, `100`, `1E2`, `0.0`, `5e-1`, `3`, `7`, `-7.5`,
		`999999999999999999`, `9223372036854775807`, `-9223372036854775809`, `1.0000000000000000001`, `0.3`,
		`1e1000001`, `6`}
	genBounds    = []string{`0`, `1`, `-1`, `1.5`, `0.1`, `10`, `100`, `2.5`, `1e2`, `3`, `9007199254740992`, `1.0`, `1e400`, `-0`, `7`}
	genMultiples = []string{`1`, `2`, `0.1`, `0.5`, `1.5`, `3`, `1e2`, `1e-400`, `0.3`}
	genPatterns  = []string{`^a`, `b$`, `^[a-z]+$`, `\\d`, `é`, `^.$`, `^\\p{L}+$`, `(?i)^ab`, `^$`, `^.{2}$`, `[`,
		`^\\w+$`, `😀`, `\\u00e9`, `^T-[0-9]+$`, `\\x{e9}`}
	genOutside = []string{`"anyOf":[{"type":"string"},{"type":"integer"}]`, `"format":"email"`, `"uniqueItems":true`,
		`"$ref":"#"`, `"not":{"type":"null"}`, `"patternProperties":{"^x":{}}`, `"propertyNames":{"maxLength":2}`,
		`"dependentRequired":{"a":["b"]}`, `"contains":{"type":"integer"}`, `"unevaluatedProperties":false`,
		`"if":{"type":"string"},"then":{"minLength":1}`}
	genDrafts = []string{`http://json-schema.org/draft-04/schema#`, `http://json-schema.org/draft-06/schema#`,
		`http://json-schema.org/draft-07/schema#`, `https://json-schema.org/draft/2019-09/schema`,
		`https://json-schema.org/draft/2020-12/schema`}
	genAnnotations = []string{`"description":"d"`, `"title":"t"`, `"default":1`, `"examples":["e"]`, `"$comment":"c"`,
		`"x-vendor":{"type":"string"}`, `"nullable":true`}
)

// generatePair builds a schema and arguments aimed at it from data.
func generatePair(data []byte) (schema, args []byte) {
	g := &pairGen{b: data}
	draft := ""
	if g.n(6) == 0 {
		draft = g.pick(genDrafts)
	}
	s := g.schema(0, draft)
	if draft != "" && !s.boolean {
		s.text = `{"$schema":"` + draft + `",` + strings.TrimPrefix(s.text, "{")
		s.text = strings.Replace(s.text, `,}`, `}`, 1)
	}
	var b strings.Builder
	g.object(&b, s, 0)
	return []byte(s.text), []byte(b.String())
}

// schema generates one (sub)schema; the root is an object schema most of the time.
func (g *pairGen) schema(depth int, draft string) *genSchema {
	if depth > 0 && g.n(12) == 0 {
		v := g.n(2) == 0
		return &genSchema{text: fmt.Sprint(v), boolean: true}
	}
	s := &genSchema{}
	var kw []string
	add := func(k, v string) { kw = append(kw, `"`+k+`":`+v) }
	switch c := g.n(8); {
	case depth == 0 && c < 6:
		s.types = []string{"object"}
	case c < 5:
		s.types = []string{genTypes[g.n(len(genTypes))]}
	case c < 7:
		i := g.n(len(genTypes))
		s.types = []string{genTypes[i], genTypes[(i+1+g.n(len(genTypes)-1))%len(genTypes)]}
	}
	if len(s.types) == 1 {
		add("type", `"`+s.types[0]+`"`)
	} else if len(s.types) > 1 {
		add("type", `["`+strings.Join(s.types, `","`)+`"]`)
	}
	has := func(t string) bool { return len(s.types) == 0 || slices.Contains(s.types, t) }
	if has("object") && depth < 3 {
		g.objectKeywords(s, depth, draft, add)
	}
	if has("array") && depth < 3 {
		g.arrayKeywords(s, depth, draft, add)
	}
	if has("string") {
		if g.n(3) == 0 {
			add("minLength", fmt.Sprint(g.n(4)))
		}
		if g.n(3) == 0 {
			add("maxLength", fmt.Sprint(g.n(4)))
		}
		if g.n(3) == 0 {
			add("pattern", `"`+g.pick(genPatterns)+`"`)
		}
	}
	if has("number") || has("integer") {
		g.numberKeywords(draft, add)
	}
	if g.n(6) == 0 {
		var vals []string
		for range g.n(4) {
			vals = append(vals, g.literal())
		}
		s.literals = append(s.literals, vals...)
		add("enum", "["+strings.Join(vals, ",")+"]")
	}
	if draft != "http://json-schema.org/draft-04/schema#" && g.n(10) == 0 {
		v := g.literal()
		s.literals = append(s.literals, v)
		add("const", v)
	}
	if g.n(25) == 0 {
		kw = append(kw, g.pick(genOutside))
	}
	if g.n(6) == 0 {
		kw = append(kw, g.pick(genAnnotations))
	}
	s.text = "{" + strings.Join(kw, ",") + "}"
	return s
}

func (g *pairGen) objectKeywords(s *genSchema, depth int, draft string, add func(k, v string)) {
	var props []string
	for range g.n(4) {
		name := g.pick(genKeys)
		if slices.ContainsFunc(s.props, func(p genProp) bool { return p.name == name }) {
			continue
		}
		sub := g.schema(depth+1, draft)
		s.props = append(s.props, genProp{name, sub})
		props = append(props, `"`+name+`":`+sub.text)
	}
	if len(props) > 0 || g.n(4) == 0 {
		add("properties", "{"+strings.Join(props, ",")+"}")
	}
	if g.n(2) == 0 {
		var req []string
		for range 1 + g.n(3) {
			name := g.pick(genKeys)
			if len(s.props) > 0 && g.n(4) != 0 {
				name = s.props[g.n(len(s.props))].name
			}
			if !slices.Contains(s.required, name) {
				s.required = append(s.required, name)
				req = append(req, `"`+name+`"`)
			}
		}
		add("required", "["+strings.Join(req, ",")+"]")
	}
	switch g.n(5) {
	case 1, 2:
		add("additionalProperties", "false")
	case 3:
		add("additionalProperties", "true")
	case 4:
		s.extra = g.schema(depth+1, draft)
		add("additionalProperties", s.extra.text)
	}
	if g.n(6) == 0 {
		add("minProperties", fmt.Sprint(g.n(3)))
	}
	if g.n(6) == 0 {
		add("maxProperties", fmt.Sprint(g.n(4)))
	}
}

func (g *pairGen) arrayKeywords(s *genSchema, depth int, draft string, add func(k, v string)) {
	switch g.n(5) {
	case 1, 2:
		s.items = g.schema(depth+1, draft)
		add("items", s.items.text)
	case 3: // prefixItems in 2020-12; the array form of items before (which the subset declines)
		var texts []string
		for range 1 + g.n(2) {
			sub := g.schema(depth+1, draft)
			s.prefix = append(s.prefix, sub)
			texts = append(texts, sub.text)
		}
		if strings.Contains(draft, "json-schema.org/draft-0") || strings.Contains(draft, "2019-09") {
			add("items", "["+strings.Join(texts, ",")+"]")
		} else {
			add("prefixItems", "["+strings.Join(texts, ",")+"]")
		}
		if g.n(2) == 0 {
			s.items = g.schema(depth+1, draft)
			add("items", s.items.text)
		}
	}
	if g.n(4) == 0 {
		add("minItems", fmt.Sprint(g.n(3)))
	}
	if g.n(4) == 0 {
		add("maxItems", fmt.Sprint(g.n(4)))
	}
}

func (g *pairGen) numberKeywords(draft string, add func(k, v string)) {
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		if g.n(4) != 0 {
			continue
		}
		if strings.HasPrefix(k, "exclusive") && strings.Contains(draft, "draft-04") {
			add(k, fmt.Sprint(g.n(2) == 0))
			continue
		}
		add(k, g.pick(genBounds))
	}
	if g.n(6) == 0 {
		add("multipleOf", g.pick(genMultiples))
	}
}

// literal is a JSON value for enum, const or the arguments: a scalar, or a small array or object of
// them.
func (g *pairGen) literal() string {
	switch g.n(9) {
	case 0, 1:
		return g.pick(genStrings)
	case 2, 3:
		return g.pick(genNumbers)
	case 4:
		return g.pick([]string{"true", "false", "null"})
	case 5:
		return "[" + g.pick(genNumbers) + "," + g.pick(genStrings) + "]"
	case 6:
		return `{"` + g.pick(genKeys) + `":` + g.pick(genNumbers) + "}"
	case 7:
		return "[]"
	}
	return "{}"
}

// value writes a value aimed at s: mostly one of its types, its literals, its properties and items.
func (g *pairGen) value(b *strings.Builder, s *genSchema, depth int) {
	if s == nil || s.boolean || depth > 4 || g.n(16) == 0 {
		b.WriteString(g.literal())
		return
	}
	if len(s.literals) > 0 && g.n(2) == 0 {
		b.WriteString(s.literals[g.n(len(s.literals))])
		return
	}
	t := g.pick(genTypes)
	if len(s.types) > 0 && g.n(5) != 0 {
		t = s.types[g.n(len(s.types))]
	}
	switch t {
	case "string":
		b.WriteString(g.pick(genStrings))
	case "integer", "number":
		b.WriteString(g.pick(genNumbers))
	case "boolean":
		b.WriteString(g.pick([]string{"true", "false"}))
	case "null":
		b.WriteString("null")
	case "object":
		g.object(b, s, depth)
	case "array":
		b.WriteByte('[')
		for i := range g.n(5) {
			if i > 0 {
				b.WriteByte(',')
			}
			sub := s.items
			if i < len(s.prefix) {
				sub = s.prefix[i]
			}
			g.value(b, sub, depth+1)
		}
		b.WriteByte(']')
	}
}

// object writes an object aimed at s: some of its properties, now and then another key, keys raw or
// escaped.
func (g *pairGen) object(b *strings.Builder, s *genSchema, depth int) {
	b.WriteByte('{')
	var written []string
	member := func(name string, sub *genSchema) {
		if slices.Contains(written, name) {
			return
		}
		if len(written) > 0 {
			b.WriteByte(',')
		}
		written = append(written, name)
		if g.n(4) == 0 {
			fmt.Fprintf(b, "%+q:", name) // non-ASCII as \u escapes
		} else {
			b.WriteString(`"` + name + `":`)
		}
		g.value(b, sub, depth+1)
	}
	for _, p := range s.props {
		if g.n(5) != 0 || slices.Contains(s.required, p.name) && g.n(4) != 0 {
			member(p.name, p.schema)
		}
	}
	for _, name := range s.required {
		if g.n(8) != 0 {
			member(name, s.extra)
		}
	}
	if g.n(4) == 0 {
		member(g.pick(genKeys), s.extra)
	}
	b.WriteByte('}')
}

// TestSchemaBlocksWhatTheValidatorsCannotDecide: a number jsonschema cannot read where a bound
// applies (it panics on it) blocks the call, whether the subset validator takes the schema (and is
// unsure) or not (the schema step alone: Check refuses such a number before, see
// TestHugeNumbersRefusedBeforeTheSchema); and a call the subset validator rejects is blocked even
// were jsonschema to accept it.
func TestSchemaBlocksWhatTheValidatorsCannotDecide(t *testing.T) {
	t.Parallel()
	const want = reasonSchemaMismatch + "the validator failed"
	for _, schema := range []string{`{"properties":{"n":{"minimum":0}}}`, `{"properties":{"n":{"multipleOf":2}}}`,
		`{"properties":{"n":{"maximum":0,"anyOf":[true]}}}`} {
		p := Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": []byte(schema)}}
		for _, c := range []*Checker{NewChecker(p), generalOnly(p)} {
			if r := c.checkSchema("t", []byte(`{"n":1e1000001}`)); r != want {
				t.Errorf("%s: %q, want %q", schema, r, want)
			}
		}
	}
	p := Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": []byte(`{}`)}}
	c := generalOnly(p)
	c.schemas["t"].fast = &subsetNode{never: true}
	if r, _, ok := c.Check("t", []byte(`{}`)); ok || r != reasonSchemaMismatch+"invalid" {
		t.Errorf("the engines disagree: %q %v, want the call blocked", r, ok)
	}
}

// TestHugeNumbersRefusedBeforeTheSchema: a number no float64 holds (an infinity, or zero from
// non-zero digits) blocks the call at the JSON check, naming its offset, before any schema engine
// reads it exactly.
func TestHugeNumbersRefusedBeforeTheSchema(t *testing.T) {
	t.Parallel()
	p := Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": []byte(`{"properties":{"n":{"minimum":0}}}`)}}
	c := NewChecker(p)
	for _, args := range []string{`{"n":1e1000001}`, `{"n":-1e309}`, `{"n":1e-999999}`, `{"n":0.0001e-400}`} {
		r, _, ok := c.Check("t", []byte(args))
		if ok || !strings.Contains(r, "float64") || !strings.Contains(r, "offset 5") {
			t.Errorf("%s: %q %v, want blocked as out of float64 range at offset 5", args, r, ok)
		}
	}
	for _, args := range []string{`{"n":1e308}`, `{"n":0e-999999}`, `{"n":-0.0e5}`, `{"n":5e-324}`} {
		if r, _, ok := c.Check("t", []byte(args)); !ok {
			t.Errorf("%s: blocked (%s), want released", args, r)
		}
	}
}
