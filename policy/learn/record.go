package learn

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// Record is what was learned of one protocol in one hour: the requests and the tools they offered,
// and per tool its calls, the most calls of it one conversation made, and per argument path the
// kinds of its values, the sets of sources they occurred in and the items found in them. It is
// stored as JSON; every map is bounded (maxTools, maxArgs, maxSets, maxItems).
type Record struct {
	Requests int                 `json:"requests,omitempty"`
	Offered  map[string]int      `json:"offered,omitempty"`
	Tools    map[string]*toolRec `json:"tools,omitempty"`
}

type toolRec struct {
	Counter
	MaxPerConversation int                `json:"maxPerConversation,omitempty"`
	Undeclared         int                `json:"undeclared,omitempty"`
	Args               map[string]*argRec `json:"args,omitempty"`
}

type argRec struct {
	Counter
	Kinds map[string]int      `json:"kinds,omitempty"`
	Sets  map[string]*Counter `json:"sets,omitempty"`
	Items map[string]*Counter `json:"items,omitempty"`
}

// Counter counts calls and the conversations they came from (keyed digests, at most maxConvs; More
// says there were more), with the ids of the latest requests.
type Counter struct {
	Calls    int      `json:"calls"`
	Convs    []uint64 `json:"convs,omitempty"`
	More     bool     `json:"more,omitempty"`
	Requests []string `json:"requests,omitempty"`
}

// count adds one call of conversation conv (0: not known) in request id.
func (c *Counter) count(conv uint64, id string) {
	c.Calls++
	c.addConv(conv)
	if id != "" && !slices.Contains(c.Requests, id) {
		c.Requests = append(c.Requests, id)
		if len(c.Requests) > maxRequests {
			c.Requests = c.Requests[len(c.Requests)-maxRequests:]
		}
	}
}

func (c *Counter) addConv(conv uint64) {
	if conv == 0 {
		return
	}
	i, found := slices.BinarySearch(c.Convs, conv)
	switch {
	case found:
	case len(c.Convs) >= maxConvs:
		c.More = true
	default:
		c.Convs = slices.Insert(c.Convs, i, conv)
	}
}

// merge adds o to c.
func (c *Counter) merge(o *Counter) {
	c.Calls += o.Calls
	c.More = c.More || o.More
	for _, v := range o.Convs {
		c.addConv(v)
	}
	for _, id := range o.Requests {
		if !slices.Contains(c.Requests, id) {
			c.Requests = append(c.Requests, id)
		}
	}
	if len(c.Requests) > maxRequests {
		c.Requests = c.Requests[len(c.Requests)-maxRequests:]
	}
}

// offer counts one request and the tools it offered.
func (r *Record) offer(tools []string) {
	r.Requests++
	for _, t := range tools {
		if r.Offered == nil {
			r.Offered = map[string]int{}
		}
		if _, ok := r.Offered[t]; ok || len(r.Offered) < maxTools {
			r.Offered[t]++
		}
	}
}

// tool is the record of a tool, made on first use; nil past maxTools.
func (r *Record) tool(name string) *toolRec {
	if r.Tools == nil {
		r.Tools = map[string]*toolRec{}
	}
	t := r.Tools[name]
	if t == nil {
		if len(r.Tools) >= maxTools {
			return nil
		}
		t = &toolRec{}
		r.Tools[name] = t
	}
	return t
}

func (t *toolRec) arg(path string) *argRec {
	if t.Args == nil {
		t.Args = map[string]*argRec{}
	}
	a := t.Args[path]
	if a == nil {
		if len(t.Args) >= maxArgs {
			return nil
		}
		a = &argRec{}
		t.Args[path] = a
	}
	return a
}

// set is the counter of a set of sources; the sets past maxSets count as one set of no source.
func (a *argRec) set(key string) *Counter {
	if a.Sets == nil {
		a.Sets = map[string]*Counter{}
	}
	if _, ok := a.Sets[key]; !ok && len(a.Sets) >= maxSets {
		key = ""
	}
	return counterIn(a.Sets, key)
}

// item is the counter of an item; nil past maxItems.
func (a *argRec) item(key string) *Counter {
	if a.Items == nil {
		a.Items = map[string]*Counter{}
	}
	if _, ok := a.Items[key]; !ok && len(a.Items) >= maxItems {
		return nil
	}
	return counterIn(a.Items, key)
}

func counterIn(m map[string]*Counter, key string) *Counter {
	c := m[key]
	if c == nil {
		c = &Counter{}
		m[key] = c
	}
	return c
}

// merge adds o to r, within the bounds.
func (r *Record) merge(o *Record) {
	r.Requests += o.Requests
	for t, n := range o.Offered {
		if r.Offered == nil {
			r.Offered = map[string]int{}
		}
		if _, ok := r.Offered[t]; ok || len(r.Offered) < maxTools {
			r.Offered[t] += n
		}
	}
	for name, ot := range o.Tools {
		t := r.tool(name)
		if t == nil {
			continue
		}
		t.Counter.merge(&ot.Counter)
		t.MaxPerConversation = max(t.MaxPerConversation, ot.MaxPerConversation)
		t.Undeclared += ot.Undeclared
		for path, oa := range ot.Args {
			a := t.arg(path)
			if a == nil {
				continue
			}
			a.Counter.merge(&oa.Counter)
			for k, n := range oa.Kinds {
				if a.Kinds == nil {
					a.Kinds = map[string]int{}
				}
				a.Kinds[k] += n
			}
			for k, c := range oa.Sets {
				a.set(k).merge(c)
			}
			for k, c := range oa.Items {
				if ic := a.item(k); ic != nil {
					ic.merge(c)
				}
			}
		}
	}
}

