package checkpoint

// RowBytes is the size in bytes of one row of the matrix as stored: packed
// codes plus bf16 scale and bias per group, or the dense row.
func (m *Matrix) RowBytes() int64 {
	if m.Bits == 0 {
		return int64(m.Cols) * int64(m.Weight.DType.Size())
	}
	groups := int64(m.Cols / m.GroupSize)
	return int64(m.Cols*m.Bits/8) + 2*2*groups
}

// Bytes is the stored size of the whole matrix (every expert).
func (m *Matrix) Bytes() int64 {
	return m.RowBytes() * int64(m.Rows) * int64(max(m.Experts, 1))
}

// DecodeWeightBytes is how many bytes of weights one decode step reads:
// one embedding row, every dense projection, the top-k experts' rows of
// each MoE block, and the whole lm_head. Decode at batch 1 is bound by
// this number over the memory bandwidth.
func (m *Model) DecodeWeightBytes() int64 {
	c := m.Config
	n := m.Embed.RowBytes() + m.LMHead.Bytes()
	for i := range m.Layers {
		l := &m.Layers[i]
		if a := l.Attn; a != nil {
			n += a.Q.Bytes() + a.K.Bytes() + a.V.Bytes() + a.O.Bytes()
		}
		if d := l.Delta; d != nil {
			n += d.QKV.Bytes() + d.Z.Bytes() + d.B.Bytes() + d.A.Bytes() + d.Out.Bytes()
		}
		e := &l.MoE
		n += e.Router.Bytes() + e.SharedGate.Bytes() + e.SharedUp.Bytes() + e.SharedDown.Bytes() + e.SharedExpertGate.Bytes()
		perExpert := (e.Gate.Bytes() + e.Up.Bytes() + e.Down.Bytes()) / int64(c.Experts)
		n += int64(c.TopK) * perExpert
	}
	return n
}
