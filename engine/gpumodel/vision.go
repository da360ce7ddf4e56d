package gpumodel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/safetensors"
	"petal/engine/vision/preprocess"
	"petal/engine/vision/tower"
	"petal/gpu"
	"petal/shaders"
)

// The vision tower on the device: the same computation as
// engine/vision/tower (its fp32 CPU reference), with the weights as the
// checkpoint stores them (bf16, or f32) and every activation in fp32 on
// the device; the image's features stay there for the prompt that reads
// them.

// deviceTower is a model's tower placed on the device on first use.
type deviceTower struct {
	once   sync.Once
	err    error
	cfg    checkpoint.VisionConfig
	patch  shaders.VisMatrix
	patchB shaders.View
	pos    []float32 // the learned position table, [Positions][Hidden], on the host for the interpolation
	blocks []visBlock
	mNorm  [2]shaders.View
	mFC1   shaders.VisMatrix
	mFC2   shaders.VisMatrix
	mFC1B  shaders.View
	mFC2B  shaders.View
	inv    []float32 // the 2D rotary's inverse frequencies, head_dim/4
}

type visBlock struct {
	norm1, norm2            [2]shaders.View // weight, bias
	qkv, proj, fc1, fc2     shaders.VisMatrix
	qkvB, projB, fc1B, fc2B shaders.View
}

// Vision reports whether the model reads images: its checkpoint holds a
// vision tower.
func (m *Model) Vision() bool { return m.cfg.HasVision() }

// tower places the checkpoint's tower on the device once.
func (m *Model) tower() (*deviceTower, error) {
	t := &m.vision
	t.once.Do(func() { t.err = m.placeTower(t) })
	return t, t.err
}

func (m *Model) placeTower(t *deviceTower) error {
	ck := m.ckpt
	if ck.Vision == nil || ck.Config.Vision == nil {
		if ck.VisionErr != nil {
			return fmt.Errorf("gpumodel: %w: the model is text-only: %w", engine.ErrBadImages, ck.VisionErr)
		}
		return fmt.Errorf("gpumodel: %w: the model is text-only", engine.ErrBadImages)
	}
	c, w := ck.Config.Vision, ck.Vision
	if c.HeadDim() > shaders.VisMaxHeadDim || c.HeadDim()%4 != 0 {
		return fmt.Errorf("gpumodel: the tower's head dim %d: want a multiple of 4 up to %d", c.HeadDim(), shaders.VisMaxHeadDim)
	}
	t.cfg = *c
	var errs []error
	vec := func(v *checkpoint.Vector) shaders.View {
		b, err := m.upload(f32Bytes(tower.Floats(v.T)))
		errs = append(errs, err)
		return b
	}
	mat := func(x *checkpoint.Matrix) shaders.VisMatrix {
		vm, err := m.visMatrix(x.Weight, x.Rows, x.Cols, x.Bits, nil)
		errs = append(errs, err)
		return vm
	}
	var perm func(int) int
	if w.ChannelsLast {
		// mlx-vlm stores [out, t, y, x, channel]; the pixel values' columns
		// are (channel, t, y, x).
		ch, tp, p := c.InChannels, c.TemporalPatch, c.Patch
		perm = func(dst int) int {
			x, y := dst%p, dst/p%p
			ti, k := dst/(p*p)%tp, dst/(p*p*tp)
			return ((ti*p+y)*p+x)*ch + k
		}
	}
	var err error
	t.patch, err = m.visMatrix(w.Patch.T, c.Hidden, c.PatchDim(), 0, perm)
	errs = append(errs, err)
	t.patchB = vec(&w.PatchBias)
	t.pos = tower.Floats(w.PosEmbed.T)
	t.blocks = make([]visBlock, len(w.Blocks))
	for i := range w.Blocks {
		s, d := &w.Blocks[i], &t.blocks[i]
		d.norm1 = [2]shaders.View{vec(&s.Norm1), vec(&s.Norm1Bias)}
		d.norm2 = [2]shaders.View{vec(&s.Norm2), vec(&s.Norm2Bias)}
		d.qkv, d.proj, d.fc1, d.fc2 = mat(&s.QKV), mat(&s.Proj), mat(&s.FC1), mat(&s.FC2)
		d.qkvB, d.projB, d.fc1B, d.fc2B = vec(&s.QKVBias), vec(&s.ProjBias), vec(&s.FC1Bias), vec(&s.FC2Bias)
	}
	t.mNorm = [2]shaders.View{vec(&w.MergerNorm), vec(&w.MergerNormBias)}
	t.mFC1, t.mFC2 = mat(&w.MergerFC1), mat(&w.MergerFC2)
	t.mFC1B, t.mFC2B = vec(&w.MergerFC1Bias), vec(&w.MergerFC2Bias)
	t.inv = tower.InvFreq(c)
	if len(t.pos) != c.Positions*c.Hidden {
		errs = append(errs, fmt.Errorf("gpumodel: the tower's position table holds %d values, want %d", len(t.pos), c.Positions*c.Hidden))
	}
	return errors.Join(errs...)
}

