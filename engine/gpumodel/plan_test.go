package gpumodel

import (
	"bytes"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/sample"
	"petal/gpu/record"
)

// sameItems reports the first difference between two captured steps.
func sameItems(a, b []planItem) (int, bool) {
	if len(a) != len(b) {
		return min(len(a), len(b)), false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.barrier != y.barrier {
			return i, false
		}
		dx, dy := &x.d, &y.d
		if dx.Pipeline != dy.Pipeline || dx.Groups != dy.Groups || dx.Threads != dy.Threads || len(dx.Args) != len(dy.Args) || len(dx.ThreadgroupMemory) != len(dy.ThreadgroupMemory) {
			return i, false
		}
		for j := range dx.ThreadgroupMemory {
			if dx.ThreadgroupMemory[j] != dy.ThreadgroupMemory[j] {
				return i, false
			}
		}
		for j := range dx.Args {
			ax, ay := &dx.Args[j], &dy.Args[j]
			if ax.Index != ay.Index || ax.Buffer != ay.Buffer || ax.Offset != ay.Offset || !bytes.Equal(ax.Bytes, ay.Bytes) {
				return i, false
			}
		}
	}
	return 0, true
}

// A replayed plan encodes exactly what the ops encode, at positions across
// attention blocks and the split into blocks, with other token slots and
// without a pick, with the sampler instead of the argmax; and replaying
// allocates nothing.
func TestPlanMatchesOps(t *testing.T) {
	ckpt, err := checkpoint.ShapeOnly(checkpoint.Qwen36())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(ckpt, record.NewCounting())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.newSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ensureCapacity(32770); err != nil {
		t.Fatal(err)
	}
	plans := map[*plan]bool{}
	seed := uint64(7)
	sampled := &engine.Decode{Sampling: &engine.Sampling{Params: sample.Params{Temperature: 0.7, TopP: 0.9, RepetitionPenalty: 1, Seed: &seed}}}
	for _, pos := range []int{0, 1, 7, 254, 255, 256, 257, 300, 511, 512, 4095, 4096, 32767, 32768} {
		s.sampling = false
		if pos == 4096 || pos == 32768 {
			if err := s.startSampling(sampled); err != nil {
				t.Fatal(err)
			}
		}
		for _, st := range []step{
			{pos: pos, token: s.slot(0), next: s.slot(1)},
			{pos: pos, token: s.slot(3), next: s.slot(0)},
			{pos: pos, token: s.slot(2), logits: true},
		} {
			var got, want capture
			if err := s.encode(&got, st); err != nil {
				t.Fatal(err)
			}
			if err := s.encodeOps(&want, st); err != nil {
				t.Fatal(err)
			}
			if i, ok := sameItems(got.items, want.items); !ok {
				t.Fatalf("position %d, token slot %d, next %v: the plan differs from the ops at event %d", pos, st.token.Off/4, st.next.Buf != nil, i)
			}
			plans[s.plan] = true
		}
	}
	s.sampling = false
	if len(plans) < 2*4+2 {
		t.Errorf("%d plans for 4 block counts with and without a pick, and with the sampler", len(plans))
	}
	rec, _ := record.NewCounting().NewCommandBuffer()
	st := step{pos: 4100, token: s.slot(1), next: s.slot(2)}
	if err := s.encode(rec, st); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(5, func() { s.encode(rec, st) }); n != 0 {
		t.Errorf("replaying a plan allocates %v times", n)
	}
}
