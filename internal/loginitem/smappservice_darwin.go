//go:build darwin

package loginitem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

const serviceManagementPath = "/System/Library/Frameworks/ServiceManagement.framework/ServiceManagement"

var (
	sel_new                      = objc.RegisterName("new")
	sel_drain                    = objc.RegisterName("drain")
	sel_mainAppService           = objc.RegisterName("mainAppService")
	sel_status                   = objc.RegisterName("status")
	sel_registerAndReturnError   = objc.RegisterName("registerAndReturnError:")
	sel_unregisterAndReturnError = objc.RegisterName("unregisterAndReturnError:")
	sel_localizedDescription     = objc.RegisterName("localizedDescription")
	sel_UTF8String               = objc.RegisterName("UTF8String")
)

var (
	loadOnce sync.Once
	loadErr  error
	// appService is the SMAppService class.
	appService objc.Class
	// setMu keeps changes to the login item one at a time.
	setMu sync.Mutex
)

// load binds ServiceManagement once.
func load() error {
	loadOnce.Do(func() {
		if _, err := purego.Dlopen(serviceManagementPath, purego.RTLD_GLOBAL|purego.RTLD_NOW); err != nil {
			loadErr = fmt.Errorf("start at login: loading ServiceManagement: %w", err)
			return
		}
		if appService = objc.GetClass("SMAppService"); appService == 0 {
			loadErr = errors.New("start at login needs macOS 13 or later (no SMAppService)")
		}
	})
	return loadErr
}

// Set registers Petal.app as a login item, or unregisters it. Outside an
// app bundle turning it off does nothing, as nothing can have been
// registered from there.
func Set(enabled bool) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start at login: %w", err)
	}
	// A path through a symbolic link, such as /Volumes/Macintosh HD (the
	// startup disk), is judged by where it leads.
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	app, err := AppBundle(exe)
	if err != nil {
		if !enabled {
			return nil
		}
		return err
	}
	if err := load(); err != nil {
		return err
	}
	setMu.Lock()
	defer setMu.Unlock()
	// The pool that takes the autoreleased NSError must be drained on the
	// thread that made it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := objc.ID(objc.GetClass("NSAutoreleasePool")).Send(sel_new)
	defer pool.Send(sel_drain)

	svc := objc.ID(appService).Send(sel_mainAppService)
	st := Status(objc.Send[int](svc, sel_status))
	switch plan(enabled, st) {
	case register:
		if err := call(svc, sel_registerAndReturnError); err != nil {
			return fmt.Errorf("start at login: registering %s: %w", app, err)
		}
	case unregister:
		if err := call(svc, sel_unregisterAndReturnError); err != nil {
			return fmt.Errorf("start at login: unregistering %s: %w", app, err)
		}
	}
	if st = Status(objc.Send[int](svc, sel_status)); enabled && st == RequiresApproval {
		return errors.New("start at login: allow Petal in System Settings > General > Login Items")
	}
	return nil
}

// call sends svc a (BOOL)...AndReturnError:(NSError **) message and gives
// the NSError's description when it returns NO.
func call(svc objc.ID, sel objc.SEL) error {
	var nserr objc.ID
	if objc.Send[bool](svc, sel, unsafe.Pointer(&nserr)) {
		return nil
	}
	if nserr == 0 {
		return errors.New("failed without a reason")
	}
	return errors.New(objc.Send[string](nserr.Send(sel_localizedDescription), sel_UTF8String))
}
