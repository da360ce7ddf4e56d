package service

import (
	"errors"
	"fmt"
)

// The error vocabulary of the package; callers test with errors.Is.
var (
	// ErrQueueFull says the queue had no room; the client should retry
	// later.
	ErrQueueFull = errors.New("service: too many requests are waiting for the model")
	// ErrBadRequest marks errors caused by the request (its messages,
	// sampling settings, stop strings or length), fit to show the client.
	ErrBadRequest = errors.New("service: bad request")
	// ErrContextFull marks a prompt that leaves no room to generate; the
	// error is a *ContextError.
	ErrContextFull = errors.New("service: prompt does not fit the context")
)

// ContextError reports a prompt too long for the context, with the counts.
// A max_tokens past the room the prompt leaves is lowered, never refused.
type ContextError struct {
	PromptTokens  int
	ContextLength int
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("the prompt has %d tokens but the context holds %d (prompt plus reply): shorten the conversation",
		e.PromptTokens, e.ContextLength)
}

// Is makes a ContextError match ErrContextFull and ErrBadRequest.
func (e *ContextError) Is(target error) bool {
	return target == ErrContextFull || target == ErrBadRequest
}

// badRequest marks err as the client's fault, keeping its message.
type badRequest struct{ err error }

func (e *badRequest) Error() string        { return e.err.Error() }
func (e *badRequest) Unwrap() error        { return e.err }
func (e *badRequest) Is(target error) bool { return target == ErrBadRequest }

func badRequestf(format string, args ...any) error {
	return &badRequest{fmt.Errorf(format, args...)}
}
