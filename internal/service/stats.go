package service

import (
	"sync"
	"sync/atomic"
	"time"

	"petal/engine"
	"petal/internal/prefixdisk"
)

// TTFTBuckets are the upper bounds, in seconds, of the time-to-first-token
// histogram.
var TTFTBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// stats are the service's running counters.
type stats struct {
	started                     time.Time
	completed, failed, rejected atomic.Int64
	prompt, cached, generated   atomic.Int64
	decodeNanos                 atomic.Int64
	readbackBytes, hostNanos    atomic.Int64
	// drafted and accepted count the MTP head's drafts verified and those
	// that stood.
	drafted, accepted atomic.Int64
	// steps and stepRows count the batched steps and their rows; batch is
	// how many replies the latest step decoded.
	steps, stepRows, batch atomic.Int64
	// queueWaitNanos sums the time granted requests waited in the queue,
	// queueWaits counts them.
	queueWaitNanos, queueWaits atomic.Int64
	mu                         sync.Mutex
	ttftCounts                 []int64 // per bucket, not cumulative; the last counts the rest
	ttftSum                    float64
	ttftCount                  int64
	lastTokensPerSecond        float64
}

func (s *stats) observeTTFT(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ttftCounts == nil {
		s.ttftCounts = make([]int64, len(TTFTBuckets)+1)
	}
	sec := d.Seconds()
	i := 0
	for i < len(TTFTBuckets) && sec > TTFTBuckets[i] {
		i++
	}
	s.ttftCounts[i]++
	s.ttftSum += sec
	s.ttftCount++
}

func (s *stats) observeDecode(tokens int, d time.Duration) {
	s.generated.Add(int64(tokens))
	s.decodeNanos.Add(int64(d))
	if d > 0 && tokens > 0 {
		s.mu.Lock()
		s.lastTokensPerSecond = float64(tokens) / d.Seconds()
		s.mu.Unlock()
	}
}

// observeLoop counts what the decode loop did on the host.
func (s *stats) observeLoop(st engine.DecodeStats) {
	s.readbackBytes.Add(st.LogitsReadBytes)
	s.hostNanos.Add(int64(st.HostTime))
	s.drafted.Add(int64(st.Drafted))
	s.accepted.Add(int64(st.Accepted))
}

// observeStep counts a batched step of rows rows, decoding of which
// decoded a reply's next token.
func (s *stats) observeStep(rows, decoding int) {
	s.steps.Add(1)
	s.stepRows.Add(int64(rows))
	s.batch.Store(int64(decoding))
}

func (s *stats) observeQueueWait(d time.Duration) {
	s.queueWaitNanos.Add(int64(d))
	s.queueWaits.Add(1)
}

// Metrics is a snapshot of the service's counters.
type Metrics struct {
	Completed, Failed, Rejected int64
	// Waiting is the queue depth; Running is how many requests hold the
	// engine, at most Parallel.
	Waiting, Running, Parallel int
	// Batch is how many replies the latest batched step decoded together;
	// Steps and StepRows count the batched steps and the sequences' rows
	// in them (0 while requests run one at a time).
	Batch           int
	Steps, StepRows int64
	// QueueWaitSeconds sums the time the QueueWaits requests that got the
	// engine waited for it.
	QueueWaitSeconds                             float64
	QueueWaits                                   int64
	PromptTokens, CachedTokens, CompletionTokens int64
	// DecodeSeconds is the time spent decoding, over which CompletionTokens
	// were made.
	DecodeSeconds float64
	// LastTokensPerSecond is the decode speed of the latest generation.
	LastTokensPerSecond float64
	// LogitsReadbackBytes counts logits copied from the device to the
	// host: zero while every request decodes on the device.
	LogitsReadbackBytes int64
	// DecodeHostSeconds is the host time spent preparing decode steps
	// (engine.DecodeStats.HostTime).
	DecodeHostSeconds float64
	// SpecDrafted counts the MTP head's drafts verified, SpecAccepted
	// those that stood: a verify step yields 1 + SpecAccepted/SpecDrafted
	// tokens on average.
	SpecDrafted, SpecAccepted int64
	// TTFTCumulative[i] counts first tokens within TTFTBuckets[i] seconds;
	// TTFTCount counts all of them.
	TTFTCumulative []int64
	TTFTSum        float64
	TTFTCount      int64
	CacheEntries   int
	CacheBytes     int64
	// CacheMemoryHits and CacheDiskHits count the requests whose prompt
	// start came from each tier of the prefix cache.
	CacheMemoryHits, CacheDiskHits int64
	// Disk is the disk tier's state; nil without one.
	Disk *prefixdisk.Stats
}

// QueueChanged returns a channel closed when a request next joins or
// leaves the queue, so that a caller waiting for the queue's Metrics
// (Waiting, Running) to reach a state reads them again at each change
// instead of polling.
func (s *Service) QueueChanged() <-chan struct{} { return s.queue.nextChange() }

// Metrics returns the service's counters. It never waits for a generation.
func (s *Service) Metrics() Metrics {
	m := Metrics{
		Completed: s.stats.completed.Load(), Failed: s.stats.failed.Load(), Rejected: s.stats.rejected.Load(),
		PromptTokens: s.stats.prompt.Load(), CachedTokens: s.stats.cached.Load(), CompletionTokens: s.stats.generated.Load(),
		DecodeSeconds:       time.Duration(s.stats.decodeNanos.Load()).Seconds(),
		LogitsReadbackBytes: s.stats.readbackBytes.Load(),
		DecodeHostSeconds:   time.Duration(s.stats.hostNanos.Load()).Seconds(),
		SpecDrafted:         s.stats.drafted.Load(), SpecAccepted: s.stats.accepted.Load(),
	}
	m.Waiting, m.Running = s.queue.depth()
	m.Parallel = s.parallel
	m.Batch = int(s.stats.batch.Load())
	m.Steps, m.StepRows = s.stats.steps.Load(), s.stats.stepRows.Load()
	m.QueueWaitSeconds = time.Duration(s.stats.queueWaitNanos.Load()).Seconds()
	m.QueueWaits = s.stats.queueWaits.Load()
	m.CacheEntries, m.CacheBytes = s.cache.usage()
	m.CacheMemoryHits, m.CacheDiskHits = s.memoryHits.Load(), s.diskHits.Load()
	if s.disk != nil {
		st := s.disk.store.Stats()
		m.Disk = &st
	}
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	m.LastTokensPerSecond = s.stats.lastTokensPerSecond
	m.TTFTSum, m.TTFTCount = s.stats.ttftSum, s.stats.ttftCount
	m.TTFTCumulative = make([]int64, len(TTFTBuckets))
	var acc int64
	for i := range TTFTBuckets {
		if s.stats.ttftCounts != nil {
			acc += s.stats.ttftCounts[i]
		}
		m.TTFTCumulative[i] = acc
	}
	return m
}
