package chattemplate

import (
	"errors"
	"testing"
)

func text(role, s string) Message { return Message{Role: role, Content: TextContent(s)} }

func parts(role string, ps ...ContentPart) Message {
	return Message{Role: role, Content: &Content{Parts: ps}}
}

// TestRenderRequestMergesSystem: the conversations of issue 16 that Qwen3.5's
// template refuses ("System message must be at the beginning", "Unexpected
// message role") render as one leading system message holding every system
// and developer text in order, as the template renders it when sent so.
func TestRenderRequestMergesSystem(t *testing.T) {
	tp := loadTemplate(t, "qwen3.5")
	for _, c := range []struct {
		name   string
		in     []Message
		system string
	}{
		{"system then developer", []Message{text("system", "A"), text("developer", "B"), text("user", "Hi")}, "A\n\nB"},
		{"two systems", []Message{text("system", "A"), text("system", "B"), text("user", "Hi")}, "A\n\nB"},
		{"system after the first turn", []Message{text("user", "Hi"), text("assistant", "Yo"), text("system", "Late"), text("user", "More")}, "Late"},
		{"developer alone", []Message{text("developer", "Dev"), text("user", "Hi")}, "Dev"},
		{"system as parts, later", []Message{parts("system", ContentPart{Type: "text", Text: "P1"}, ContentPart{Type: "text", Text: "P2"}), text("user", "Hi"), text("system", "S")}, "P1\nP2\n\nS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tp.Render(t.Context(), Input{Messages: c.in, AddGenerationPrompt: true})
			var raised *RaiseError
			if !errors.As(err, &raised) {
				t.Fatalf("the template itself accepts this (%v); the case tests nothing", err)
			}
			got, err := tp.RenderRequest(t.Context(), Input{Messages: c.in, AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			want := []Message{text("system", c.system)}
			for _, m := range c.in {
				if m.Role != "system" && m.Role != "developer" {
					want = append(want, m)
				}
			}
			exp, err := tp.Render(t.Context(), Input{Messages: want, AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if got != exp {
				t.Errorf("got\n%q\nwant\n%q", got, exp)
			}
		})
	}
}

// TestRenderRequestKeepsWhatTheTemplateTakes: a conversation the template
// renders is rendered as transformers does, byte for byte.
func TestRenderRequestKeepsWhatTheTemplateTakes(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen3.5"} {
		tp := loadTemplate(t, name)
		in := Input{Messages: []Message{text("system", "S"), parts("user", ContentPart{Type: "text", Text: "a"}), text("assistant", "b"), text("user", "c")}, AddGenerationPrompt: true}
		if name == "qwen3" {
			in.Messages[1] = text("user", "a")
			in.Messages = append(in.Messages, text("system", "Late")) // Qwen3 renders late system messages
		}
		want, err := tp.Render(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tp.RenderRequest(t.Context(), in)
		if err != nil || got != want {
			t.Errorf("%s: %v\n%q\nwant\n%q", name, err, got, want)
		}
	}
}

// TestRenderRequestFlattensParts: Qwen3's template concatenates content as a
// string and fails on parts (transformers: TypeError); its text parts are
// given to it as one string, as vLLM does.
func TestRenderRequestFlattensParts(t *testing.T) {
	tp := loadTemplate(t, "qwen3")
	if !tp.format.stringsOnly || loadTemplate(t, "qwen3.5").format.stringsOnly {
		t.Fatalf("content format misdetected: qwen3 strings-only %v", tp.format.stringsOnly)
	}
	in := Input{Messages: []Message{
		parts("system", ContentPart{Type: "text", Text: "S1"}, ContentPart{Type: "text", Text: "S2"}),
		parts("user", ContentPart{Type: "text", Text: "a"}, ContentPart{Type: "input_text", Text: "b"}),
	}, AddGenerationPrompt: true}
	if _, err := tp.Render(t.Context(), in); err == nil {
		t.Fatal("qwen3 renders parts itself; the case tests nothing")
	}
	got, err := tp.RenderRequest(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tp.Render(t.Context(), Input{Messages: []Message{text("system", "S1\nS2"), text("user", "a\nb")}, AddGenerationPrompt: true})
	if err != nil || got != want {
		t.Errorf("%v\n%q\nwant\n%q", err, got, want)
	}

	in.Messages[1].Content.Parts = append(in.Messages[1].Content.Parts, ContentPart{Type: "image_url"})
	if _, err := tp.RenderRequest(t.Context(), in); !errors.Is(err, ErrNotText) || !errors.Is(err, ErrBadInput) {
		t.Errorf("image part: %v", err)
	}
}
