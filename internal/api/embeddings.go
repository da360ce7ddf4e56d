package api

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"petal/internal/httpgate"
	"petal/internal/service"
)

// Embeddings from the loaded model (service.Embed says how they are
// pooled), in OpenAI's shape on /v1/embeddings and Ollama's on /api/embed
// and /api/embeddings.

// embedInput reads OpenAI's and Ollama's "input": a string, a list of
// strings, a list of token ids or a list of such lists.
func embedInput(raw json.RawMessage, req *service.EmbedRequest) error {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		req.Texts = []string{one}
		return nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		req.Texts = texts
		return nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		req.Tokens = [][]int{ids}
		return nil
	}
	var lists [][]int
	if json.Unmarshal(raw, &lists) == nil {
		req.Tokens = lists
		return nil
	}
	return badParam("input", "input must be a string, a list of strings, a list of token ids or a list of such lists")
}

type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type (
	embeddingList struct {
		Object string          `json:"object"`
		Data   []embeddingItem `json:"data"`
		Model  string          `json:"model"`
		Usage  embeddingUsage  `json:"usage"`
	}
	embeddingItem struct {
		Object string `json:"object"`
		Index  int    `json:"index"`
		// Embedding is a list of floats, or their little-endian float32
		// bytes in base64.
		Embedding any `json:"embedding"`
	}
	embeddingUsage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
)

// checkDimensions refuses a size other than the model's: its embeddings
// are its hidden states, not trained to be cut shorter.
func (s *Server) checkDimensions(d *int) error {
	if h := s.svc.EmbeddingSize(); d != nil && *d != h {
		return badParam("dimensions", "this model's embeddings have %d dimensions, not %d", h, *d)
	}
	return nil
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) error {
	var body embeddingsRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	req := &service.EmbedRequest{Client: clientOf(r)}
	if err := embedInput(body.Input, req); err != nil {
		return err
	}
	if body.EncodingFormat != "" && body.EncodingFormat != "float" && body.EncodingFormat != "base64" {
		return badParam("encoding_format", "encoding_format must be float or base64, not %q", body.EncodingFormat)
	}
	if err := s.checkDimensions(body.Dimensions); err != nil {
		return err
	}
	e, err := s.svc.Embed(r.Context(), req)
	if err != nil {
		return overflow(err, overflowEmbed)
	}
	out := embeddingList{Object: "list", Model: s.svc.Info().Name, Usage: embeddingUsage{PromptTokens: e.Tokens, TotalTokens: e.Tokens}}
	for i, v := range e.Vectors {
		item := embeddingItem{Object: "embedding", Index: i, Embedding: v}
		if body.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			item.Embedding = base64.StdEncoding.EncodeToString(b)
		}
		out.Data = append(out.Data, item)
	}
	httpgate.WriteJSON(w, http.StatusOK, out)
	return nil
}

// ollamaEmbed answers /api/embed: "input" in, "embeddings" out; an input
// past the context is cut to it unless truncate is false.
func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	var body struct {
		Model      string          `json:"model"`
		Input      json.RawMessage `json:"input"`
		Truncate   *bool           `json:"truncate"`
		Dimensions *int            `json:"dimensions"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	req := &service.EmbedRequest{Client: clientOf(r), Truncate: body.Truncate == nil || *body.Truncate}
	if err := embedInput(body.Input, req); err != nil {
		return err
	}
	if err := s.checkDimensions(body.Dimensions); err != nil {
		return err
	}
	e, err := s.svc.Embed(r.Context(), req)
	if err != nil {
		return overflow(err, overflowEmbed)
	}
	httpgate.WriteJSON(w, http.StatusOK, map[string]any{"model": s.svc.Info().Name, "embeddings": e.Vectors,
		"total_duration": time.Since(start).Nanoseconds(), "load_duration": 0, "prompt_eval_count": e.Tokens})
	return nil
}

// ollamaEmbeddings answers the older /api/embeddings: one "prompt", one
// "embedding" (empty for an empty prompt, as Ollama answers it).
func (s *Server) ollamaEmbeddings(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	vector := []float32{}
	if body.Prompt != "" {
		e, err := s.svc.Embed(r.Context(), &service.EmbedRequest{Texts: []string{body.Prompt}, Truncate: true, Client: clientOf(r)})
		if err != nil {
			return err
		}
		vector = e.Vectors[0]
	}
	httpgate.WriteJSON(w, http.StatusOK, map[string]any{"embedding": vector})
	return nil
}
