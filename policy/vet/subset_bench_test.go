package vet

import (
	"testing"
)

// Typical tool schemas, as clients declare them.
const (
	weatherSchema = `{"type":"object","properties":{
		"city":{"type":"string","description":"City name","minLength":1,"maxLength":100},
		"units":{"type":"string","enum":["metric","imperial"],"default":"metric"},
		"days":{"type":"integer","minimum":1,"maximum":14}},
	  "required":["city"],"additionalProperties":false}`
	weatherArgs = `{"city":"Zürich","units":"metric","days":3}`

	emailSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{
		"to":{"type":"array","minItems":1,"maxItems":50,"items":{"type":"object","properties":{
			"address":{"type":"string","pattern":"^[^@\\s]+@[^@\\s]+$"},"name":{"type":"string"}},
			"required":["address"],"additionalProperties":false}},
		"cc":{"type":"array","items":{"type":"object","properties":{
			"address":{"type":"string","pattern":"^[^@\\s]+@[^@\\s]+$"},"name":{"type":"string"}},
			"required":["address"],"additionalProperties":false}},
		"subject":{"type":"string","maxLength":200},
		"body":{"type":"string"},
		"priority":{"type":"string","enum":["low","normal","high"]},
		"attachments":{"type":"array","items":{"type":"object","properties":{
			"name":{"type":"string"},"size":{"type":"integer","minimum":0},"mime":{"type":"string"}},
			"required":["name","size"]}}},
	  "required":["to","subject","body"],"additionalProperties":false}`
	emailArgs = `{"to":[{"address":"ada@example.com","name":"Ada Lovelace"},{"address":"bob@example.org"}],` +
		`"cc":[{"address":"carol@example.net"}],"subject":"Quarterly report",` +
		`"body":"Hello Ada,\n\nplease find the quarterly report attached. The figures are final.\n\nBest,\nBob",` +
		`"priority":"normal","attachments":[{"name":"report.pdf","size":482113,"mime":"application/pdf"}]}`

	searchSchema = `{"type":"object","properties":{"query":{"type":"string","minLength":1},
		"limit":{"type":"integer","minimum":1,"maximum":50},"lang":{"type":"string","pattern":"^[a-z]{2}$"}},
	  "required":["query"]}`
	searchArgs = `{"query":"jsonschema subset validators","limit":10,"lang":"en"}`
)

// benchCalls is the calls of a 3-tool request, one per tool.
var benchCalls = []struct{ name, args string }{
	{"get_weather", weatherArgs}, {"send_email", emailArgs}, {"search_docs", searchArgs},
}

func benchPolicy() Policy {
	return Policy{
		Allowed: map[string]bool{"get_weather": true, "send_email": true, "search_docs": true},
		Schemas: map[string][]byte{"get_weather": []byte(weatherSchema), "send_email": []byte(emailSchema),
			"search_docs": []byte(searchSchema)},
	}
}

// BenchmarkCheckSchemas vets typical calls with the subset validator and with the general engine
// alone, side by side: one call to each tool, and the three calls of a 3-tool request on one
// Checker.
func BenchmarkCheckSchemas(b *testing.B) {
	checkers := []struct {
		name string
		new  func(Policy) *Checker
	}{{"subset", NewChecker}, {"general", generalOnly}}
	for _, call := range benchCalls {
		for _, ck := range checkers {
			b.Run(call.name+"/"+ck.name, func(b *testing.B) {
				c := ck.new(benchPolicy())
				args := []byte(call.args)
				c.Check(call.name, args) // compiles the schema: the cache's work, not the call's
				b.SetBytes(int64(len(args)))
				b.ReportAllocs()
				for b.Loop() {
					if r, _, ok := c.Check(call.name, args); !ok {
						b.Fatal(r)
					}
				}
			})
		}
	}
	for _, ck := range checkers {
		b.Run("3-tool request/"+ck.name, func(b *testing.B) {
			c := ck.new(benchPolicy())
			for _, call := range benchCalls {
				c.Check(call.name, []byte(call.args))
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, call := range benchCalls {
					if r, _, ok := c.Check(call.name, []byte(call.args)); !ok {
						b.Fatal(r)
					}
				}
			}
		})
	}
}
