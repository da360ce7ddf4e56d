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

// DecodeWeightBytes is how many bytes of weights one decode step reads
// ([Model.StepWeightBytes] of one token). Decode at batch 1 is bound by
// this number over the memory bandwidth.
func (m *Model) DecodeWeightBytes() int64 { return m.StepWeightBytes(1) }

// StepWeightBytes is how many bytes of weights a forward step over tokens
// tokens reads: their embedding rows, every dense projection once, the
// whole lm_head, and of each MoE block the rows of at most tokens*TopK
// experts (all of them once a chunk can route to every one).
func (m *Model) StepWeightBytes(tokens int) int64 {
	c := m.Config
	n := int64(tokens)*m.Embed.RowBytes() + m.LMHead.Bytes()
	experts := int64(min(c.Experts, tokens*c.TopK))
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
		n += experts * (e.Gate.Bytes() + e.Up.Bytes() + e.Down.Bytes()) / int64(c.Experts)
	}
	return n
}
