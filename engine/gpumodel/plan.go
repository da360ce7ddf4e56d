package gpumodel

import (
	"encoding/binary"
	"fmt"
	"slices"

	"petal/gpu"
	"petal/shaders"
)

// A plan is one kind of decode step's dispatches, encoded once through the
// ops (which check shapes and resolve pipelines and argument blocks) and
// replayed for every step of that kind with only what changes per step
// patched: the token slots the step reads and writes, and the position in
// the attention ops' inline arguments. Replaying allocates nothing.
type plan struct {
	key   planKey
	items []planItem
	// token and next locate the bindings of the step's input slot and of
	// the next token's slot (none without a pick; the sampler binds it
	// twice when it writes no record).
	token, next []argRef
	// record locates the sampler's logprobs record binding, if it writes
	// one.
	record []argRef
	// pos are the inline argument words that hold the position plus add.
	pos []posRef
	// cost is the step's at position at, the block's first; perPos what
	// each later position adds (the attention's reads of one more row).
	at           int
	cost, perPos Cost
}

// planKey is what a plan depends on besides the patched values: the cache
// buffers (reallocated as capacity grows), the attention's block count,
// the argmax's range, what the step computes, and the token slots' buffer.
type planKey struct {
	cap, blocks, argmaxIDs int
	logits, next, sampling bool
	tokens                 gpu.Buffer
	// logprobs and top are the sampler's record settings.
	logprobs bool
	top      int
	// images and ropeDelta: past an image the attention prep is
	// mrope_prep, whose inline move is fixed in the plan.
	images    bool
	ropeDelta int
}

type planItem struct {
	barrier bool
	d       gpu.Dispatch
}

type argRef struct{ item, arg int }

type posRef struct {
	item, arg, word int
	add             int32
}

func (s *Sequence) planKey(st step) planKey {
	return planKey{
		cap: s.cap, blocks: attnBlocks(st.pos + 1), argmaxIDs: s.argmaxIDs(),
		logits: st.logits, next: st.next.Buf != nil, sampling: s.sampling, tokens: s.act.tokensBuf,
		logprobs: s.sampling && s.samp.logprobs, top: s.samp.top,
		images: s.img.held, ropeDelta: s.img.delta,
	}
}

// attnBlocks is how many blocks the decode attention splits n positions
// into.
func attnBlocks(n int) int { return (n + shaders.AttnBlock - 1) / shaders.AttnBlock }

// encode records one decode step into cb through the step's plan, made on
// the first step of its kind.
func (s *Sequence) encode(cb gpu.CommandBuffer, st step) error {
	p, err := s.planFor(st)
	if err != nil {
		return err
	}
	if p == nil {
		return s.encodeOps(cb, st)
	}
	return s.replay(p, cb, st)
}

// planFor is the plan of st's kind, made on the first step of its kind;
// nil where makePlan makes none.
func (s *Sequence) planFor(st step) (*plan, error) {
	key := s.planKey(st)
	if s.plan == nil || s.plan.key != key {
		p, err := s.makePlan(key, st)
		if err != nil || p == nil {
			return nil, err
		}
		s.plan = p
	}
	return s.plan, nil
}

// stepItems is decode step st's dispatches and barriers, and its cost:
// its plan's, patched for st, or where it has none encoded through the
// ops. The plan's items stay valid until its next step is patched.
func (s *Sequence) stepItems(st step) ([]planItem, Cost, error) {
	p, err := s.planFor(st)
	if err != nil {
		return nil, Cost{}, err
	}
	if p == nil {
		var c capture
		e := enc{k: s.m.k, cb: &c}
		s.encodeStep(&e, st)
		return c.items, e.cost, e.err()
	}
	s.patch(p, st)
	d := int64(st.pos - p.at)
	return p.items, Cost{Flops: p.cost.Flops + d*p.perPos.Flops, Bytes: p.cost.Bytes + d*p.perPos.Bytes}, nil
}

// makePlan encodes the step at two neighbouring positions of its block
// and finds what differs: only words holding the position, one apart. It
// returns nil when the block holds one position below the capacity (no
// neighbour to compare with), for the step to be encoded directly.
func (s *Sequence) makePlan(key planKey, st step) (*plan, error) {
	a := (key.blocks - 1) * shaders.AttnBlock
	if a+1 >= s.cap || attnBlocks(a+2) != key.blocks {
		return nil, nil
	}
	var ca, cb capture
	at := st
	at.pos = a
	ea := enc{k: s.m.k, cb: &ca}
	s.encodeStep(&ea, at)
	if err := ea.err(); err != nil {
		return nil, err
	}
	at.pos = a + 1
	eb := enc{k: s.m.k, cb: &cb}
	s.encodeStep(&eb, at)
	if err := eb.err(); err != nil {
		return nil, err
	}
	p := &plan{key: key, items: ca.items, at: a, cost: ea.cost,
		perPos: Cost{Flops: eb.cost.Flops - ea.cost.Flops, Bytes: eb.cost.Bytes - ea.cost.Bytes}}
	if len(ca.items) != len(cb.items) {
		return nil, fmt.Errorf("gpumodel: decode steps at %d and %d differ in their dispatches", a, a+1)
	}
	for i := range ca.items {
		x, y := &ca.items[i], &cb.items[i]
		if err := p.compare(i, x, y, int32(a)); err != nil {
			return nil, fmt.Errorf("gpumodel: decode steps at %d and %d: %w", a, a+1, err)
		}
		if x.barrier {
			continue
		}
		for j, arg := range x.d.Args {
			if key.logprobs && arg.Bytes == nil && arg.Buffer == s.samp.records.Buf {
				p.record = append(p.record, argRef{i, j})
				continue
			}
			if arg.Bytes != nil || arg.Buffer != s.act.tokensBuf {
				continue
			}
			switch {
			case arg.Offset == st.token.Off:
				p.token = append(p.token, argRef{i, j})
			case st.next.Buf != nil && arg.Offset == st.next.Off:
				p.next = append(p.next, argRef{i, j})
			default:
				return nil, fmt.Errorf("gpumodel: %s binds the token slots unexpectedly", x.d.Pipeline.Name())
			}
		}
	}
	if len(p.token) == 0 || (st.next.Buf != nil) != (len(p.next) > 0) || (key.logprobs && st.next.Buf != nil) != (len(p.record) > 0) {
		return nil, fmt.Errorf("gpumodel: the decode step's token slots are not where its plan expects")
	}
	return p, nil
}

