package gpu

import (
	"fmt"
	"sync/atomic"
)

// Completion is the life of a command buffer that a driver runs on its own
// goroutine (the sim's and cuda's): encoding, then committed exactly once,
// then ended exactly once, completed or failed, which Wait sees. Drivers
// embed it; it gives them Status and Wait.
type Completion struct {
	status atomic.Int32
	done   chan struct{}
	err    error
}

// NewCompletion is a Completion in the Encoding state.
func NewCompletion() Completion { return Completion{done: make(chan struct{})} }

// Status is where the command buffer is.
func (c *Completion) Status() Status { return Status(c.status.Load()) }

// Commit moves it from Encoding to Committed; a second Commit is refused.
func (c *Completion) Commit() error {
	if !c.status.CompareAndSwap(int32(Encoding), int32(Committed)) {
		return fmt.Errorf("%w: command buffer committed twice", ErrInvalid)
	}
	return nil
}

// End ends a committed command buffer: failed with err, or completed when
// err is nil. It returns err, so a Commit that will not run can return
// c.End(why) and Wait returns the same.
func (c *Completion) End(err error) error {
	c.err = err
	if err != nil {
		c.status.Store(int32(Failed))
	} else {
		c.status.Store(int32(Completed))
	}
	close(c.done)
	return err
}

// Done is closed once the command buffer has ended.
func (c *Completion) Done() <-chan struct{} { return c.done }

// Wait blocks until the command buffer has ended and returns its error.
func (c *Completion) Wait() error {
	if c.Status() == Encoding {
		return fmt.Errorf("%w: wait before commit", ErrInvalid)
	}
	<-c.done
	return c.err
}
