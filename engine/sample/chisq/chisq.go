// Package chisq is the chi-square goodness-of-fit test that the samplers'
// statistical tests (engine/sample on the CPU, shaders' GPU sampler through
// the sim) run on counts of draws.
package chisq

import "math"

// limits001 are the exact critical values at significance 0.001 for 1..12
// degrees of freedom.
var limits001 = []float64{10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26, 32.91}

// Limit is the chi-square value that a correct sampler's counts exceed once
// in a thousand seeds at df degrees of freedom: the exact value up to 12,
// the Wilson-Hilferty approximation beyond (at most 0.5% above the exact
// value there).
func Limit(df int) float64 {
	if df <= len(limits001) {
		return limits001[max(df, 1)-1]
	}
	const z = 3.0902 // the standard normal's 0.999 quantile
	k := float64(df)
	return k * math.Pow(1-2/(9*k)+z*math.Sqrt(2/(9*k)), 3)
}

// Test compares counts of draws (per id) with the probabilities want. Bins
// expected to hold fewer than 5 draws are pooled, as the test requires; a
// draw where want is 0 (or where want has no entry) counts against it with
// an expectation of 0.5.
func Test(counts []int, want []float64, draws int) (chi float64, df int) {
	var poolN, poolE float64
	bins := 0
	for id, c := range counts {
		e := 0.0
		if id < len(want) {
			e = want[id] * float64(draws)
		}
		if e < 5 {
			poolN += float64(c)
			poolE += e
			continue
		}
		chi += (float64(c) - e) * (float64(c) - e) / e
		bins++
	}
	if poolN > 0 || poolE > 0 {
		poolE = max(poolE, 0.5)
		chi += (poolN - poolE) * (poolN - poolE) / poolE
		bins++
	}
	return chi, max(bins-1, 1)
}