// upload copies b into a new device buffer the model owns.
func (m *Model) upload(b []byte) (shaders.View, error) {
	buf, err := m.k.Device().NewBuffer(max(len(b), 16))
	if err != nil {
		return shaders.View{}, err
	}
	copy(buf.Contents(), b)
	m.owned = append(m.owned, buf)
	return shaders.View{Buf: buf}, nil
}

// visMatrix uploads a dense weight as stored (bf16 or f32), its columns
// taken through perm when set (column j of a row from perm(j)).
func (m *Model) visMatrix(t *safetensors.Tensor, rows, cols, bits int, perm func(int) int) (shaders.VisMatrix, error) {
	vm := shaders.VisMatrix{Rows: rows, Cols: cols, BF16: t.DType == safetensors.BF16}
	size := 4
	if vm.BF16 {
		size = 2
	}
	switch {
	case bits != 0:
		return vm, fmt.Errorf("gpumodel: a %d-bit quantized vision tower: the device tower takes bf16 or f32 weights", bits)
	case t.DType != safetensors.BF16 && t.DType != safetensors.F32:
		return vm, fmt.Errorf("gpumodel: a %s vision weight: the device tower takes bf16 or f32", t.DType)
	case len(t.Data) != rows*cols*size:
		return vm, fmt.Errorf("gpumodel: a vision weight of %d bytes for %dx%d", len(t.Data), rows, cols)
	}
	data := t.Data
	if perm != nil {
		data = make([]byte, len(t.Data))
		for r := range rows {
			src, dst := t.Data[r*cols*size:(r+1)*cols*size], data[r*cols*size:(r+1)*cols*size]
			for j := range cols {
				copy(dst[j*size:(j+1)*size], src[perm(j)*size:(perm(j)+1)*size])
			}
		}
	}
	v, err := m.upload(data)
	vm.W = v
	return vm, err
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// checkPixels refuses an image the tower cannot read, as tower.Encode.
func (t *deviceTower) checkPixels(px preprocess.Pixels) error {
	c, g := &t.cfg, px.Grid
	n := g.Patches()
	switch {
	case g.T <= 0 || g.H <= 0 || g.W <= 0 || g.H%c.Merge != 0 || g.W%c.Merge != 0:
		return fmt.Errorf("gpumodel: %w: grid %dx%dx%d is not whole merge blocks of %d", engine.ErrBadImages, g.T, g.H, g.W, c.Merge)
	case n > tower.MaxPatches:
		return fmt.Errorf("gpumodel: %w: %d patches exceed %d", engine.ErrBadImages, n, tower.MaxPatches)
	case px.Merge != 0 && px.Merge != c.Merge:
		return fmt.Errorf("gpumodel: %w: merged by %d, the tower merges %d", engine.ErrBadImages, px.Merge, c.Merge)
	case len(px.Values) != n*c.PatchDim():
		return fmt.Errorf("gpumodel: %w: %d pixel values for %d patches of %d", engine.ErrBadImages, len(px.Values), n, c.PatchDim())
	}
	return nil
}

// EncodeImage runs the vision tower on the device on an image's pixel
// values and reads its merged features back: [tokens][hidden].
func (m *Model) EncodeImage(px preprocess.Pixels) ([]float32, error) {
	f, err := m.encodeImage(px)
	if err != nil {
		return nil, err
	}
	defer f.release()
	out := make([]float32, f.tokens*m.cfg.Hidden)
	readFloats(out, f.v.Buf.Contents()[f.v.Off:])
	return out, nil
}

// features are an image's merged features on the device.
type features struct {
	v      shaders.View
	tokens int
}

func (f *features) release() {
	if f.v.Buf != nil {
		f.v.Buf.Release()
		f.v.Buf = nil
	}
}

// encodeImage runs the tower on px: a command buffer for the patch
// embedding, one per block (a real-size image's block is hundreds of
// GFLOP), one for the merger; the activations are freed after, the
// features kept.
func (m *Model) encodeImage(px preprocess.Pixels) (*features, error) {
	t, err := m.tower()
	if err != nil {
		return nil, err
	}
	if err := t.checkPixels(px); err != nil {
		return nil, err
	}
	c, g := &t.cfg, px.Grid
	n, h, frame := g.Patches(), c.Hidden, g.H*g.W
	tokens := n / (c.Merge * c.Merge)
	dev := m.k.Device()
	var scratch []gpu.Buffer
	defer func() {
		for _, b := range scratch {
			b.Release()
		}
	}()
	var errs []error
	buf := func(b []byte, n int) shaders.View {
		nb, err := dev.NewBuffer(max(n, 16))
		if err != nil {
			errs = append(errs, err)
			return shaders.View{}
		}
		copy(nb.Contents(), b)
		scratch = append(scratch, nb)
		return shaders.View{Buf: nb}
	}
	f := 4
	pos := make([]float32, n*h)
	tower.AddPositions(pos, t.pos, c, g)
	x := buf(f32Bytes(pos), n*h*f)
	pv := buf(f32Bytes(px.Values), len(px.Values)*f)
	cosT, sinT := tower.Rotary(t.inv, c.Merge, g)
	cv, sv := buf(f32Bytes(cosT), len(cosT)*f), buf(f32Bytes(sinT), len(sinT)*f)
	xn, qkv, attn := buf(nil, n*h*f), buf(nil, n*3*h*f), buf(nil, n*h*f)
	mlp := buf(nil, n*c.Intermediate*f)
	mid := buf(nil, tokens*t.mFC1.Rows*f)
	outBuf, err := dev.NewBuffer(tokens * t.mFC2.Rows * f)
	if err != nil {
		return nil, err
	}
	out := &features{v: shaders.View{Buf: outBuf}, tokens: tokens}
	if err := errors.Join(errs...); err != nil {
		out.release()
		return nil, err
	}
	shape := shaders.VisShape{Tokens: n, Heads: c.Heads, HeadDim: c.HeadDim(), Frame: frame}
	k := m.k
	steps := []func(cb gpu.CommandBuffer) error{func(cb gpu.CommandBuffer) error {
		return k.VisDense(cb, x, t.patch, t.patchB, pv, n, shaders.VisActNone, true)
	}}
	for i := range t.blocks {
		b := &t.blocks[i]
		steps = append(steps, func(cb gpu.CommandBuffer) error {
			ops := []func() error{
				func() error { return k.VisLayerNorm(cb, xn, x, b.norm1[0], b.norm1[1], h, n, tower.NormEps) },
				func() error { return k.VisDense(cb, qkv, b.qkv, b.qkvB, xn, n, shaders.VisActNone, false) },
				func() error { return k.VisRope(cb, qkv, cv, sv, shape) },
				func() error { return k.VisAttention(cb, attn, qkv, shape) },
				func() error { return k.VisDense(cb, x, b.proj, b.projB, attn, n, shaders.VisActNone, true) },
				func() error { return k.VisLayerNorm(cb, xn, x, b.norm2[0], b.norm2[1], h, n, tower.NormEps) },
				func() error { return k.VisDense(cb, mlp, b.fc1, b.fc1B, xn, n, shaders.VisActGELUTanh, false) },
				func() error { return k.VisDense(cb, x, b.fc2, b.fc2B, mlp, n, shaders.VisActNone, true) },
			}
			return inOrder(cb, ops)
		})
	}
	steps = append(steps, func(cb gpu.CommandBuffer) error {
		// The merger: Merge² consecutive patches (one merge block, in the
		// pixel values' order) are one row of Merge²·hidden.
		return inOrder(cb, []func() error{
			func() error { return k.VisLayerNorm(cb, xn, x, t.mNorm[0], t.mNorm[1], h, n, tower.NormEps) },
			func() error { return k.VisDense(cb, mid, t.mFC1, t.mFC1B, xn, tokens, shaders.VisActGELUErf, false) },
			func() error { return k.VisDense(cb, out.v, t.mFC2, t.mFC2B, mid, tokens, shaders.VisActNone, false) },
		})
	})
	for _, step := range steps {
		if err := runBuffer(dev, step); err != nil {
			out.release()
			return nil, fmt.Errorf("gpumodel: the vision tower: %w", err)
		}
	}
	return out, nil
}

// inOrder runs ops with a barrier between each two (each reads what the
// one before wrote).
func inOrder(cb gpu.CommandBuffer, ops []func() error) error {
	for i, op := range ops {
		if i > 0 {
			cb.Barrier()
		}
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

// runBuffer encodes one command buffer with enc, commits it and waits.
func runBuffer(dev gpu.Device, enc func(gpu.CommandBuffer) error) error {
	cb, err := dev.NewCommandBuffer()
	if err != nil {
		return err
	}
	if err := enc(cb); err != nil {
		// Committed all the same so the driver gets it back; its work is
		// whatever encoded before the error.
		cb.Commit()
		cb.Wait()
		return err
	}
	if err := cb.Commit(); err != nil {
		return err
	}
	err = cb.Wait()
	gpu.Recycle(cb)
	return err
}
