package runtime

import (
	"petal/internal/manage"
	"petal/internal/prefixdisk"
)

// prefixCache shows the prefix cache's disk tier to the Settings screen.
type prefixCache struct{ store *prefixdisk.Store }

// managedPrefixCache is the tier for manage.Options; nil without one, so
// the screen is told there is none.
func managedPrefixCache(store *prefixdisk.Store) manage.PrefixCache {
	if store == nil {
		return nil
	}
	return prefixCache{store}
}

func (p prefixCache) PrefixCacheStatus() manage.PrefixCacheStatus {
	files, bytes := p.store.Usage()
	return manage.PrefixCacheStatus{Enabled: true, Dir: p.store.Dir(), On: p.store.On(), BudgetBytes: p.store.Budget(), Files: files, Bytes: bytes}
}

func (p prefixCache) ClearPrefixCache() (int, int64, error) { return p.store.Clear() }
