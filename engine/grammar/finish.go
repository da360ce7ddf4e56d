package grammar

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
)

// finish makes the compiled graph safe to match: references resolved
// (refused when one comes back to itself before a value opens, where the
// matcher would recurse without reading a byte), nested alternatives
// merged, enum values that break the rest of their schema dropped, each
// node's need computed (refused when the root has no value), and nodes
// that accept the same texts merged into one. It returns the new root.
func (c *compiler) finish(root *node) (*node, error) {
	if err := c.refCycles(); err != nil {
		return nil, err
	}
	root = c.resolveRefs(root)
	if err := c.flatten(); err != nil {
		return nil, err
	}
	c.checkLiterals()
	c.needs()
	if root.need == noValue {
		return nil, c.noValueError(root, map[*node]bool{})
	}
	return c.merge(root), nil
}

// refCycles refuses a reference that reaches itself through alternatives
// and references alone: through nothing that reads a byte first.
func (c *compiler) refCycles() error {
	const (
		white = iota
		grey
		black
	)
	color := make(map[*node]uint8, len(c.all))
	var path []*node
	var visit func(n *node) error
	visit = func(n *node) error {
		if n.kind != kAlt && n.kind != kRef {
			return nil
		}
		switch color[n] {
		case grey:
			// The cycle is path from n on; it holds a reference, as
			// only references make cycles.
			cycle := path[slices.Index(path, n):]
			for _, r := range cycle {
				if r.kind == kRef {
					return fail("$ref", r.at, "%q comes back to itself before any value opens: the recursion would never read a byte", r.text)
				}
			}
		case black:
			return nil
		}
		color[n] = grey
		path = append(path, n)
		for _, a := range n.alts {
			if err := visit(a); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		color[n] = black
		return nil
	}
	for _, n := range c.all {
		if err := visit(n); err != nil {
			return err
		}
	}
	return nil
}

// target follows references to the node they stand for; refCycles made
// sure the chain ends.
func target(n *node) *node {
	for n.kind == kRef {
		n = n.alts[0]
	}
	return n
}

// resolveRefs points every edge past the references and drops them.
func (c *compiler) resolveRefs(root *node) *node {
	kept := c.all[:0]
	for _, n := range c.all {
		if n.kind == kRef {
			continue
		}
		for i := range n.props {
			n.props[i].node = target(n.props[i].node)
		}
		for i := range n.alts {
			n.alts[i] = target(n.alts[i])
		}
		if n.extra != nil {
			n.extra = target(n.extra)
		}
		if n.items != nil {
			n.items = target(n.items)
		}
		if n.within != nil {
			n.within = target(n.within)
		}
		kept = append(kept, n)
	}
	clear(c.all[len(kept):])
	c.all = kept
	return target(root)
}

// maxFlatTotal bounds the entries of every flattened alternative
// together, as one big anyOf may be referenced from many places.
const maxFlatTotal = 16 * MaxNodes

// flatten replaces each alternative's list by the distinct nodes other
// than alternatives that it reaches, so a value starts with one choice
// among at most MaxFlatAlternatives, never a walk down nested anyOfs (whose
// paths can be exponentially many).
func (c *compiler) flatten() error {
	done := make(map[*node]bool)
	mark := make(map[*node]int)
	total := 0
	var visit func(n *node) error
	visit = func(n *node) error {
		if n.kind != kAlt || done[n] {
			return nil
		}
		done[n] = true
		for _, a := range n.alts {
			if err := visit(a); err != nil {
				return err
			}
		}
		if len(n.alts) == 1 && n.alts[0].kind == kAlt {
			n.alts = n.alts[0].alts // shared, not copied
			return nil
		}
		stamp := len(done)
		var flat []*node
		for _, a := range n.alts {
			leaves := []*node{a}
			if a.kind == kAlt {
				leaves = a.alts
			}
			for _, l := range leaves {
				if mark[l] != stamp {
					mark[l] = stamp
					flat = append(flat, l)
				}
			}
			if len(flat) > MaxFlatAlternatives {
				return fail("anyOf", n.at, "the alternatives, with those nested in them, are more than %d", MaxFlatAlternatives)
			}
		}
		if total += len(flat); total > maxFlatTotal {
			return fail("anyOf", n.at, "the alternatives of the whole schema, with those nested in them, are more than %d", maxFlatTotal)
		}
		n.alts = flat
		return nil
	}
	for _, n := range c.all {
		if err := visit(n); err != nil {
			return err
		}
	}
	return nil
}

// checkLiterals marks with noValue the enum and const values that break
// the rest of their schema (an enum of strings under "type": "integer"),
// by matching them against it; every other node gets need 1 meanwhile, so
// the match is not cut short by depth.
func (c *compiler) checkLiterals() {
	for _, n := range c.all {
		n.need = 1
	}
	for _, n := range c.all {
		if n.kind == kLiteral && n.within != nil && !matchText(n.within, n.text) {
			n.need = noValue
		}
	}
}

// needs computes each node's need: the frames its smallest value takes,
// noValue when it has none (an unsatisfiable leaf, a required property
// without a value, a recursion that never ends) or none that fits
// maxFrames. Needs only fall, from noValue, and a node whose need fell
// sends its parents to be computed again: each falls at most noValue
// times.
func (c *compiler) needs() {
	parents := make(map[*node][]*node)
	var work []*node
	for _, n := range c.all {
		switch n.kind {
		case kObject, kArray, kAlt:
			n.need = noValue
			work = append(work, n)
		case kLiteral:
			// checkLiterals set it
		default:
			n.need = 1
		}
		for _, p := range n.props {
			parents[p.node] = append(parents[p.node], n)
		}
		if n.kind == kArray {
			parents[n.items] = append(parents[n.items], n)
		}
		for _, a := range n.alts {
			parents[a] = append(parents[a], n)
		}
	}
	for len(work) > 0 {
		n := work[len(work)-1]
		work = work[:len(work)-1]
		if v := need(n); v < n.need {
			n.need = v
			work = append(work, parents[n]...)
		}
	}
}

// need is n's need from its children's current ones.
func need(n *node) uint8 {
	v := int(n.need)
	switch n.kind {
	case kObject:
		v = 1
		for i, p := range n.props {
			if n.required&(1<<i) != 0 {
				v = max(v, 1+int(p.node.need))
			}
		}
	case kArray:
		v = 1
		if n.minItems > 0 {
			v = 1 + int(n.items.need)
		}
	case kAlt:
		v = noValue
		for _, a := range n.alts {
			v = min(v, int(a.need))
		}
	}
	return uint8(min(v, noValue))
}

// noValueError says why n, whose need is noValue, has no value: the first
// part of it that has none.
func (c *compiler) noValueError(n *node, seen map[*node]bool) error {
	if seen[n] {
		return fail("$ref", n.at, "every value recurses without end or nests deeper than the %d values a reply may hold open", maxFrames)
	}
	seen[n] = true
	switch n.kind {
	case kLiteral:
		keyword := "const"
		if n.at != nil && n.at.index >= 0 {
			keyword = "enum"
		}
		return fail(keyword, n.at, "the value %s does not obey the rest of the schema", n.text)
	case kObject:
		for i, p := range n.props {
			if n.required&(1<<i) != 0 && p.node.need == noValue {
				return c.noValueError(p.node, seen)
			}
		}
	case kArray:
		if n.items.need == noValue {
			return c.noValueError(n.items, seen)
		}
	case kAlt:
		if len(n.alts) > 0 && !slices.ContainsFunc(n.alts, func(a *node) bool { return a.need != noValue }) {
			return c.noValueError(n.alts[0], seen)
		}
	}
	return fail("", n.at, "every value nests deeper than the %d values a reply may hold open", maxFrames)
}

// firstID is the first id of a compiled node; the shared nodes of free
// JSON have those below.
const firstID = 16

// merge gives nodes that say the same thing of the same children one id
// and one node, and points every edge at the node kept for its id; it
// returns the root's. Children are classed first (depth first, in one
// pass); a child still open on the path, which only recursion makes, is
// named by itself. Two identical alternatives become one, and so do the
// readings through them.
func (c *compiler) merge(root *node) *node {
	const open int32 = -1
	class := make(map[*node]int32, len(c.all))
	index := make(map[*node]int, len(c.all))
	for i, n := range c.all {
		index[n] = i
	}
	ids := make(map[string]int32, len(c.all))
	kept := make(map[int32]*node)
	var key []byte
	var visit func(n *node)
	idOf := func(n *node) uint32 {
		switch {
		case n == nil:
			return math.MaxUint32
		case class[n] == open:
			return 1<<31 | uint32(index[n]) // the node itself
		case class[n] > 0:
			return uint32(class[n])
		}
		return uint32(n.id) // a shared node of free JSON
	}
	visit = func(n *node) {
		if _, ok := index[n]; !ok || class[n] != 0 {
			return
		}
		class[n] = open
		for _, p := range n.props {
			visit(p.node)
		}
		for _, ch := range append([]*node{n.extra, n.items}, n.alts...) {
			if ch != nil {
				visit(ch)
			}
		}
		key = n.local(key[:0])
		for _, p := range n.props {
			key = binary.LittleEndian.AppendUint32(key, idOf(p.node))
		}
		key = binary.LittleEndian.AppendUint32(key, idOf(n.extra))
		key = binary.LittleEndian.AppendUint32(key, idOf(n.items))
		alts := make([]uint32, 0, len(n.alts))
		for _, a := range n.alts {
			alts = append(alts, idOf(a))
		}
		slices.Sort(alts)
		for _, a := range slices.Compact(alts) {
			key = binary.LittleEndian.AppendUint32(key, a)
		}
		id, ok := ids[string(key)]
		if !ok {
			id = int32(firstID + len(ids))
			ids[string(key)] = id
			kept[id] = n
		}
		class[n] = id
	}
	visit(root)
	canon := func(n *node) *node {
		if k, ok := kept[class[n]]; ok && n != nil {
			return k
		}
		return n
	}
	for id, n := range kept {
		n.id = id
		for i := range n.props {
			n.props[i].node = canon(n.props[i].node)
		}
		n.extra, n.items, n.within = canon(n.extra), canon(n.items), nil
		alts := make([]*node, 0, len(n.alts)) // n.alts may be shared
		for _, a := range n.alts {
			if a = canon(a); !slices.Contains(alts, a) {
				alts = append(alts, a)
			}
		}
		n.alts = alts
	}
	return canon(root)
}

// local appends to key what n says itself, apart from its children.
func (n *node) local(key []byte) []byte {
	key = append(key, byte(n.kind), n.need)
	key = binary.LittleEndian.AppendUint64(key, n.required)
	for _, v := range []int{n.minItems, n.maxItems, n.minLen, n.maxLen, len(n.props), len(n.text)} {
		key = binary.LittleEndian.AppendUint64(key, uint64(v))
	}
	key = binary.LittleEndian.AppendUint64(key, math.Float64bits(n.min))
	key = binary.LittleEndian.AppendUint64(key, math.Float64bits(n.max))
	for _, b := range []bool{n.exclMin, n.exclMax, n.bounded, n.extra != nil} {
		key = strconv.AppendBool(key, b)
	}
	key = append(key, n.text...)
	for _, p := range n.props {
		key = binary.LittleEndian.AppendUint64(key, uint64(len(p.key)))
		key = append(key, p.key...)
	}
	return key
}
