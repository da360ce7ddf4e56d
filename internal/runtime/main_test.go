package runtime

import (
	"testing"

	"petal/internal/leakcheck"
)

// TestMain fails the tests when they leave a goroutine running.
func TestMain(m *testing.M) { leakcheck.Main(m) }
