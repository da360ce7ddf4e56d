package gpumodel

import (
	"fmt"

	"petal/engine/checkpoint"
	"petal/gpu"
	"petal/gpu/record"
)

// Footprint is the device memory the GPU backend allocates for a model of
// one shape besides its mapped weights, with one sequence grown to hold a
// given context. [MeasureFootprint] counts it by running this package's
// own allocation code on a recording device, where buffers cost nothing,
// so the figures cannot drift from what the backend allocates.
type Footprint struct {
	// Capacity is how many positions the KV caches hold for the asked
	// context: they grow by doubling from initialCapacity, so this is the
	// context rounded up to a power of two, at most the model's maximum.
	Capacity int
	// ModelBytes are the model's float32 copies of its small vectors.
	ModelBytes int64
	// KVBytes are the K and V caches at Capacity, of KVDType elements.
	KVBytes int64
	// ScratchBytes are the attention scratch at Capacity.
	ScratchBytes int64
	// StateBytes are the DeltaNet conv windows and recurrent states: the
	// same at any length.
	StateBytes int64
	// ActivationBytes are the per-step scratch and the token slots (a
	// prompt piece of engine.Run and the ring of generated tokens).
	ActivationBytes int64
	// PrefillBytes are the chunk activations a prompt of the whole
	// context allocates while it runs through the prefill (released
	// after it, so not in SequenceBytes).
	PrefillBytes int64
	// GrowthBytes is how far the sequence's memory rises above its final
	// size while the caches double to Capacity: the old cache being copied
	// and the old attention scratch live for a moment next to the new
	// caches.
	GrowthBytes int64
}

// KVDType names the KV caches' element type: IEEE fp16,
// shaders.KVElementBytes each.
const KVDType = "float16"

// SequenceBytes is what the sequence holds once grown.
func (f Footprint) SequenceBytes() int64 {
	return f.KVBytes + f.ScratchBytes + f.StateBytes + f.ActivationBytes
}

// KVBytesPerPosition is what one cached position costs in the K and V
// caches of every attention layer.
func (f Footprint) KVBytesPerPosition() int64 { return f.KVBytes / int64(f.Capacity) }

// MeasureFootprint counts what a model of cfg's shape and one sequence
// holding context positions allocate on the device.
func MeasureFootprint(cfg *checkpoint.Config, context int) (Footprint, error) {
	fs, err := MeasureFootprints(cfg, []int{context})
	if err != nil {
		return Footprint{}, err
	}
	return fs[0], nil
}

// MeasureFootprints is [MeasureFootprint] for several contexts, building
// the shape-only model once.
func MeasureFootprints(cfg *checkpoint.Config, contexts []int) ([]Footprint, error) {
	for _, c := range contexts {
		if c < 1 {
			return nil, fmt.Errorf("gpumodel: footprint of a context of %d positions", c)
		}
		if p := cfg.MaxPositions; p > 0 && c > p {
			return nil, fmt.Errorf("gpumodel: %d positions exceed the model's %d", c, p)
		}
	}
	ckpt, err := checkpoint.ShapeOnly(cfg)
	if err != nil {
		return nil, err
	}
	dev := &meter{Device: record.New()}
	m, err := New(ckpt, dev)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	out := make([]Footprint, len(contexts))
	for i, c := range contexts {
		if out[i], err = measure(m, dev, c); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// measure grows a fresh sequence of m to context positions and counts what
// it holds.
func measure(m *Model, dev *meter, context int) (Footprint, error) {
	var owned int64
	for _, b := range m.owned {
		owned += int64(b.Len())
	}
	f := Footprint{ModelBytes: owned}
	s, err := m.newSequence()
	if err != nil {
		return Footprint{}, err
	}
	defer s.Close()
	if err := s.ensureCapacity(context); err != nil {
		return Footprint{}, err
	}
	if f.GrowthBytes, err = growth(m, dev, s.cap); err != nil {
		return Footprint{}, err
	}
	f.Capacity = s.cap
	for _, st := range s.layers {
		for _, v := range []gpu.Buffer{st.kCache.Buf, st.vCache.Buf} {
			if v != nil {
				f.KVBytes += int64(v.Len())
			}
		}
		for _, v := range []gpu.Buffer{st.conv.Buf, st.state.Buf} {
			if v != nil {
				f.StateBytes += int64(v.Len())
			}
		}
	}
	if b := s.act.attnScratch.Buf; b != nil {
		f.ScratchBytes = int64(b.Len())
	}
	f.ActivationBytes = s.Bytes() - f.KVBytes - f.StateBytes - f.ScratchBytes
	if context >= prefillMinTokens {
		if f.PrefillBytes, err = s.chunkBytes(context); err != nil {
			return Footprint{}, err
		}
	}
	return f, nil
}

// growth is how far a second sequence's memory rises above its final size
// when its caches double from half of capacity to capacity, the last step
// of a long prompt's growth.
func growth(m *Model, dev *meter, capacity int) (int64, error) {
	s, err := m.newSequence()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if err := s.ensureCapacity(capacity / 2); err != nil {
		return 0, err
	}
	dev.peak = dev.live
	if err := s.ensureCapacity(capacity); err != nil {
		return 0, err
	}
	return dev.peak - dev.live, nil
}

// meter is a device that counts the bytes of its live buffers and their
// peak. It serves one goroutine.
type meter struct {
	gpu.Device
	live, peak int64
}

func (d *meter) NewBuffer(length int) (gpu.Buffer, error) {
	b, err := d.Device.NewBuffer(length)
	if err != nil {
		return nil, err
	}
	d.live += int64(length)
	d.peak = max(d.peak, d.live)
	return &meteredBuffer{Buffer: b, d: d}, nil
}

type meteredBuffer struct {
	gpu.Buffer
	d        *meter
	released bool
}

func (b *meteredBuffer) Release() {
	if !b.released {
		b.released = true
		b.d.live -= int64(b.Len())
	}
	b.Buffer.Release()
}
