package menubar

import "testing"

func TestPlaceUnder(t *testing.T) {
	// A 1512x982 screen whose menu bar is 37 points high (a notched
	// MacBook Pro), the Dock at the bottom.
	visible := Rect{X: 0, Y: 80, W: 1512, H: 982 - 37 - 80}
	barBottom := 982.0 - 37
	for _, tc := range []struct {
		name string
		item Rect
		w    float64
		want Point
	}{
		{"centred under the item", Rect{X: 1000, Y: barBottom, W: 30, H: 37}, 420, Point{X: 1015 - 210, Y: barBottom - WindowGap}},
		{"kept on screen at the right", Rect{X: 1400, Y: barBottom, W: 30, H: 37}, 420, Point{X: 1512 - 420, Y: barBottom - WindowGap}},
		{"kept on screen at the left", Rect{X: 10, Y: barBottom, W: 30, H: 37}, 420, Point{X: 0, Y: barBottom - WindowGap}},
		{"wider than the screen: its left edge shows", Rect{X: 700, Y: barBottom, W: 30, H: 37}, 2000, Point{X: 0, Y: barBottom - WindowGap}},
	} {
		if got := placeUnder(tc.item, tc.w, visible); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// A second screen to the left of the main one, with a bar of its own.
	left := Rect{X: -1920, Y: 0, W: 1920, H: 1080 - 25}
	item := Rect{X: -100, Y: 1080 - 25, W: 24, H: 25}
	if got := placeUnder(item, 900, left); got != (Point{X: -1920 + 1920 - 900, Y: 1055 - WindowGap}) {
		t.Errorf("on a screen left of the main one: %+v", got)
	}
}
