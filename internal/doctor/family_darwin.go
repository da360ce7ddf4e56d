//go:build darwin && arm64

package doctor

import "petal/gpu/metal/mtl"

// newestAppleFamily is the newest family probed, as gpu/metal probes
// (Apple10 is M5).
const newestAppleFamily = 10

// appleFamily reads the default GPU's name and highest Apple family the
// way the Metal driver does before it opens the device, so doctor can tell
// a GPU the driver refuses (a virtual machine's) from a failure to open.
func appleFamily() (name string, family int, err error) {
	mtl.WithPool(func() {
		dev, e := mtl.CreateSystemDefaultDevice()
		if e != nil {
			err = e
			return
		}
		defer dev.Release()
		name = dev.Name()
		for n := newestAppleFamily; n >= 1; n-- {
			if dev.SupportsFamily(mtl.GPUFamilyApple1 + mtl.GPUFamily(n-1)) {
				family = n
				return
			}
		}
	})
	return name, family, err
}