// compare checks that items x and y (item i of the steps at a and a+1)
// differ only in inline words one apart, and records those as position
// words.
func (p *plan) compare(i int, x, y *planItem, a int32) error {
	if x.barrier || y.barrier {
		if x.barrier != y.barrier {
			return fmt.Errorf("a barrier moved at event %d", i)
		}
		return nil
	}
	dx, dy := &x.d, &y.d
	name := dx.Pipeline.Name()
	if dx.Pipeline != dy.Pipeline || dx.Groups != dy.Groups || dx.Threads != dy.Threads ||
		!slices.Equal(dx.ThreadgroupMemory, dy.ThreadgroupMemory) || len(dx.Args) != len(dy.Args) {
		return fmt.Errorf("dispatch %d (%s) changes with the position beyond its arguments", i, name)
	}
	for j := range dx.Args {
		ax, ay := &dx.Args[j], &dy.Args[j]
		if ax.Index != ay.Index || ax.Buffer != ay.Buffer || ax.Offset != ay.Offset || len(ax.Bytes) != len(ay.Bytes) || (ax.Bytes == nil) != (ay.Bytes == nil) {
			return fmt.Errorf("%s: argument %d changes with the position", name, ax.Index)
		}
		for w := 0; w+4 <= len(ax.Bytes); w += 4 {
			u, v := int32(binary.LittleEndian.Uint32(ax.Bytes[w:])), int32(binary.LittleEndian.Uint32(ay.Bytes[w:]))
			switch {
			case u == v:
			case v == u+1:
				p.pos = append(p.pos, posRef{item: i, arg: j, word: w / 4, add: u - a})
			default:
				return fmt.Errorf("%s: argument %d word %d is not the position", name, ax.Index, w/4)
			}
		}
		if n := len(ax.Bytes) &^ 3; !slices.Equal(ax.Bytes[n:], ay.Bytes[n:]) {
			return fmt.Errorf("%s: argument %d changes with the position", name, ax.Index)
		}
	}
	return nil
}

// replay encodes the plan into cb for st.
func (s *Sequence) replay(p *plan, cb gpu.CommandBuffer, st step) error {
	s.patch(p, st)
	for i := range p.items {
		if p.items[i].barrier {
			cb.Barrier()
			continue
		}
		if err := cb.Dispatch(&p.items[i].d); err != nil {
			return err
		}
	}
	return nil
}

// patch sets what changes per step in the plan's items to st's.
func (s *Sequence) patch(p *plan, st step) {
	for _, r := range p.record {
		p.items[r.item].d.Args[r.arg].Offset = s.record(st.next).Off
	}
	for _, r := range p.pos {
		b := p.items[r.item].d.Args[r.arg].Bytes
		binary.LittleEndian.PutUint32(b[4*r.word:], uint32(int32(st.pos)+r.add))
	}
	for _, r := range p.token {
		p.items[r.item].d.Args[r.arg].Offset = st.token.Off
	}
	for _, r := range p.next {
		p.items[r.item].d.Args[r.arg].Offset = st.next.Off
	}
}

// capture is a command buffer that keeps copies of what is encoded into
// it, for a plan; it never runs.
type capture struct {
	items []planItem
	trace gpu.Trace
}

func (c *capture) Dispatch(d *gpu.Dispatch) error {
	cp := *d
	cp.Args = slices.Clone(d.Args)
	for i := range cp.Args {
		if cp.Args[i].Bytes != nil {
			cp.Args[i].Bytes = slices.Clone(cp.Args[i].Bytes)
		}
	}
	cp.ThreadgroupMemory = slices.Clone(d.ThreadgroupMemory)
	c.items = append(c.items, planItem{d: cp})
	c.trace.AddDispatch(d)
	return nil
}

func (c *capture) Barrier() {
	if n := len(c.items); n > 0 && !c.items[n-1].barrier {
		c.items = append(c.items, planItem{barrier: true})
	}
	c.trace.AddBarrier()
}

func (c *capture) Commit() error {
	return fmt.Errorf("%w: a plan's capture never runs", gpu.ErrInvalid)
}
func (c *capture) Wait() error        { return c.Commit() }
func (c *capture) Status() gpu.Status { return gpu.Encoding }
func (c *capture) Trace() *gpu.Trace  { return &c.trace }
