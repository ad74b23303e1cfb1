package chat

import (
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
)

// entry is one "tools" (or "functions") entry as read by one walk over it: its type, and the
// members of its function and custom objects that chatTool reads, each the raw text of the value
// ("" where there is none), read by gjson only when asked for, so that entry.tool is chatTool(v)
// (functionTool(v, true) for a "functions" entry) on a body that jsoncheck accepted.
type entry struct {
	typ        string
	fn, custom fnParts
	legacy     bool // a "functions" entry: the function is the entry itself
}

// fnParts are the members of a function (or custom tool) object that functionTool reads.
type fnParts struct {
	name, description, parameters string
}

// readEntries calls f with each entry of the array at s[i], read by readEntry; it returns the offset
// past the array, or -1 where the walk cannot follow s (the caller then reads with gjson).
func readEntries(s string, i int, legacy bool, f func(e entry, start, end int)) int {
	return assembly.EachElement(s, i, func(v int) int {
		var e entry
		end := readEntry(s, v, legacy, &e)
		if end >= 0 {
			f(e, v, end)
		}
		return end
	})
}

// readEntry reads the entry at s[i] into e, going down into its function and custom objects where
// they are (their parameters are skipped once, not read), and returns the offset past it.
func readEntry(s string, i int, legacy bool, e *entry) int {
	e.legacy = legacy
	if legacy {
		return readFn(s, i, &e.fn)
	}
	if s[i] != '{' {
		return assembly.ValueEnd(s, i) // gjson's ForEach gives a scalar or array no member chatTool reads
	}
	return assembly.EachMember(s, i, func(k string, v int) int {
		switch k {
		case "type":
			return valueAt(s, v, &e.typ)
		case "function":
			e.fn = fnParts{}
			return readFn(s, v, &e.fn)
		case "custom":
			e.custom = fnParts{}
			return readFn(s, v, &e.custom)
		}
		return assembly.ValueEnd(s, v)
	})
}

// readFn reads the function object at s[i] (any other value holds no member functionTool reads)
// into p and returns the offset past it. A later member of a name replaces an earlier one, as in
// functionTool.
func readFn(s string, i int, p *fnParts) int {
	if s[i] != '{' {
		return assembly.ValueEnd(s, i)
	}
	return assembly.EachMember(s, i, func(k string, v int) int {
		switch k {
		case "name":
			return valueAt(s, v, &p.name)
		case "description":
			return valueAt(s, v, &p.description)
		case "parameters":
			return valueAt(s, v, &p.parameters)
		}
		return assembly.ValueEnd(s, v)
	})
}

// valueAt sets *r to the raw text of the value at s[i] and returns the offset past it.
func valueAt(s string, i int, r *string) int {
	end := assembly.ValueEnd(s, i)
	if end >= 0 {
		*r = s[i:end]
	}
	return end
}

// str is a value's text as gjson's String gives it ("" for none).
func str(raw string) string {
	if raw == "" {
		return ""
	}
	return gjson.Parse(raw).String()
}

// tool is the policy.Tool that chatTool (functionTool for a "functions" entry) reads of the entry.
func (e *entry) tool() policy.Tool {
	if e.legacy {
		return e.fn.tool(true)
	}
	switch t := str(e.typ); t {
	case "function", "":
		return e.fn.tool(true)
	case "custom":
		return e.custom.tool(false)
	default:
		return policy.Tool{Name: t}
	}
}

// name is e.tool().Name, without copying the schema.
func (e *entry) name() string {
	if e.legacy {
		return str(e.fn.name)
	}
	switch t := str(e.typ); t {
	case "function", "":
		return str(e.fn.name)
	case "custom":
		return str(e.custom.name)
	default:
		return t
	}
}

func (p *fnParts) tool(schema bool) policy.Tool {
	t := policy.Tool{Name: str(p.name), Description: str(p.description)}
	if schema && p.parameters != "" {
		t.Schema = assembly.RawOrNil(gjson.Parse(p.parameters))
	}
	return t
}
