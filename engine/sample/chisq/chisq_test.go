package chisq

import (
	"math"
	"testing"
)

func TestLimit(t *testing.T) {
	// Published 0.001 critical values (NIST/SEMATECH e-Handbook, table
	// 1.3.6.7.4) where the approximation takes over and beyond.
	for _, c := range []struct {
		df   int
		want float64
	}{{1, 10.828}, {12, 32.909}, {13, 34.528}, {20, 45.315}, {50, 86.661}, {100, 149.449}} {
		if got := Limit(c.df); math.Abs(got-c.want) > 0.005*c.want {
			t.Errorf("Limit(%d) = %.3f, want %.3f", c.df, got, c.want)
		}
	}
}

func TestTest(t *testing.T) {
	want := []float64{0.5, 0.3, 0.2, 0, 0}
	if chi, df := Test([]int{500, 300, 200, 0, 0}, want, 1000); chi != 0 || df != 2 {
		t.Errorf("exact counts: chi-square %v df %d, want 0 and 2", chi, df)
	}
	if chi, df := Test([]int{600, 300, 100, 0, 0}, want, 1000); chi <= Limit(df) {
		t.Errorf("a bad fit passes: chi-square %v df %d", chi, df)
	}
	if chi, df := Test([]int{500, 300, 190, 10, 0}, want, 1000); chi <= Limit(df) {
		t.Errorf("a draw outside the support passes: chi-square %v df %d", chi, df)
	}
}
