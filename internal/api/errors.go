package api

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strconv"

	"petal/engine"
	"petal/engine/sample"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// RetryAfterSeconds is what a 429 tells the client to wait.
const RetryAfterSeconds = 2

// apiError is an error as the client sees it.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"` // a field name, or null
	Code    any    `json:"code"`  // a short code, or null
}

func (e *apiError) Error() string { return e.Message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
}

func badParam(param, format string, args ...any) *apiError {
	e := badRequest(format, args...)
	e.Param = param
	return e
}

// notText refuses a content part or block that is neither text nor an
// image (audio, a file, a document), in the same words on every API.
func notText(where, typ string) *apiError {
	e := badParam("messages", "%s holds content of type %q, which Petal cannot read (it reads text and images): send the content as text", where, typ)
	e.Code = "unsupported_content"
	return e
}

// overflowInput names, in a route's words, the input that did not fit
// the context: what it is, the parameter holding it, what to shorten.
type overflowInput struct{ what, param, fix string }

// The inputs of the routes, a conversation's by default.
var (
	overflowMessages = overflowInput{"your messages", "messages", "the messages"}
	overflowPrompt   = overflowInput{"your prompt", "prompt", "the prompt"}
	overflowCode     = overflowInput{"the code around the cursor (prefix, suffix and any files of context)", "prompt", "the code sent"}
	overflowEmbed    = overflowInput{"an input", "input", "each input (Ollama's /api/embed cuts it to fit unless truncate is false)"}
)

// overflowError says a context overflow in OpenAI's sentence, which
// clients parse for the two counts, with in's words.
func overflowError(ce *service.ContextError, in overflowInput) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: in.param, Code: "context_length_exceeded",
		Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, %s resulted in %d tokens. Please reduce the length of %s.",
			ce.ContextLength, in.what, ce.PromptTokens, in.fix)}
}

// overflow says a context overflow in err in in's words, for the routes
// whose input is no conversation; other errors pass as they are.
func overflow(err error, in overflowInput) error {
	if ce, ok := errors.AsType[*service.ContextError](err); ok {
		return overflowError(ce, in)
	}
	return err
}

// errorFor maps any error to what the client is told. Errors that are not
// the client's are logged and reported without their details.
func errorFor(err error, logger *log.Logger) *apiError {
	var ae *apiError
	var ce *service.ContextError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ce):
		return overflowError(ce, overflowMessages)
	case errors.Is(err, service.ErrBadRequest):
		return badRequest("%s", err.Error())
	case errors.Is(err, engine.ErrBadImages):
		// The routes check images before the engine sees them; what still
		// does not fit the model (the tower refusing a grid) is the
		// request's, said as such.
		e := badRequest("%s", err.Error())
		e.Code = "invalid_image"
		return e
	case errors.Is(err, service.ErrQueueFull):
		return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "queue_full",
			Message: "the model is busy with other requests: retry in a few seconds"}
	case errors.As(err, &tooBig):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Message: fmt.Sprintf("the request body exceeds %d bytes", tooBig.Limit)}
	case errors.Is(err, sample.ErrBadLogits):
		// The model's fault, which every request would meet: said plainly
		// rather than as an internal error.
		logger.Printf("model error: %v", err)
		return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "model_error",
			Message: fmt.Sprintf("the model's output cannot be sampled (%v): its weights or the backend are faulty; `petal doctor` checks the backend", err)}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: statusClientClosed, Type: "server_error", Message: "the request was cancelled"}
	}
	logger.Printf("internal error: %v", err)
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "internal error; see the server log"}
}

// statusClientClosed is nginx's code for a client that went away; it is
// only logged, as the client is no longer there to read it.
const statusClientClosed = 499

// writeError answers with err in the OpenAI shape.
func writeError(w http.ResponseWriter, err error, logger *log.Logger) {
	e := errorFor(err, logger)
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	httpgate.WriteJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}
