package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestLogitBias: logit_bias was ignored (issue 30 item 10). On the tiny-a
// fixture (random weights, logits of a few units) a bias of 100 on "A"
// (id 65: one token per byte) makes every pick "A", greedy or sampled, on
// the CPU backend and on the GPU simulator, whose device sampler takes the
// bias, so no logits are read back there; a bias out of range or on no
// token is a 400.
func TestLogitBias(t *testing.T) {
	for _, name := range []string{"cpu", "sim"} {
		t.Run(name, func(t *testing.T) {
			svc := fixtureService(t, name, "tiny-a", service.Options{Name: "tiny-a"})
			srv := httptest.NewServer(New(svc, Options{}))
			defer srv.Close()
			reply := func(extra string) (int, string) {
				resp, body := do(t, post(t, srv.URL+"/v1/completions", `{"prompt":"Hello","max_tokens":4`+extra+`}`))
				var c completion
				if json.Unmarshal([]byte(body), &c) != nil || len(c.Choices) == 0 {
					return resp.StatusCode, body
				}
				return resp.StatusCode, c.Choices[0].Text
			}
			if status, text := reply(`,"temperature":0`); status != 200 || text == "AAAA" {
				t.Fatalf("unbiased: %d %q", status, text)
			}
			for _, extra := range []string{`,"temperature":0,"logit_bias":{"65":100}`, `,"temperature":1,"seed":3,"logit_bias":{"65":100,"66":-100}`} {
				if status, text := reply(extra); status != 200 || text != "AAAA" {
					t.Errorf("%s: %d %q, want AAAA", extra, status, text)
				}
			}
			if b := svc.Metrics().LogitsReadbackBytes; name == "sim" && b != 0 {
				t.Errorf("the sim read %d bytes of logits back: a biased request was picked on the host", b)
			}
			for extra, words := range map[string]string{
				`,"logit_bias":{"A":1}`:    `field "logit_bias": key "A" must be an integer`,
				`,"logit_bias":{"65":101}`: "logit_bias of token 65 is 101, not in [-100, 100]",
				`,"logit_bias":{"9999":1}`: "logit_bias: 9999 is no token id of this model",
				`,"logit_bias":{"-1":1}`:   "logit_bias: -1 is no token id of this model",
				`,"logit_bias":[1]`:        `field "logit_bias"`,
			} {
				status, body := reply(extra)
				var e struct{ Error apiError }
				if json.Unmarshal([]byte(body), &e); status != 400 || !strings.Contains(e.Error.Message, words) {
					t.Errorf("%s: %d %s, want a 400 saying %q", extra, status, body, words)
				}
			}
		})
	}
}
