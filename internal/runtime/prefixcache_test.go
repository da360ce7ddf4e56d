package runtime

import (
	"io"
	"testing"

	"petal/internal/prefixdisk"
)

func TestManagedPrefixCache(t *testing.T) {
	if managedPrefixCache(nil) != nil {
		t.Error("no store gave a tier")
	}
	dir := t.TempDir()
	store, err := prefixdisk.Open(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	model := prefixdisk.NewModelID("checkpoint", "cpu/kv-f32")
	store.Save(model, []int{1, 2, 3}, func(w io.Writer) error { _, err := w.Write(make([]byte, 100)); return err }, func() {})
	store.Close()
	c := managedPrefixCache(store)
	st := c.PrefixCacheStatus()
	if !st.Enabled || !st.On || st.Dir != dir || st.BudgetBytes != 1<<20 || st.Files != 1 || st.Bytes == 0 {
		t.Errorf("status %+v", st)
	}
	if files, bytes, err := c.ClearPrefixCache(); files != 1 || bytes != st.Bytes || err != nil {
		t.Errorf("cleared %d files, %d bytes: %v", files, bytes, err)
	}
	if st := c.PrefixCacheStatus(); st.Files != 0 || st.Bytes != 0 {
		t.Errorf("after clear %+v", st)
	}
}
