package cli

import (
	"fmt"
	"io"

	"petal/internal/models"
)

// resolveModel returns dir when one was named; otherwise the installed
// real model, else the demo model built into the binary, and says on w
// which one it chose.
func resolveModel(dir string, w io.Writer) (string, error) {
	if dir != "" {
		return dir, nil
	}
	d, isDemo, err := models.DefaultModelDir()
	if err != nil {
		return "", err
	}
	if !isDemo {
		fmt.Fprintf(w, "using the installed model in %s\n", d)
		return d, nil
	}
	fmt.Fprintf(w, "no model installed in %s: using the built-in demo model, a small toy trained on templated chats (names, capitals, sums, short poems) (put %s there for the real one)\n",
		models.Root(), models.RealModelName)
	return d, nil
}
