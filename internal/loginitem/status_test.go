package loginitem

import "testing"

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		want bool
		st   Status
		step step
	}{
		{true, NotRegistered, register},
		{true, NotFound, register},
		{true, Enabled, stay},
		{true, RequiresApproval, stay},
		{false, Enabled, unregister},
		{false, RequiresApproval, unregister},
		{false, NotRegistered, stay},
		{false, NotFound, stay},
	} {
		if got := plan(tc.want, tc.st); got != tc.step {
			t.Errorf("want %v, %v: step %d, want %d", tc.want, tc.st, got, tc.step)
		}
	}
}
