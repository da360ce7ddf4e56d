package gpu

// A Recycler is a command buffer its driver can reuse once the caller is
// done with it, so that a decode step makes no new one: the Metal
// driver's is a few kilobytes of bindings and argument blocks that would
// otherwise be allocated every step. Drivers whose command buffers cost
// nothing to make (the sim, the recording driver) do not implement it.
type Recycler interface {
	// Recycle hands the command buffer back to its driver. Call it only
	// after Wait has returned, when no goroutine still uses the command
	// buffer (no Wait, Status or Trace in progress or to come); the value
	// must not be used afterwards, since the driver may hand the same one
	// out again from NewCommandBuffer. Recycling one that has not settled
	// (no Wait has returned), or recycling it twice before the driver hands
	// it out again, is ignored; a recycled value used after the driver
	// handed it out again is the new owner's command buffer, which no
	// driver can tell apart.
	Recycle()
}

// Recycle hands cb back to its driver where cb is a Recycler; the
// contract is Recycler's. A wrapper that embeds CommandBuffer hides the
// inner command buffer's Recycle, and its command buffers are simply not
// reused.
func Recycle(cb CommandBuffer) {
	if r, ok := cb.(Recycler); ok {
		r.Recycle()
	}
}
