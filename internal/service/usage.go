package service

import (
	"context"
	"sync"
	"time"
)

// Usage collects the token counts of the generations run under a context,
// for a log line that the layer above writes once its request is answered.
type Usage struct {
	mu                         sync.Mutex
	prompt, cached, completion int
	// disk counts the cached tokens the prefix cache's disk tier gave, read
	// in diskLoad.
	disk     int
	diskLoad time.Duration
	// drafted and accepted count the MTP head's drafts and those that
	// stood.
	drafted, accepted int
}

type usageKey struct{}

// WithUsage returns a context whose generations (Generation.Run with it or
// a context derived from it) add their counts to the returned Usage.
func WithUsage(ctx context.Context) (context.Context, *Usage) {
	u := &Usage{}
	return context.WithValue(ctx, usageKey{}, u), u
}

// Counts are the prompt, cached and reply tokens so far.
func (u *Usage) Counts() (prompt, cached, completion int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.prompt, u.cached, u.completion
}

// Disk is how many of the cached tokens the prefix cache's disk tier
// restored, and how long reading them took.
func (u *Usage) Disk() (tokens int, load time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.disk, u.diskLoad
}

// Speculation is how many drafts of the MTP head were verified and how
// many stood.
func (u *Usage) Speculation() (drafted, accepted int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.drafted, u.accepted
}

// addUsage adds sum's counts to ctx's Usage, if it has one.
func addUsage(ctx context.Context, sum Summary) {
	u, ok := ctx.Value(usageKey{}).(*Usage)
	if !ok {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.prompt += sum.PromptTokens
	u.cached += sum.CachedTokens
	u.completion += sum.CompletionTokens
	u.disk += sum.DiskCachedTokens
	u.diskLoad += sum.DiskLoad
	u.drafted += sum.Drafted
	u.accepted += sum.Accepted
}
