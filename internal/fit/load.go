package fit

import (
	"errors"
	"fmt"
)

// ErrDoesNotFit marks a load refused because the model does not fit the
// budget even at [MinContext]; the error is a *NoFitError.
var ErrDoesNotFit = errors.New("fit: the model does not fit this machine")

// NoFitError is a refused load, with the report that refused it.
type NoFitError struct {
	Report Report
}

func (e *NoFitError) Error() string {
	r := e.Report
	largest := "no context fits"
	if r.MaxContext > 0 {
		largest = fmt.Sprintf("the largest context that fits is %d tokens, below the %d-token minimum", r.MaxContext, MinContext)
	}
	return fmt.Sprintf("%s does not fit (verdict %q; %s): %s Budget: %s (%s).",
		r.Model, r.Verdict, largest, r.Advice, FormatBytes(r.WorkingSetBytes), r.WorkingSetSource)
}

// Is makes a NoFitError match ErrDoesNotFit.
func (e *NoFitError) Is(target error) bool { return target == ErrDoesNotFit }

// ForLoad decides the context a load runs at: the asked one when it fits,
// the largest that fits when only a shorter one does (the verdict
// [Reduced]), or a *NoFitError. The report returned is the check at the
// chosen context, so its HeadroomBytes is what is left there; compare its
// Context with req.Context to tell whether the context was lowered.
func ForLoad(m Model, budget Budget, req Request) (Report, error) {
	r, err := Check(m, budget, req)
	if err != nil {
		return Report{}, err
	}
	switch r.Verdict {
	case Fits:
		return r, nil
	case Reduced:
		req.Context = r.MaxContext
		return Check(m, budget, req)
	}
	return Report{}, &NoFitError{Report: r}
}
