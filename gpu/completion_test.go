package gpu

import (
	"errors"
	"testing"
)

func TestCompletion(t *testing.T) {
	c := NewCompletion()
	if err := c.Wait(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Wait before Commit: %v", err)
	}
	if err := c.Commit(); err != nil || c.Status() != Committed {
		t.Fatalf("Commit: %v, status %v", err, c.Status())
	}
	if err := c.Commit(); !errors.Is(err, ErrInvalid) {
		t.Errorf("second Commit: %v", err)
	}
	why := errors.New("device closed")
	if err := c.End(why); err != why {
		t.Errorf("End returned %v", err)
	}
	<-c.Done()
	if err := c.Wait(); err != why || c.Status() != Failed {
		t.Errorf("Wait %v, status %v", err, c.Status())
	}

	ok := NewCompletion()
	if err := ok.Commit(); err != nil {
		t.Fatal(err)
	}
	go ok.End(nil)
	if err := ok.Wait(); err != nil || ok.Status() != Completed {
		t.Errorf("completed: Wait %v, status %v", err, ok.Status())
	}
}
