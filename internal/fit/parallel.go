package fit

// MaxAutoParallel bounds the requests [AutoParallel] lets decode together:
// a chat window, an editor and an agent with one to spare, the clients
// Petal is for; more is asked for by name (petal serve --parallel).
const MaxAutoParallel = 4

// SequenceBytes is what one more sequence decoding beside the others holds
// at r's context: its KV cache and attention scratch grown to the whole
// context, its DeltaNet state, its step activations and, where it drafts,
// what drafting keeps (DraftBytes).
func (r Report) SequenceBytes() int64 {
	return r.KVBytes + r.SessionStateBytes + r.SessionScratchBytes + r.DraftBytes
}

// AutoParallel is how many requests decode together unless told: the most,
// up to [MaxAutoParallel], whose sequences beyond the one the check counts
// fit in what it leaves (r.HeadroomBytes), each at r.Context; at least 1.
// The prefix cache gets what they leave.
func AutoParallel(r Report) int {
	per := r.SequenceBytes()
	if per <= 0 || r.HeadroomBytes < per {
		return 1
	}
	return int(min(MaxAutoParallel, 1+r.HeadroomBytes/per))
}

// ParallelBytes is the memory n requests decoding together take beyond
// the one sequence r counts.
func ParallelBytes(r Report, n int) int64 {
	return int64(max(n-1, 0)) * r.SequenceBytes()
}
