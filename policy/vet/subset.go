package vet

import (
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tidwall/gjson"
)

// The subset validator decides the arguments of a call against the part of JSON Schema that tool
// schemas use (type, enum, const, properties, required, additionalProperties, min/maxProperties,
// items, prefixItems, min/maxItems, min/maxLength, pattern, minimum, maximum, their exclusive
// forms, multipleOf, boolean schemas), on the argument bytes, with gjson. It is built from the
// schema as jsonschema compiled it, so that every keyword means what it means to jsonschema in the
// schema's draft (draft-04's boolean exclusiveMinimum is a bound; the array form of items before
// 2020-12, and format, asserted before 2019-09, decline), and each check is jsonschema's own: the
// same regexp, the same code-point count, numbers compared as big.Rat read from the same text. A
// schema with any other keyword gets no subset validator and is validated by jsonschema alone.
// FuzzSubsetAgrees holds the two to the same accept or reject.

// subsetVerdict is what the subset validator says of a value.
type subsetVerdict uint8

const (
	subsetAccept subsetVerdict = iota // jsonschema accepts the value
	subsetReject                      // jsonschema rejects it
	subsetUnsure                      // jsonschema must decide: a bounded number big.Rat cannot read
)

// The JSON types, one bit each, as jsonschema names them.
const (
	typeNull uint8 = 1 << iota
	typeBoolean
	typeNumber
	typeInteger
	typeString
	typeArray
	typeObject
)

// maxSubsetDepth bounds the nesting of a schema the subset validator takes.
const maxSubsetDepth = 64

// subsetNode is one (sub)schema of the subset.
type subsetNode struct {
	open  bool  // accepts every value: true or {} (annotations only)
	never bool  // the false schema
	types uint8 // the declared types; 0 when type is absent

	hasConst bool
	constant literal
	hasEnum  bool
	enum     []literal

	// objects
	fields       map[string]field // the properties, and the required names
	required     int              // how many distinct names are required
	additional   additionalKind
	addSchema    *subsetNode // additionalProperties when it is a schema
	minProps     int         // -1 when absent
	maxProps     int         // -1 when absent
	objectChecks bool

	// arrays
	prefix      []*subsetNode // prefixItems (2020-12)
	items       *subsetNode   // items after the prefix; nil when absent
	minItems    int
	maxItems    int
	arrayChecks bool

	// strings
	minLength, maxLength int // -1 when absent
	pattern              jsonschema.Regexp

	// numbers
	minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf *bound
}

// field is what the schema says of one property name.
type field struct {
	schema   *subsetNode // from properties; nil when the name is only required
	required bool
}

type additionalKind uint8

const (
	additionalAny    additionalKind = iota // absent or true
	additionalNone                         // false
	additionalSchema                       // a schema
)

// bound is a number of the schema, as jsonschema keeps it (big.Rat), and as an int64 where it is
// one.
type bound struct {
	r     *big.Rat
	i     int64
	isI64 bool
}

func newBound(r *big.Rat) *bound {
	if r == nil {
		return nil
	}
	b := &bound{r: r}
	if r.IsInt() && r.Num().IsInt64() {
		b.i, b.isI64 = r.Num().Int64(), true
	}
	return b
}

// literal is a value of enum or const, ready to compare as jsonschema compares values (numbers by
// value).
type literal struct {
	t   uint8
	b   bool
	s   string
	num *bound // nil for a number big.Rat cannot read: it equals nothing
	arr []literal
	obj map[string]literal
}

// compileSubset returns the subset validator of a schema jsonschema compiled, or nil when the
// schema holds a keyword outside the subset.
func compileSubset(s *jsonschema.Schema) *subsetNode {
	n, ok := subsetOf(s, 0)
	if !ok {
		return nil
	}
	return n
}

func subsetOf(s *jsonschema.Schema, depth int) (*subsetNode, bool) {
	if depth > maxSubsetDepth {
		return nil, false
	}
	if s.Bool != nil {
		return &subsetNode{open: *s.Bool, never: !*s.Bool}, true
	}
	if outsideSubset(s) {
		return nil, false
	}
	n := &subsetNode{minProps: -1, maxProps: -1, minItems: -1, maxItems: -1, minLength: -1, maxLength: -1}
	if s.Types != nil {
		n.types = typeBits(s.Types.ToStrings())
	}
	if s.Const != nil {
		n.hasConst, n.constant = true, literalOf(*s.Const)
	}
	if s.Enum != nil {
		n.hasEnum = true
		for _, v := range s.Enum.Values {
			n.enum = append(n.enum, literalOf(v))
		}
	}
	if !n.objectOf(s, depth) || !n.arrayOf(s, depth) {
		return nil, false
	}
	n.minLength, n.maxLength, n.pattern = intOr(s.MinLength), intOr(s.MaxLength), s.Pattern
	n.minimum, n.maximum = newBound(s.Minimum), newBound(s.Maximum)
	n.exclusiveMinimum, n.exclusiveMaximum = newBound(s.ExclusiveMinimum), newBound(s.ExclusiveMaximum)
	n.multipleOf = newBound(s.MultipleOf)
	n.open = n.types == 0 && !n.hasConst && !n.hasEnum && !n.objectChecks && !n.arrayChecks && !n.stringChecks() &&
		!n.numberChecks()
	return n, true
}

