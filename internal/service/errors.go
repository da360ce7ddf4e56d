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

// ContextError reports a prompt, or a prompt and the reply's max_tokens,
// too long for the context, with the counts.
type ContextError struct {
	PromptTokens  int
	ContextLength int
	// MaxTokens is the reply limit that did not fit after the prompt; 0
	// when the prompt alone leaves no room.
	MaxTokens int
}

func (e *ContextError) Error() string {
	if e.MaxTokens > 0 {
		return fmt.Sprintf("the prompt has %d tokens and max_tokens asks for %d more, but the context holds %d: lower max_tokens or shorten the conversation",
			e.PromptTokens, e.MaxTokens, e.ContextLength)
	}
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
