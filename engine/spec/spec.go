// Package spec holds speculative decoding's rules apart from any backend:
// the acceptance rule that keeps a sampled reply's distribution exactly the
// model's, and the policy that drafts only while drafting pays.
package spec

// Verdict is the outcome of verifying one drafted token.
type Verdict struct {
	// Accepted reports whether the draft stands.
	Accepted bool
	// Token is the token at the drafted position: the draft when
	// accepted, else the one drawn in its place.
	Token int
}

// Sampled applies the speculative-sampling rule (Leviathan et al. 2023;
// Chen et al. 2023) to a draft drawn from q: accept it with probability
// min(1, p[draft]/q[draft]), uAccept being a uniform draw in [0, 1); else
// draw from norm(max(0, p-q)) with the uniform uResidual. p and q are the
// distributions after every processor (temperature, filters, penalties,
// bias, a grammar's mask), so a token at the position is distributed
// exactly as p, whatever q is. When p is not above q anywhere (only when p
// equals q, where every draft is accepted) the draw falls back to p.
func Sampled(p, q []float64, draft int, uAccept, uResidual float64) Verdict {
	if q[draft] > 0 && uAccept*q[draft] < p[draft] {
		return Verdict{Accepted: true, Token: draft}
	}
	var total float64
	for i, pi := range p {
		if d := pi - q[i]; d > 0 {
			total += d
		}
	}
	if total <= 0 {
		return Verdict{Token: drawFrom(p, 1, uResidual)}
	}
	u := uResidual * total
	last := -1
	for i, pi := range p {
		d := pi - q[i]
		if d <= 0 {
			continue
		}
		last = i
		if u < d {
			return Verdict{Token: i}
		}
		u -= d
	}
	return Verdict{Token: last}
}

// Draw picks an index of w (weights summing to total) with the uniform u.
func Draw(w []float64, u float64) int {
	var total float64
	for _, x := range w {
		total += x
	}
	return drawFrom(w, total, u)
}

func drawFrom(w []float64, total, u float64) int {
	u *= total
	last := 0
	for i, x := range w {
		if x <= 0 {
			continue
		}
		last = i
		if u < x {
			return i
		}
		u -= x
	}
	return last
}
