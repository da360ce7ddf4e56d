package cpu

import "math"

// deltaNet runs the Gated DeltaNet mixer for t new tokens (rows of xn),
// advancing the conv window and recurrent state in st, and writes
// out_proj's output to out. It uses the recurrent form token by token,
// which the chunked form of prefill equals up to rounding.
func (s *Sequence) deltaNet(dn *deltaNet, st *layerState, xn []float32, t int, out []float32) {
	c := s.m.cfg
	ch, kern := c.ConvChannels(), c.ConvKernel
	hk, hv, dk, dv := c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim
	u := make([]float32, t*ch)
	z := make([]float32, t*hv*dv)
	bb := make([]float32, t*hv)
	aa := make([]float32, t*hv)
	dn.qkv.mul(0, xn, t, u)
	dn.z.mul(0, xn, t, z)
	dn.b.mul(0, xn, t, bb)
	dn.a.mul(0, xn, t, aa)

	// Causal depthwise conv over time, then SiLU, in place in u.
	parallelFor(ch, 64, func(lo, hi int) {
		for cc := lo; cc < hi; cc++ {
			w := dn.conv[cc*kern : (cc+1)*kern]
			hist := st.conv[cc*(kern-1) : (cc+1)*(kern-1)]
			for i := 0; i < t; i++ {
				cur := u[i*ch+cc]
				acc := w[kern-1] * cur
				for k := 0; k < kern-1; k++ {
					acc += w[k] * hist[k]
				}
				copy(hist, hist[1:])
				hist[kern-2] = cur
				u[i*ch+cc] = silu(acc)
			}
		}
	})

	qScale := float32(1 / math.Sqrt(float64(dk)))
	for i := 0; i < t; i++ {
		row := u[i*ch : (i+1)*ch]
		for h := 0; h < hk; h++ {
			l2norm(row[h*dk:(h+1)*dk], qScale)
			l2norm(row[(hk+h)*dk:(hk+h+1)*dk], 1)
		}
	}

	o := make([]float32, t*hv*dv)
	ratio := hv / hk
	parallelFor(hv, 1, func(lo, hi int) {
		kv := make([]float32, dv)
		for h := lo; h < hi; h++ {
			S := st.state[h*dk*dv : (h+1)*dk*dv]
			kh := h / ratio
			for i := 0; i < t; i++ {
				row := u[i*ch : (i+1)*ch]
				q := row[kh*dk : (kh+1)*dk]
				k := row[(hk+kh)*dk : (hk+kh+1)*dk]
				v := row[2*hk*dk+h*dv : 2*hk*dk+(h+1)*dv]
				beta := sigmoid(bb[i*hv+h])
				alpha := float32(math.Exp(float64(dn.negA[h] * softplus(aa[i*hv+h]+dn.dtBias[h]))))
				// kv = (alpha*S)^T k, the memory's prediction for k.
				clear(kv)
				for a := 0; a < dk; a++ {
					ka := k[a] * alpha
					sr := S[a*dv : (a+1)*dv]
					for j := range kv {
						kv[j] += sr[j] * ka
					}
				}
				for j := range kv {
					kv[j] = beta * (v[j] - kv[j])
				}
				oh := o[(i*hv+h)*dv : (i*hv+h+1)*dv]
				for a := 0; a < dk; a++ {
					ka, qa := k[a], q[a]
					sr := S[a*dv : (a+1)*dv]
					for j := range sr {
						sv := alpha*sr[j] + ka*kv[j]
						sr[j] = sv
						oh[j] += sv * qa
					}
				}
			}
		}
	})

	// Gated RMSNorm per value head: norm(o) * w * silu(z).
	for i := 0; i < t*hv; i++ {
		oh := o[i*dv : (i+1)*dv]
		rmsNorm(oh, oh, dn.norm, c.RMSNormEps)
		zh := z[i*dv : (i+1)*dv]
		for j := range oh {
			oh[j] *= silu(zh[j])
		}
	}
	dn.out.mul(0, o, t, out)
}

// l2norm scales x to unit length (eps 1e-6 inside the root), times scale.
func l2norm(x []float32, scale float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1/math.Sqrt(ss+1e-6)) * scale
	for i := range x {
		x[i] *= inv
	}
}
