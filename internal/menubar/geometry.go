package menubar

// Rect is a rectangle in AppKit's screen coordinates: points, origin at the
// bottom left of the main screen, y growing upwards (NSRect).
type Rect struct {
	X, Y, W, H float64
}

// Point is a position in screen coordinates (NSPoint).
type Point struct {
	X, Y float64
}

// WindowGap is the space in points between the menu bar and a window
// opened under its item, as a menu leaves it.
const WindowGap = 4

// placeUnder is the top-left corner for a window w points wide opened
// under a menu-bar item whose frame is item, on a screen whose visible
// area (below the menu bar, beside the Dock) is visible: centred on the
// item, moved sideways to stay on the screen, and WindowGap below the bar.
func placeUnder(item Rect, w float64, visible Rect) Point {
	x := item.X + item.W/2 - w/2
	x = min(x, visible.X+visible.W-w)
	x = max(x, visible.X)
	top := min(item.Y, visible.Y+visible.H) - WindowGap
	return Point{X: x, Y: top}
}
