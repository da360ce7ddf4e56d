package service

import "testing"

// TestSlotSwap follows two services through a slot: a request keeps the
// service it began on across a swap, the next request gets the new one,
// and the old one is released once, when its last request ends.
func TestSlotSwap(t *testing.T) {
	a, _ := scripted(t, Options{}, constant("a"))
	b, _ := scripted(t, Options{}, constant("b"))
	released := map[string]int{}
	slot := NewSlot(a, func() { released["a"]++ })

	got, doneA := slot.Acquire()
	if got != a {
		t.Fatal("the first request did not get the first service")
	}
	slot.Swap(b, func() { released["b"]++ })
	if slot.Current() != b {
		t.Error("Current is not the new service after the swap")
	}
	got, doneB := slot.Acquire()
	if got != b {
		t.Error("a request after the swap did not get the new service")
	}
	if released["a"] != 0 {
		t.Fatal("the old service was released while a request held it")
	}
	doneA()
	doneA() // a second call of the same done changes nothing
	if released["a"] != 1 {
		t.Fatalf("the old service was released %d times after its last request, want 1", released["a"])
	}

	slot.Close()
	if released["b"] != 0 {
		t.Fatal("Close released a service a request held")
	}
	doneB()
	if released["b"] != 1 {
		t.Fatalf("the closed slot's service was released %d times, want 1", released["b"])
	}
	// A late request after Close gets the service but never frees it again.
	_, late := slot.Acquire()
	late()
	if released["b"] != 1 {
		t.Errorf("a late request released the service again (%d)", released["b"])
	}
}

// TestSlotSwapIdle shows an idle service is released at the swap itself,
// and one without a release function is left to its owner.
func TestSlotSwapIdle(t *testing.T) {
	a, _ := scripted(t, Options{}, constant("a"))
	b, _ := scripted(t, Options{}, constant("b"))
	n := 0
	slot := NewSlot(a, nil)
	slot.Swap(b, func() { n++ })
	slot.Swap(a, nil)
	if n != 1 {
		t.Errorf("an idle service was released %d times at the swap, want 1", n)
	}
}