// outsideSubset reports whether s holds a keyword the subset validator does not evaluate.
func outsideSubset(s *jsonschema.Schema) bool {
	return s.Ref != nil || s.RecursiveRef != nil || s.DynamicRef != nil ||
		s.Not != nil || len(s.AllOf) > 0 || len(s.AnyOf) > 0 || len(s.OneOf) > 0 ||
		s.If != nil || s.Then != nil || s.Else != nil || s.Format != nil ||
		s.PropertyNames != nil || len(s.PatternProperties) > 0 || len(s.Dependencies) > 0 ||
		len(s.DependentRequired) > 0 || len(s.DependentSchemas) > 0 || s.UnevaluatedProperties != nil ||
		s.UniqueItems || s.Contains != nil || s.MinContains != nil || s.MaxContains != nil ||
		s.AdditionalItems != nil || s.UnevaluatedItems != nil ||
		s.ContentEncoding != nil || s.ContentMediaType != nil || s.ContentSchema != nil || len(s.Extensions) > 0
}

// objectOf takes the object keywords of s; false when one is outside the subset.
func (n *subsetNode) objectOf(s *jsonschema.Schema, depth int) bool {
	if len(s.Properties) > 0 || len(s.Required) > 0 {
		n.fields = make(map[string]field, len(s.Properties)+len(s.Required))
	}
	for name, ps := range s.Properties {
		sub, ok := subsetOf(ps, depth+1)
		if !ok {
			return false
		}
		n.fields[name] = field{schema: sub}
	}
	for _, name := range s.Required {
		f := n.fields[name]
		if !f.required {
			f.required = true
			n.required++
			n.fields[name] = f
		}
	}
	switch a := s.AdditionalProperties.(type) {
	case nil:
	case bool:
		if !a {
			n.additional = additionalNone
		}
	case *jsonschema.Schema:
		sub, ok := subsetOf(a, depth+1)
		if !ok {
			return false
		}
		n.additional, n.addSchema = additionalSchema, sub
	default:
		return false
	}
	n.minProps, n.maxProps = intOr(s.MinProperties), intOr(s.MaxProperties)
	n.objectChecks = n.fields != nil || n.additional != additionalAny || n.minProps >= 0 || n.maxProps >= 0
	return true
}

// arrayOf takes the array keywords of s; false when one is outside the subset.
func (n *subsetNode) arrayOf(s *jsonschema.Schema, depth int) bool {
	rest := s.Items2020
	switch it := s.Items.(type) {
	case nil:
	case *jsonschema.Schema:
		if rest != nil || len(s.PrefixItems) > 0 {
			return false
		}
		rest = it
	default: // the array form of items, before 2020-12
		return false
	}
	for _, ps := range s.PrefixItems {
		sub, ok := subsetOf(ps, depth+1)
		if !ok {
			return false
		}
		n.prefix = append(n.prefix, sub)
	}
	if rest != nil {
		sub, ok := subsetOf(rest, depth+1)
		if !ok {
			return false
		}
		n.items = sub
	}
	n.minItems, n.maxItems = intOr(s.MinItems), intOr(s.MaxItems)
	n.arrayChecks = len(n.prefix) > 0 || n.items != nil || n.minItems >= 0 || n.maxItems >= 0
	return true
}

func (n *subsetNode) stringChecks() bool {
	return n.minLength >= 0 || n.maxLength >= 0 || n.pattern != nil
}

func (n *subsetNode) numberChecks() bool {
	return n.minimum != nil || n.maximum != nil || n.exclusiveMinimum != nil || n.exclusiveMaximum != nil ||
		n.multipleOf != nil
}

