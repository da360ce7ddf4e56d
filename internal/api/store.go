package api

import (
	"container/list"
	"encoding/json"
	"sync"
)

// Bounds of the Responses API's store, which keeps stored responses in
// memory, with their input and output items, for previous_response_id and
// item_reference (the AI SDK's default OpenAI provider refers to its last
// turn's items by id). A conversation a client continues is used again and
// so stays; the least recently used go first, and all at a restart. The
// bounds keep a long-running server's memory flat.
const (
	// MaxStoredResponses is how many responses are kept.
	MaxStoredResponses = 256
	// MaxStoredBytes bounds the JSON of the conversations kept, each
	// counted whole though a continued one shares its items with the
	// response before it (so the memory held is at most this).
	MaxStoredBytes = 256 << 20
	// MaxReferencedBytes bounds the stored items one request's
	// item_references bring in, in all: as much as its body could hold
	// itself. A reference is a few bytes that stands for an item of up to
	// a whole body, so without it one request naming one large item
	// hundreds of thousands of times is parsed item by item into that
	// many copies (500 references to an item of 4 MB took 2 GB and 135 s).
	MaxReferencedBytes = MaxBodyBytes
)

// responseStore keeps stored responses, least recently used first out.
type responseStore struct {
	mu    sync.Mutex
	order *list.List               // of *storedResponse, most recent first
	byID  map[string]*list.Element // response id to its element
	items map[string]storedItem    // item id to the item
	bytes int
}

// storedResponse is one response's conversation: every item up to and
// including its output, as the items of an input list.
type storedResponse struct {
	id    string
	items []json.RawMessage
	bytes int
	own   []string // ids of the items it stored
}

// storedItem is an item that an item_reference may name, with the response
// that stored it last, whose eviction forgets it.
type storedItem struct {
	raw   json.RawMessage
	owner *storedResponse
}

func newResponseStore() *responseStore {
	return &responseStore{order: list.New(), byID: map[string]*list.Element{}, items: map[string]storedItem{}}
}

// conversation returns the items of a stored response, previous ones
// included, and marks it used. A nil store holds nothing.
func (s *responseStore) conversation(id string) ([]json.RawMessage, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	s.order.MoveToFront(e)
	return e.Value.(*storedResponse).items, true
}

// item returns an item by id, from any stored response.
func (s *responseStore) item(id string) (json.RawMessage, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[id]
	return it.raw, ok
}

// put stores a response's conversation; own are the items it added (its
// input and output), which item references may name by their ids.
func (s *responseStore) put(id string, items, own []json.RawMessage) {
	r := &storedResponse{id: id, items: items}
	for _, raw := range items {
		r.bytes += len(raw)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, raw := range own {
		var it struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &it) == nil && it.ID != "" {
			s.items[it.ID] = storedItem{raw: raw, owner: r}
			r.own = append(r.own, it.ID)
		}
	}
	s.byID[id] = s.order.PushFront(r)
	s.bytes += r.bytes
	for s.order.Len() > MaxStoredResponses || s.bytes > MaxStoredBytes {
		s.evict(s.order.Back())
	}
}

func (s *responseStore) evict(e *list.Element) {
	old := s.order.Remove(e).(*storedResponse)
	delete(s.byID, old.id)
	s.bytes -= old.bytes
	for _, id := range old.own {
		if s.items[id].owner == old {
			delete(s.items, id)
		}
	}
}