// Learned is what was learned of a protocol over a window, as the admin API and Suggest read it.
type Learned struct {
	Protocol string    `json:"protocol"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	// Requests counts the requests learned from.
	Requests int           `json:"requests"`
	Tools    []ToolLearned `json:"tools"`
}

// Count is a number of calls and of the conversations they came from (AtLeast: more conversations
// than were kept apart), with ids of the latest requests.
type Count struct {
	Calls         int      `json:"calls"`
	Conversations int      `json:"conversations"`
	AtLeast       bool     `json:"conversationsAtLeast,omitempty"`
	Requests      []string `json:"requests,omitempty"`
}

// ToolLearned is one tool: the requests that offered it, its calls and the most of them one
// conversation made, and its argument paths.
type ToolLearned struct {
	Tool    string `json:"tool"`
	Offered int    `json:"offered"`
	Count
	MaxPerConversation int `json:"maxPerConversation"`
	// Undeclared counts values at paths the tool's schema does not declare (kept by no counter).
	Undeclared int          `json:"undeclared,omitempty"`
	Args       []ArgLearned `json:"args"`
}

// ArgLearned is one argument path: how its values read, where they occurred and what was found in
// them.
type ArgLearned struct {
	Path string `json:"path"`
	Count
	Kinds map[string]int `json:"kinds"`
	// Sets are the sets of sources the values occurred in (empty: in none), most calls first.
	Sets  []SetLearned  `json:"sets"`
	Items []ItemLearned `json:"items"`
}

// Source is one source of a value: its label and, for a tool's output, the field that held it.
type Source struct {
	Source string `json:"source"`
	Field  string `json:"field,omitempty"`
}

// String is the source as a report writes it: "tool:get_payees (#.iban)".
func (s Source) String() string {
	if s.Field == "" {
		return s.Source
	}
	return s.Source + " (" + s.Field + ")"
}

// SetLearned is one set of sources and the calls whose value occurred in exactly those.
type SetLearned struct {
	Sources []Source `json:"sources"`
	Count
	convs []uint64 // the conversations' digests, for counting them once across sets
}

// ItemLearned is one item found in the values: a host, an address domain or an IBAN country.
type ItemLearned struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Count
}

// learned renders r as the window [since, until] of protocol.
func (r *Record) learned(protocol string, since, until time.Time) Learned {
	out := Learned{Protocol: protocol, Since: since.UTC(), Until: until.UTC(), Requests: r.Requests, Tools: []ToolLearned{}}
	names := map[string]bool{}
	for n := range r.Tools {
		names[n] = true
	}
	for n := range r.Offered {
		names[n] = true
	}
	for _, n := range sortedKeys(names) {
		tl := ToolLearned{Tool: n, Offered: r.Offered[n], Args: []ArgLearned{}}
		if t := r.Tools[n]; t != nil {
			tl.Count, tl.MaxPerConversation, tl.Undeclared = t.Counter.render(), t.MaxPerConversation, t.Undeclared
			for _, p := range sortedKeys(t.Args) {
				tl.Args = append(tl.Args, t.Args[p].learned(p))
			}
		}
		out.Tools = append(out.Tools, tl)
	}
	return out
}

func (a *argRec) learned(path string) ArgLearned {
	al := ArgLearned{Path: path, Count: a.Counter.render(), Kinds: a.Kinds, Sets: []SetLearned{}, Items: []ItemLearned{}}
	if al.Kinds == nil {
		al.Kinds = map[string]int{}
	}
	for k, c := range a.Sets {
		al.Sets = append(al.Sets, SetLearned{Sources: parseSet(k), Count: c.render(), convs: slices.Clone(c.Convs)})
	}
	sort.Slice(al.Sets, func(i, j int) bool {
		if al.Sets[i].Calls != al.Sets[j].Calls {
			return al.Sets[i].Calls > al.Sets[j].Calls
		}
		return setLabel(al.Sets[i].Sources) < setLabel(al.Sets[j].Sources)
	})
	for k, c := range a.Items {
		kind, name, _ := strings.Cut(k, ":")
		al.Items = append(al.Items, ItemLearned{Kind: kind, Name: name, Count: c.render()})
	}
	sort.Slice(al.Items, func(i, j int) bool {
		a, b := al.Items[i], al.Items[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	return al
}

// render renders a counter.
func (c *Counter) render() Count {
	return Count{Calls: c.Calls, Conversations: len(c.Convs), AtLeast: c.More, Requests: slices.Clone(c.Requests)}
}

func setLabel(s []Source) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = x.String()
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
