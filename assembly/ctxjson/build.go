package ctxjson

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Meta is what Build writes under the "meta" key.
type Meta struct {
	// Protocol is the id of the request's protocol.
	Protocol string
	// Sources is not read by Build: it lists the sources present in the line itself.
	Sources []string
	// Skipped lists sources switched off, failed or timed out. Build writes them first, then
	// the sources it dropped itself. Empty means no "skipped" key.
	Skipped []Skip
}

// Skip is one entry of meta.skipped.
type Skip struct {
	Source string
	Reason string
}

// Reasons Build writes to meta.skipped for the sources it leaves out.
const (
	// ReasonBudget: nothing of the source fits its budget or the line's maximum.
	ReasonBudget = "budget"
	// ReasonDuplicate: an earlier source has the same name.
	ReasonDuplicate = "duplicate source name"
	// ReasonReserved: the source is named "meta".
	ReasonReserved = "reserved source name"
)

// Source is one top-level entry of the context object: Name is its key, Value its value (nil is
// null).
type Source struct {
	Name  string
	Value *Value
}

// MinLine is the length of the shortest line Build writes, {"meta":{"truncated":true}}. A max
// below it is not honoured; config validation refuses a max below about 64 anyway, so that the
// protocol and sources always fit.
const MinLine = 27

// minShare is the fewest characters a value that has to be shrunk is shrunk to while there is
// another choice: below it, objects drop their largest fields and arrays their last elements.
const minShare = 16

// Build assembles the runtime context line
//
//	{"meta":{"protocol":P,"sources":[...],"skipped":[{"source":S,"reason":R}],"truncated":B},"<name>":<value>,...}
//
// with the sources in the given order ("skipped" only when non-empty), applies the budgets and
// fits the line into max characters as the package documentation describes. meta.sources lists
// the names present in the line. It reports whether anything was shortened or dropped, which is
// also what meta.truncated says. Build never mutates its arguments; the line holds no raw line
// break of any kind and is at most max characters long for max >= MinLine.
func Build(meta Meta, sources []Source, max int, b Budgets) (line []byte, truncated bool) {
	root, skipped := rootOf(meta, sources)

	// Fast path: no budget binds and everything fits.
	if !binds(root, b) {
		var room [256]byte // meta is short unless many sources are named: it is copied into the line
		mb := appendMeta(room[:0], meta.Protocol, root.keys, skipped, false, metaFull)
		metaSize := utf8.RuneCount(mb)
		size := sizeUpTo(root, max-metaSize-len(`{"meta":`))
		if lineSize(metaSize, size, len(root.items)) <= max {
			line = make([]byte, 0, len(mb)+size+size/8+16)
			line = append(append(line, `{"meta":`...), mb...)
			for i, v := range root.items {
				line = append(appendString(append(line, ','), root.keys[i], false), ':')
				line = AppendEncode(line, v)
			}
			return append(line, '}'), false
		}
	}

	f := newFitter(root)
	f.applyBudgets(b)
	f.dropEmptySources()
	var mb []byte
	for range len(root.items) + 2 {
		r := &f.nodes[0]
		mb = appendMeta(mb[:0], meta.Protocol, f.present(), append(skipped, f.dropped()...), true, metaFull)
		metaSize := utf8.RuneCount(mb)
		if lineSize(metaSize, r.size, int(r.alive)) <= max {
			return f.line(mb), true
		}
		if r.alive == 0 {
			break
		}
		if !f.fit(0, max-metaSize-len(`{"meta":`)) {
			f.dropAll()
		}
		f.dropEmptySources()
	}

	// Nothing but meta fits, or not even that: shed meta too.
	f.dropAll()
	skipped = append(skipped, f.dropped()...)
	for _, mode := range []metaMode{metaFull, metaNoSkipped, metaProtocol} {
		mb = appendMeta(mb[:0], meta.Protocol, nil, skipped, true, mode)
		if lineSize(utf8.RuneCount(mb), 2, 0) <= max {
			return f.line(mb), true
		}
	}
	return f.line(appendMeta(mb[:0], "", nil, nil, true, metaBare)), true
}

// lineSize is the length of {"meta":META,SOURCES} where rootSize is the size of {SOURCES}
// holding n sources.
func lineSize(metaSize, rootSize, n int) int {
	if n == 0 {
		return len(`{"meta":}`) + metaSize
	}
	return len(`{"meta":`) + metaSize + rootSize
}

