package loginitem

import "fmt"

// Status is the state of a login item as SMAppService reports it
// (SMAppServiceStatus).
type Status int

const (
	NotRegistered Status = iota
	Enabled
	// RequiresApproval: registered, but the user has to allow it in
	// System Settings > General > Login Items (or turned it off there).
	RequiresApproval
	// NotFound: the system finds no such service (an app never registered).
	NotFound
)

func (s Status) String() string {
	switch s {
	case NotRegistered:
		return "not registered"
	case Enabled:
		return "enabled"
	case RequiresApproval:
		return "requires approval"
	case NotFound:
		return "not found"
	}
	return fmt.Sprintf("status %d", int(s))
}

// step is a change to a login item.
type step int

const (
	stay step = iota
	register
	unregister
)

// plan is the step that takes a login item in status st to registered
// (want) or not. One that awaits the user's approval stays: registering
// again would not approve it, and only the user can.
func plan(want bool, st Status) step {
	registered := st == Enabled || st == RequiresApproval
	switch {
	case want && !registered:
		return register
	case !want && registered:
		return unregister
	}
	return stay
}