func intOr(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

func typeBits(names []string) uint8 {
	var t uint8
	for _, name := range names {
		switch name {
		case "null":
			t |= typeNull
		case "boolean":
			t |= typeBoolean
		case "number":
			t |= typeNumber
		case "integer":
			t |= typeInteger
		case "string":
			t |= typeString
		case "array":
			t |= typeArray
		case "object":
			t |= typeObject
		}
	}
	return t
}

// literalOf reads a value of the schema as jsonschema.UnmarshalJSON made it.
func literalOf(v any) literal {
	switch v := v.(type) {
	case nil:
		return literal{t: typeNull}
	case bool:
		return literal{t: typeBoolean, b: v}
	case string:
		return literal{t: typeString, s: v}
	case []any:
		l := literal{t: typeArray, arr: make([]literal, len(v))}
		for i, e := range v {
			l.arr[i] = literalOf(e)
		}
		return l
	case map[string]any:
		l := literal{t: typeObject, obj: make(map[string]literal, len(v))}
		for k, e := range v {
			l.obj[k] = literalOf(e)
		}
		return l
	}
	// A number: json.Number from UnmarshalJSON; jsonschema reads it with big.Rat from its text.
	l := literal{t: typeNumber}
	if s, ok := v.(interface{ String() string }); ok {
		if r, ok := new(big.Rat).SetString(s.String()); ok {
			l.num = newBound(r)
		}
	}
	return l
}

// validate decides arguments that jsoncheck accepted (one object, no duplicate keys).
func (n *subsetNode) validate(args []byte) subsetVerdict {
	return n.check(gjson.Parse(string(args)))
}

// check decides one value; it stops at the first value that is not accepted.
func (n *subsetNode) check(v gjson.Result) subsetVerdict {
	if n.open {
		return subsetAccept
	}
	if n.never {
		return subsetReject
	}
	t := typeOfResult(v)
	var num number
	if t == typeNumber {
		num.raw = v.Raw
	}
	if n.types != 0 && n.types&t == 0 && (n.types&typeInteger == 0 || t != typeNumber || !num.isInteger()) {
		return subsetReject
	}
	if n.hasConst && !equalLiteral(v, t, &num, &n.constant) {
		return subsetReject
	}
	if n.hasEnum && !n.inEnum(v, t, &num) {
		return subsetReject
	}
	switch t {
	case typeObject:
		if n.objectChecks {
			return n.checkObject(v)
		}
	case typeArray:
		if n.arrayChecks {
			return n.checkArray(v)
		}
	case typeString:
		return n.checkString(v.Str)
	case typeNumber:
		return n.checkNumber(&num)
	}
	return subsetAccept
}

func typeOfResult(v gjson.Result) uint8 {
	switch v.Type {
	case gjson.Null:
		return typeNull
	case gjson.True, gjson.False:
		return typeBoolean
	case gjson.Number:
		return typeNumber
	case gjson.String:
		return typeString
	}
	if v.IsArray() {
		return typeArray
	}
	return typeObject
}

func (n *subsetNode) inEnum(v gjson.Result, t uint8, num *number) bool {
	for i := range n.enum {
		if equalLiteral(v, t, num, &n.enum[i]) {
			return true
		}
	}
	return false
}

func (n *subsetNode) checkObject(v gjson.Result) subsetVerdict {
	out, count, found := subsetAccept, 0, 0
	v.ForEach(func(k, e gjson.Result) bool {
		count++
		f, ok := n.fields[k.Str]
		if f.required {
			found++
		}
		sub := f.schema
		if !ok || sub == nil {
			switch n.additional {
			case additionalNone:
				out = subsetReject
				return false
			case additionalSchema:
				sub = n.addSchema
			}
		}
		if sub != nil {
			out = sub.check(e)
		}
		return out == subsetAccept
	})
	switch {
	case out != subsetAccept:
		return out
	case found < n.required, n.minProps >= 0 && count < n.minProps, n.maxProps >= 0 && count > n.maxProps:
		return subsetReject
	}
	return subsetAccept
}

func (n *subsetNode) checkArray(v gjson.Result) subsetVerdict {
	out, count := subsetAccept, 0
	v.ForEach(func(_, e gjson.Result) bool {
		sub := n.items
		if count < len(n.prefix) {
			sub = n.prefix[count]
		}
		count++
		if sub != nil {
			out = sub.check(e)
		}
		return out == subsetAccept
	})
	switch {
	case out != subsetAccept:
		return out
	case n.minItems >= 0 && count < n.minItems, n.maxItems >= 0 && count > n.maxItems:
		return subsetReject
	}
	return subsetAccept
}

func (n *subsetNode) checkString(s string) subsetVerdict {
	if n.minLength >= 0 || n.maxLength >= 0 {
		l := utf8.RuneCountInString(s)
		if n.minLength >= 0 && l < n.minLength || n.maxLength >= 0 && l > n.maxLength {
			return subsetReject
		}
	}
	if n.pattern != nil && !n.pattern.MatchString(s) {
		return subsetReject
	}
	return subsetAccept
}

func (n *subsetNode) checkNumber(num *number) subsetVerdict {
	// Each bound with the sign of num-bound that breaks it: below the minimum, above the maximum,
	// ...
	for _, b := range [...]struct {
		b      *bound
		lo, hi int
	}{
		{n.minimum, -1, -1}, {n.maximum, 1, 1}, {n.exclusiveMinimum, -1, 0}, {n.exclusiveMaximum, 0, 1},
	} {
		if b.b == nil {
			continue
		}
		c, ok := num.cmp(b.b)
		if !ok {
			return subsetUnsure
		}
		if b.lo <= c && c <= b.hi {
			return subsetReject
		}
	}
	if n.multipleOf != nil {
		multiple, ok := num.multipleOf(n.multipleOf)
		if !ok {
			return subsetUnsure
		}
		if !multiple {
			return subsetReject
		}
	}
	return subsetAccept
}

// number is a number of the arguments, its text as the model wrote it, read as jsonschema reads it
// (big.Rat from the text) only when a plain int64 does not do.
type number struct {
	raw         string
	i           int64
	intRead     bool // i was tried
	isI64       bool
	r           *big.Rat
	ratRead     bool // r was tried; nil when big.Rat cannot read the text
	ratReadable bool
}

// plainInt reads the text as an int64 when it is an integer without fraction or exponent of at most
// 18 digits (each such text is a value big.Rat reads the same).
func (x *number) plainInt() (int64, bool) {
	if !x.intRead {
		x.intRead = true
		if len(x.raw) <= 19 && !strings.ContainsAny(x.raw, ".eE") && len(strings.TrimPrefix(x.raw, "-")) <= 18 {
			i, err := strconv.ParseInt(x.raw, 10, 64)
			x.i, x.isI64 = i, err == nil
		}
	}
	return x.i, x.isI64
}

// rat is the number as jsonschema reads it; false when big.Rat cannot read it (an exponent too
// large).
func (x *number) rat() (*big.Rat, bool) {
	if !x.ratRead {
		x.ratRead = true
		x.r, x.ratReadable = new(big.Rat).SetString(x.raw)
	}
	return x.r, x.ratReadable
}

// isInteger is jsonschema's test for the type integer: big.Rat reads the text and finds no fraction
// (1.0 and 1e2 are integers; a text big.Rat cannot read is not).
func (x *number) isInteger() bool {
	if !strings.ContainsAny(x.raw, ".eE") {
		return true
	}
	r, ok := x.rat()
	return ok && r.IsInt()
}

// cmp compares the number with a bound; false when big.Rat cannot read the number.
func (x *number) cmp(b *bound) (int, bool) {
	if i, ok := x.plainInt(); ok && b.isI64 {
		switch {
		case i < b.i:
			return -1, true
		case i > b.i:
			return 1, true
		}
		return 0, true
	}
	r, ok := x.rat()
	if !ok {
		return 0, false
	}
	return r.Cmp(b.r), true
}

// multipleOf is jsonschema's multipleOf: the quotient has no fraction; false when big.Rat cannot
// read the number. The schema's divisor is positive (the metaschema says so).
func (x *number) multipleOf(b *bound) (bool, bool) {
	if i, ok := x.plainInt(); ok && b.isI64 && b.i > 0 {
		return i%b.i == 0, true
	}
	r, ok := x.rat()
	if !ok || b.r.Sign() == 0 {
		return false, false
	}
	return new(big.Rat).Quo(r, b.r).IsInt(), true
}

// equalLiteral is jsonschema's equality of an argument value and a value of the schema: numbers by
// value (1 and 1.0 are equal; a number big.Rat cannot read equals nothing), strings by their bytes,
// arrays element by element, objects by their members.
func equalLiteral(v gjson.Result, t uint8, num *number, l *literal) bool {
	if t != l.t {
		return false
	}
	switch t {
	case typeNull:
		return true
	case typeBoolean:
		return (v.Type == gjson.True) == l.b
	case typeString:
		return v.Str == l.s
	case typeNumber:
		if l.num == nil {
			return false
		}
		c, ok := num.cmp(l.num)
		return ok && c == 0
	case typeArray:
		return equalArray(v, l.arr)
	}
	return equalObject(v, l.obj)
}

func equalArray(v gjson.Result, want []literal) bool {
	i, eq := 0, true
	v.ForEach(func(_, e gjson.Result) bool {
		if i >= len(want) {
			eq = false
			return false
		}
		eq = equalValue(e, &want[i])
		i++
		return eq
	})
	return eq && i == len(want)
}

// equalObject compares the members of an object without duplicate keys with those of a schema's
// object.
func equalObject(v gjson.Result, want map[string]literal) bool {
	count, eq := 0, true
	v.ForEach(func(k, e gjson.Result) bool {
		count++
		l, ok := want[k.Str]
		eq = ok && equalValue(e, &l)
		return eq
	})
	return eq && count == len(want)
}

func equalValue(v gjson.Result, l *literal) bool {
	t := typeOfResult(v)
	var num number
	if t == typeNumber {
		num.raw = v.Raw
	}
	return equalLiteral(v, t, &num, l)
}