// rootOf returns the context object without meta and the skipped list to start from.
func rootOf(meta Meta, sources []Source) (*Value, []Skip) {
	root := &Value{kind: KindObject, keys: make([]string, 0, len(sources)), items: make([]*Value, 0, len(sources))}
	skipped := slices.Clone(meta.Skipped)
	for _, s := range sources {
		switch {
		case s.Name == "meta":
			skipped = append(skipped, Skip{Source: s.Name, Reason: ReasonReserved})
		case slices.Contains(root.keys, s.Name):
			skipped = append(skipped, Skip{Source: s.Name, Reason: ReasonDuplicate})
		default:
			root.keys = append(root.keys, s.Name)
			root.items = append(root.items, s.Value)
		}
	}
	return root, slices.Clip(skipped)
}

// binds reports whether any budget would change root.
func binds(root *Value, b Budgets) bool {
	for path, limit := range b {
		if v, ok := lookup(root, path); ok && sizeUpTo(v, limit) > limit {
			return true
		}
	}
	return false
}

// lookup resolves a dotted budget path in v.
func lookup(v *Value, path string) (*Value, bool) {
	for seg := range strings.SplitSeq(path, ".") {
		switch v.Kind() {
		case KindObject:
			i := slices.Index(v.keys, seg)
			if i < 0 {
				return nil, false
			}
			v = v.items[i]
		case KindArray:
			i, ok := arrayIndex(seg, len(v.items))
			if !ok {
				return nil, false
			}
			v = v.items[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// arrayIndex parses a path segment as an index into an array of n elements.
func arrayIndex(seg string, n int) (int, bool) {
	i, err := strconv.Atoi(seg)
	if err != nil || i < 0 || i >= n || strconv.Itoa(i) != seg {
		return 0, false
	}
	return i, true
}

type metaMode uint8

const (
	metaFull      metaMode = iota // protocol, sources, skipped (when any), truncated
	metaNoSkipped                 // protocol, sources, truncated
	metaProtocol                  // protocol, truncated
	metaBare                      // truncated
)

func appendMeta(dst []byte, protocol string, names []string, skipped []Skip, truncated bool, mode metaMode) []byte {
	dst = append(dst, '{')
	if mode != metaBare {
		dst = appendString(append(dst, `"protocol":`...), protocol, false)
		dst = append(dst, ',')
	}
	if mode == metaFull || mode == metaNoSkipped {
		dst = append(dst, `"sources":[`...)
		for i, n := range names {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, n, false)
		}
		dst = append(dst, "],"...)
	}
	if mode == metaFull && len(skipped) > 0 {
		dst = append(dst, `"skipped":[`...)
		for i, s := range skipped {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(append(dst, `{"source":`...), s.Source, false)
			dst = appendString(append(dst, `,"reason":`...), s.Reason, false)
			dst = append(dst, '}')
		}
		dst = append(dst, "],"...)
	}
	if truncated {
		return append(dst, `"truncated":true}`...)
	}
	return append(dst, `"truncated":false}`...)
}

// node is the fitting state of one Value. Node 0 is the context object (without meta), its
// children the sources. Children of a container are contiguous, from first on, in Value order.
type node struct {
	v       *Value
	size    int   // characters of the current encoding of this value
	key     int   // object members: characters of the encoded key plus ':'; else 0
	cut     int   // strings: bytes of v.text kept (then "…" follows); -1 when whole
	first   int32 // containers: index of the first child
	alive   int32 // containers: children not dropped
	parent  int32 // -1 for node 0
	dropped bool
}

type fitter struct {
	nodes []node // never reallocated after newFitter, so *node stays valid
}

func newFitter(root *Value) *fitter {
	f := &fitter{nodes: make([]node, 1, count(root))}
	f.nodes[0] = node{v: root, cut: -1, parent: -1}
	f.fill(0)
	return f
}

func count(v *Value) int {
	n := 1
	if k := v.Kind(); k == KindArray || k == KindObject {
		for _, e := range v.items {
			n += count(e)
		}
	}
	return n
}

// fill creates the children of node i and computes sizes bottom-up.
func (f *fitter) fill(i int32) {
	v := f.nodes[i].v
	k := v.Kind()
	if k != KindArray && k != KindObject {
		f.nodes[i].size = Size(v)
		return
	}
	first := int32(len(f.nodes))
	for j, e := range v.items {
		key := 0
		if k == KindObject {
			key = strSize(v.keys[j]) + 1
		}
		f.nodes = append(f.nodes, node{v: e, key: key, cut: -1, parent: i})
	}
	size := 2 + max(len(v.items)-1, 0)
	for j := range v.items {
		c := first + int32(j)
		f.fill(c)
		size += f.nodes[c].key + f.nodes[c].size
	}
	n := &f.nodes[i]
	n.first, n.alive, n.size = first, int32(len(v.items)), size
}

// children returns the index range of node i's children.
func (f *fitter) children(i int32) (lo, hi int32) {
	n := &f.nodes[i]
	if k := n.v.Kind(); k != KindArray && k != KindObject {
		return 0, 0
	}
	return n.first, n.first + int32(len(n.v.items))
}

// grow adds delta to the size of node i and all its ancestors.
func (f *fitter) grow(i int32, delta int) {
	for ; i >= 0; i = f.nodes[i].parent {
		f.nodes[i].size += delta
	}
}

// drop removes node c from its parent and updates the sizes above it.
func (f *fitter) drop(c int32) {
	n := &f.nodes[c]
	n.dropped = true
	p := n.parent
	if p < 0 {
		return
	}
	delta := -(n.key + n.size)
	if f.nodes[p].alive > 1 {
		delta-- // its comma
	}
	f.nodes[p].alive--
	f.grow(p, delta)
}

// dropAll drops every source.
func (f *fitter) dropAll() {
	lo, hi := f.children(0)
	for c := lo; c < hi; c++ {
		f.nodes[c].dropped = true
	}
	f.nodes[0].alive, f.nodes[0].size = 0, 2
}

// dropEmptySources drops the sources that were shrunk to an empty object or array.
func (f *fitter) dropEmptySources() {
	lo, hi := f.children(0)
	for c := lo; c < hi; c++ {
		n := &f.nodes[c]
		if k := n.v.Kind(); !n.dropped && (k == KindArray || k == KindObject) && n.alive == 0 && len(n.v.items) > 0 {
			f.drop(c)
		}
	}
}

// present returns the names of the sources still in the line.
func (f *fitter) present() []string {
	root := f.nodes[0].v
	var names []string
	lo, hi := f.children(0)
	for c := lo; c < hi; c++ {
		if !f.nodes[c].dropped {
			names = append(names, root.keys[c-lo])
		}
	}
	return names
}

// dropped returns the skip entries of the sources Build dropped.
func (f *fitter) dropped() []Skip {
	root := f.nodes[0].v
	var s []Skip
	lo, hi := f.children(0)
	for c := lo; c < hi; c++ {
		if f.nodes[c].dropped {
			s = append(s, Skip{Source: root.keys[c-lo], Reason: ReasonBudget})
		}
	}
	return s
}

// resolve returns the node at a dotted budget path, or -1.
func (f *fitter) resolve(path string) int32 {
	i := int32(0)
	for seg := range strings.SplitSeq(path, ".") {
		n := &f.nodes[i]
		switch n.v.Kind() {
		case KindObject:
			j := slices.Index(n.v.keys, seg)
			if j < 0 {
				return -1
			}
			i = n.first + int32(j)
		case KindArray:
			j, ok := arrayIndex(seg, len(n.v.items))
			if !ok {
				return -1
			}
			i = n.first + int32(j)
		default:
			return -1
		}
		if f.nodes[i].dropped {
			return -1
		}
	}
	return i
}

// applyBudgets enforces each budget, deepest path first, so that an outer budget sees the inner
// ones already applied.
func (f *fitter) applyBudgets(b Budgets) {
	paths := make([]string, 0, len(b))
	for p := range b {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, func(x, y string) int {
		if c := cmp.Compare(strings.Count(y, "."), strings.Count(x, ".")); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	for _, p := range paths {
		i := f.resolve(p)
		if i <= 0 {
			continue
		}
		limit, n := b[p], &f.nodes[i]
		if n.size <= limit {
			continue
		}
		old := n.size
		if limit > 0 && f.fit(i, limit) {
			f.grow(n.parent, n.size-old)
		} else {
			f.drop(i)
		}
	}
}

// fit shrinks node i until its encoding takes at most target characters. It reports false,
// leaving the node as it was, when that is impossible; the caller then drops the node. fit only
// updates node i and its subtree; the caller updates the sizes above.
func (f *fitter) fit(i int32, target int) bool {
	n := &f.nodes[i]
	if n.size <= target {
		return true
	}
	switch n.v.Kind() {
	case KindString:
		room := target - len(`""`) - 1 // quotes and the ellipsis
		if room < 0 {
			return false
		}
		s := n.v.text
		if n.cut >= 0 {
			s = s[:n.cut]
		}
		p, used := cutPoint(s, room)
		n.cut, n.size = p, used+3
		return true
	case KindArray:
		return f.fitArray(i, target)
	case KindObject:
		return f.fitObject(i, target)
	}
	return false
}

// fitArray keeps the elements from the start; the first one that does not fit whole is shrunk
// into the room left (if that is at least minShare, or it is the first element), the rest drop.
func (f *fitter) fitArray(i int32, target int) bool {
	if target < 2 {
		return false
	}
	size, kept, full := 2, int32(0), false
	lo, hi := f.children(i)
	for c := lo; c < hi; c++ {
		ch := &f.nodes[c]
		if ch.dropped {
			continue
		}
		if full {
			ch.dropped = true
			continue
		}
		sep := 0
		if kept > 0 {
			sep = 1
		}
		if size+sep+ch.size <= target {
			size += sep + ch.size
			kept++
			continue
		}
		full = true
		room := target - size - sep
		if (room >= minShare || kept == 0) && f.fit(c, room) {
			size += sep + ch.size
			kept++
		} else {
			ch.dropped = true
		}
	}
	n := &f.nodes[i]
	n.size, n.alive = size, kept
	return true
}

// fitObject shares target among the fields max-min fairly: fields that fit their share stay
// whole, the others are shrunk to it. While two or more fields must shrink to a share below
// minShare, it first drops the largest field.
func (f *fitter) fitObject(i int32, target int) bool {
	if target < 2 {
		return false
	}
	lo, hi := f.children(i)
	order := make([]int32, 0, hi-lo)
	for c := lo; c < hi; c++ {
		if !f.nodes[c].dropped {
			order = append(order, c)
		}
	}
	cost := func(c int32) int { return f.nodes[c].key + f.nodes[c].size }
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(cost(a), cost(b)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	keys := make([]int, len(order)+1) // keys[m]: the key characters of the m cheapest fields
	for j, c := range order {
		keys[j+1] = keys[j] + f.nodes[c].key
	}
	// room is what the values of the m cheapest fields may take together.
	room := func(m int) int {
		if m == 0 {
			return target - 2
		}
		return target - 2 - (m - 1) - keys[m]
	}
	feasible := func(m int) bool {
		rem := room(m)
		if m == 0 || m == 1 {
			return rem >= 0
		}
		if rem < 0 {
			return false
		}
		for j, c := range order[:m] {
			share := rem / (m - j)
			s := f.nodes[c].size
			if s > share {
				// Dropping the largest field only helps the other fields that must shrink.
				return share >= minShare || j == m-1
			}
			rem -= s
		}
		return true
	}
	m, top := 0, len(order) // the largest feasible m: feasible(m) falls as m grows
	for m < top {
		mid := (m + top + 1) / 2
		if feasible(mid) {
			m = mid
		} else {
			top = mid - 1
		}
	}
	for _, c := range order[m:] {
		f.nodes[c].dropped = true
	}
	rem := room(m)
	for j, c := range order[:m] {
		ch := &f.nodes[c]
		if share := rem / (m - j); ch.size <= share || f.fit(c, share) {
			rem -= ch.size
		} else {
			ch.dropped = true
			rem += ch.key + 1 // its key and comma are free again
		}
	}
	size, alive := 2, int32(0)
	for c := lo; c < hi; c++ {
		if ch := &f.nodes[c]; !ch.dropped {
			size += ch.key + ch.size
			alive++
		}
	}
	n := &f.nodes[i]
	n.size, n.alive = size+max(int(alive)-1, 0), alive
	return true
}

// line encodes {"meta":META,...sources...} from the fitted tree.
func (f *fitter) line(meta []byte) []byte {
	out := make([]byte, 0, len(meta)+f.nodes[0].size+16)
	out = append(append(out, `{"meta":`...), meta...)
	root := f.nodes[0].v
	lo, hi := f.children(0)
	for c := lo; c < hi; c++ {
		if !f.nodes[c].dropped {
			out = append(appendString(append(out, ','), root.keys[c-lo], false), ':')
			out = f.appendNode(out, c)
		}
	}
	return append(out, '}')
}

func (f *fitter) appendNode(dst []byte, i int32) []byte {
	n := &f.nodes[i]
	switch n.v.Kind() {
	case KindString:
		if n.cut >= 0 {
			return appendString(dst, n.v.text[:n.cut], true)
		}
		return appendString(dst, n.v.text, false)
	case KindArray, KindObject:
		obj := n.v.kind == KindObject
		open, end := byte('['), byte(']')
		if obj {
			open, end = '{', '}'
		}
		dst = append(dst, open)
		sep := false
		lo, hi := f.children(i)
		for c := lo; c < hi; c++ {
			if f.nodes[c].dropped {
				continue
			}
			if sep {
				dst = append(dst, ',')
			}
			sep = true
			if obj {
				dst = append(appendString(dst, n.v.keys[c-lo], false), ':')
			}
			dst = f.appendNode(dst, c)
		}
		return append(dst, end)
	}
	return AppendEncode(dst, n.v)
}
