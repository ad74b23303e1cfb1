package mcp

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/tidwall/gjson"
)

// doorTools is the list of tools the door reads in each message of a server's answer (gjson, as
// edit and filterList read it): per message, whether its result holds tools, and each tool's name
// and description as definitionOf reads them.
func doorTools(msg []byte) (lists [][]string, has []bool) {
	read := func(v gjson.Result) {
		tools := v.Get("result.tools")
		var l []string
		tools.ForEach(func(_, t gjson.Result) bool {
			if d, ok := definitionOf(t); ok {
				l = append(l, d.Name+"\x00"+d.Description)
			}
			return true
		})
		lists, has = append(lists, l), append(has, tools.Exists())
	}
	v := gjson.ParseBytes(msg)
	if v.IsArray() {
		v.ForEach(func(_, e gjson.Result) bool { read(e); return true })
	} else {
		read(v)
	}
	return lists, has
}

// foldedTools is the list a client built on encoding/json reads (member names matched without
// regard to case, the last of a repeated one kept); ok is false where it cannot read the message.
func foldedTools(msg []byte) (l []string, ok bool) {
	var v struct {
		Result *struct {
			Tools []struct{ Name, Description string }
		}
	}
	if json.Unmarshal(msg, &v) != nil || v.Result == nil {
		return nil, false
	}
	for _, t := range v.Result.Tools {
		if t.Name != "" {
			l = append(l, t.Name+"\x00"+t.Description)
		}
	}
	return l, v.Result.Tools != nil
}

// exactTools is the list a client that reads JSON into maps reads (JavaScript's JSON.parse,
// Python's json: member names exact, the last of a repeated one kept); ok is false where the
// message's result holds no list.
func exactTools(msg []byte) (l []string, ok bool) {
	var v map[string]any
	if json.Unmarshal(msg, &v) != nil {
		return nil, false
	}
	res, _ := v["result"].(map[string]any)
	tools, isList := res["tools"].([]any)
	if !isList {
		return nil, false
	}
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		name, _ := tm["name"].(string)
		desc, isText := tm["description"].(string)
		if _, given := tm["description"]; name == "" || given && !isText {
			continue
		}
		l = append(l, name+"\x00"+desc)
	}
	return l, true
}

// FuzzServerAnswers holds the door's reading of a server's answer (readAnswer, then the tools it
// filters) to the readers of the agents' clients: where the door accepts an answer, every message
// that a client built on encoding/json or on maps takes for a list of tools is one the door filters
// (its result holds tools for the door), with the same names and descriptions.
func FuzzServerAnswers(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"lookup","description":"Looks a contact up."}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"lookup","description":"a","description":"b"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"lookup","Description":"b"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"Tools":[{"name":"delete_all"}]}}`,
		`{"jsonrpc":"2.0","id":1,"RESULT":{"tools":[{"name":"delete_all"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"lookup","de\u017fcription":"b"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"t\u006fols":[{"name":"delete_all"}]}}`,
		`{"jsonrpc":"2.0","id":1.0,"result":{"tools":[{"name":"delete_all"}]}}`,
		`[{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete_all"}]}}]`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"lookup","description":5}]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if readAnswer(msg, 64) != nil {
			return
		}
		lists, has := doorTools(msg)
		var elems [][]byte
		var batch []json.RawMessage
		if json.Unmarshal(msg, &batch) == nil {
			for _, e := range batch {
				elems = append(elems, e)
			}
		} else {
			elems = [][]byte{msg}
		}
		if len(elems) != len(lists) {
			return // not one message nor a batch of them: no client reads it as an answer
		}
		for i, e := range elems {
			for reader, read := range map[string]func([]byte) ([]string, bool){"encoding/json": foldedTools, "maps": exactTools} {
				l, ok := read(e)
				if !ok {
					continue
				}
				if !has[i] {
					t.Fatalf("%s reads a list of tools %q that the door does not filter in %s", reader, l, msg)
				}
				if !slices.Equal(l, lists[i]) {
					t.Fatalf("%s reads the tools %q, the door %q, in %s", reader, l, lists[i], msg)
				}
			}
		}
	})
}
