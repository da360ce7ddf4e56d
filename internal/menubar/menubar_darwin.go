//go:build darwin

package menubar

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// Item is one entry of the menu; an empty Title is a separator.
type Item struct {
	Title string
	// Key is the key equivalent shown beside the title ("," for Settings).
	Key    string
	Action func()
}

// StatusItem is the installed menu-bar item.
type StatusItem struct {
	item  objc.ID
	title string
	// entries are the menu's NSMenuItems, separators included, in the
	// order Install was given them.
	entries []objc.ID
}

// Paths of the system libraries the package loads.
const (
	appKitPath    = "/System/Library/Frameworks/AppKit.framework/AppKit"
	libSystemPath = "/usr/lib/libSystem.B.dylib"
)

// NSVariableStatusItemLength asks for an item as wide as its title.
const nsVariableStatusItemLength = -1.0

// Activation policies (NSApplicationActivationPolicy).
const (
	activationPolicyRegular   = 0
	activationPolicyAccessory = 1
)

// actionClassName is the Objective-C class whose instance receives menu
// clicks and runs the Item's Action by the clicked item's tag.
const actionClassName = "PetalMenuTarget"

var (
	sel_alloc                      = objc.RegisterName("alloc")
	sel_init                       = objc.RegisterName("init")
	sel_retain                     = objc.RegisterName("retain")
	sel_sharedApplication          = objc.RegisterName("sharedApplication")
	sel_setActivationPolicy        = objc.RegisterName("setActivationPolicy:")
	sel_activate                   = objc.RegisterName("activate")
	sel_unhide                     = objc.RegisterName("unhide:")
	sel_respondsToSelector         = objc.RegisterName("respondsToSelector:")
	sel_defaultCenter              = objc.RegisterName("defaultCenter")
	sel_addObserver                = objc.RegisterName("addObserver:selector:name:object:")
	sel_petalAppDidHide            = objc.RegisterName("petalAppDidHide:")
	sel_petalAppDidUnhide          = objc.RegisterName("petalAppDidUnhide:")
	sel_systemStatusBar            = objc.RegisterName("systemStatusBar")
	sel_statusItemWithLength       = objc.RegisterName("statusItemWithLength:")
	sel_button                     = objc.RegisterName("button")
	sel_setTitle                   = objc.RegisterName("setTitle:")
	sel_setMenu                    = objc.RegisterName("setMenu:")
	sel_initWithTitle              = objc.RegisterName("initWithTitle:")
	sel_initWithTitle_action_keyEq = objc.RegisterName("initWithTitle:action:keyEquivalent:")
	sel_addItem                    = objc.RegisterName("addItem:")
	sel_separatorItem              = objc.RegisterName("separatorItem")
	sel_setTarget                  = objc.RegisterName("setTarget:")
	sel_setTag                     = objc.RegisterName("setTag:")
	sel_tag                        = objc.RegisterName("tag")
	sel_stringWithUTF8String       = objc.RegisterName("stringWithUTF8String:")
	sel_petalMenuAction            = objc.RegisterName("petalMenuAction:")
	sel_setAutoenablesItems        = objc.RegisterName("setAutoenablesItems:")
	sel_dataWithBytes_length       = objc.RegisterName("dataWithBytes:length:")
	sel_initWithData               = objc.RegisterName("initWithData:")
	sel_setSize                    = objc.RegisterName("setSize:")
	sel_setTemplate                = objc.RegisterName("setTemplate:")
	sel_setAccessibilityDesc       = objc.RegisterName("setAccessibilityDescription:")
	sel_setImage                   = objc.RegisterName("setImage:")
	sel_setToolTip                 = objc.RegisterName("setToolTip:")
	sel_release                    = objc.RegisterName("release")
	sel_window                     = objc.RegisterName("window")
	sel_frame                      = objc.RegisterName("frame")
	sel_screen                     = objc.RegisterName("screen")
	sel_visibleFrame               = objc.RegisterName("visibleFrame")
	sel_windows                    = objc.RegisterName("windows")
	sel_count                      = objc.RegisterName("count")
	sel_objectAtIndex              = objc.RegisterName("objectAtIndex:")
	sel_isKindOfClass              = objc.RegisterName("isKindOfClass:")
	sel_setFrameTopLeftPoint       = objc.RegisterName("setFrameTopLeftPoint:")
)

// nsSize is AppKit's NSSize, passed by value (CGFloat is float64 on every
// 64-bit Mac).
type nsSize struct{ W, H float64 }

var (
	loadOnce sync.Once
	loadErr  error

	dispatchAsyncF func(queue, context, work uintptr)
	mainQueue      uintptr
	// runMain is the one C callback the package makes (purego's callbacks
	// are a fixed, never-freed pool); it runs the queued functions.
	runMain uintptr

	queueMu sync.Mutex
	queued  []func()

	actionsMu sync.Mutex
	actions   []func()
	target    objc.ID

	// appKit is AppKit's handle, for its exported constants.
	appKit uintptr
)

// load binds AppKit and libdispatch and registers the action class once.
func load() error {
	loadOnce.Do(func() {
		var err error
		if appKit, err = purego.Dlopen(appKitPath, purego.RTLD_GLOBAL|purego.RTLD_NOW); err != nil {
			loadErr = fmt.Errorf("menubar: loading AppKit: %w", err)
			return
		}
		sys, err := purego.Dlopen(libSystemPath, purego.RTLD_GLOBAL|purego.RTLD_NOW)
		if err != nil {
			loadErr = fmt.Errorf("menubar: loading libSystem: %w", err)
			return
		}
		purego.RegisterLibFunc(&dispatchAsyncF, sys, "dispatch_async_f")
		// dispatch_get_main_queue() is a macro for &_dispatch_main_q.
		if mainQueue, err = purego.Dlsym(sys, "_dispatch_main_q"); err != nil {
			loadErr = fmt.Errorf("menubar: finding the main queue: %w", err)
			return
		}
		runMain = purego.NewCallback(func(uintptr) {
			queueMu.Lock()
			fns := queued
			queued = nil
			queueMu.Unlock()
			for _, fn := range fns {
				fn()
			}
		})
		class, err := objc.RegisterClass(actionClassName, objc.GetClass("NSObject"), nil, nil, []objc.MethodDef{{
			Cmd: sel_petalAppDidHide,
			Fn:  func(objc.ID, objc.SEL, objc.ID) { setPolicy(false) },
		}, {
			Cmd: sel_petalAppDidUnhide,
			Fn:  func(objc.ID, objc.SEL, objc.ID) { setPolicy(true) },
		}, {
			Cmd: sel_petalMenuAction,
			Fn: func(_ objc.ID, _ objc.SEL, sender objc.ID) {
				tag := objc.Send[int](sender, sel_tag)
				actionsMu.Lock()
				var fn func()
				if tag >= 0 && tag < len(actions) {
					fn = actions[tag]
				}
				actionsMu.Unlock()
				if fn != nil {
					go fn() // never block the main thread on an action
				}
			},
		}})
		if err != nil {
			loadErr = fmt.Errorf("menubar: %w", err)
			return
		}
		target = objc.ID(class).Send(sel_alloc).Send(sel_init)
	})
	return loadErr
}

// onMain runs fn on the main thread, after the calls queued before it.
func onMain(fn func()) error {
	if err := load(); err != nil {
		return err
	}
	queueMu.Lock()
	queued = append(queued, fn)
	queueMu.Unlock()
	dispatchAsyncF(mainQueue, 0, runMain)
	return nil
}

func nsString(s string) objc.ID {
	return objc.ID(objc.GetClass("NSString")).Send(sel_stringWithUTF8String, s)
}

// nsImage makes a template NSImage of a checked icon, IconPoints square,
// described by title for VoiceOver; the caller owns it.
func nsImage(icon []byte, title string) objc.ID {
	data := objc.ID(objc.GetClass("NSData")).Send(sel_dataWithBytes_length, unsafe.Pointer(&icon[0]), len(icon))
	img := objc.ID(objc.GetClass("NSImage")).Send(sel_alloc).Send(sel_initWithData, data)
	if img == 0 {
		return 0
	}
	img.Send(sel_setSize, nsSize{IconPoints, IconPoints})
	img.Send(sel_setTemplate, true)
	img.Send(sel_setAccessibilityDesc, nsString(title))
	return img
}

// showIcon puts icon on the item's button in place of any text; the
// button keeps the image, so this reference is released.
func (s *StatusItem) showIcon(icon []byte) {
	img := nsImage(icon, s.title)
	if img == 0 {
		return // CheckIcon accepted it, so AppKit cannot fail to read it
	}
	button := s.item.Send(sel_button)
	button.Send(sel_setImage, img)
	button.Send(sel_setTitle, nsString(""))
	img.Send(sel_release)
}

// Install adds an item to the menu bar showing icon (see CheckIcon), with
// title as its tooltip and spoken name, and menu items. It returns once
// the item exists.
func Install(title string, icon []byte, items []Item) (*StatusItem, error) {
	if title == "" {
		return nil, errors.New("menubar: an item needs a title")
	}
	if err := CheckIcon(icon); err != nil {
		return nil, err
	}
	s := &StatusItem{title: title}
	done := make(chan struct{})
	err := onMain(func() {
		defer close(done)
		bar := objc.ID(objc.GetClass("NSStatusBar")).Send(sel_systemStatusBar)
		s.item = bar.Send(sel_statusItemWithLength, nsVariableStatusItemLength).Send(sel_retain)
		s.showIcon(icon)
		s.item.Send(sel_button).Send(sel_setToolTip, nsString(title))

		menu := objc.ID(objc.GetClass("NSMenu")).Send(sel_alloc).Send(sel_initWithTitle, nsString(title))
		menu.Send(sel_setAutoenablesItems, false)
		actionsMu.Lock()
		for _, it := range items {
			if it.Title == "" {
				sep := objc.ID(objc.GetClass("NSMenuItem")).Send(sel_separatorItem)
				menu.Send(sel_addItem, sep)
				s.entries = append(s.entries, sep)
				continue
			}
			mi := objc.ID(objc.GetClass("NSMenuItem")).Send(sel_alloc).
				Send(sel_initWithTitle_action_keyEq, nsString(it.Title), sel_petalMenuAction, nsString(it.Key))
			mi.Send(sel_setTarget, target)
			mi.Send(sel_setTag, len(actions))
			actions = append(actions, it.Action)
			menu.Send(sel_addItem, mi)
			s.entries = append(s.entries, mi)
		}
		actionsMu.Unlock()
		s.item.Send(sel_setMenu, menu)
	})
	if err != nil {
		return nil, err
	}
	<-done
	return s, nil
}

// SetItemTitle changes the title of the menu's i-th item (counted as
// Install was given them), such as a line that names the model.
func (s *StatusItem) SetItemTitle(i int, title string) error {
	if i < 0 || i >= len(s.entries) || title == "" {
		return fmt.Errorf("menubar: no menu item %d to title %q (the menu has %d)", i, title, len(s.entries))
	}
	return onMain(func() { s.entries[i].Send(sel_setTitle, nsString(title)) })
}

// SetIcon changes the icon shown in the menu bar (the model's state).
func (s *StatusItem) SetIcon(icon []byte) error {
	if err := CheckIcon(icon); err != nil {
		return err
	}
	return onMain(func() { s.showIcon(icon) })
}

// PlaceUnder moves the app's windows of the Objective-C class windowClass
// (the one a toolkit makes its windows with) to just under the item:
// centred on it and kept on its screen, as a menu opens. It is queued on
// the main thread like every call, so a window shown right after it opens
// in place.
func (s *StatusItem) PlaceUnder(windowClass string) error {
	class := objc.GetClass(windowClass)
	if class == 0 {
		return fmt.Errorf("menubar: no Objective-C class %q", windowClass)
	}
	return onMain(func() {
		bar := s.item.Send(sel_button).Send(sel_window)
		screen := bar.Send(sel_screen)
		if bar == 0 || screen == 0 {
			return // the item is hidden (the bar is full): leave the windows where they are
		}
		item := objc.Send[Rect](bar, sel_frame)
		visible := objc.Send[Rect](screen, sel_visibleFrame)
		windows := objc.ID(objc.GetClass("NSApplication")).Send(sel_sharedApplication).Send(sel_windows)
		for i := range objc.Send[uint](windows, sel_count) {
			w := windows.Send(sel_objectAtIndex, i)
			if !objc.Send[bool](w, sel_isKindOfClass, class) {
				continue
			}
			frame := objc.Send[Rect](w, sel_frame)
			w.Send(sel_setFrameTopLeftPoint, placeUnder(item, frame.W, visible))
		}
	})
}

// ShowInDock makes Petal a regular app with a Dock icon, brought to the
// front with its hidden windows, or an accessory that lives only in the
// menu bar.
func ShowInDock(show bool) error {
	return onMain(func() {
		setPolicy(show)
		if !show {
			return
		}
		app := objc.ID(objc.GetClass("NSApplication")).Send(sel_sharedApplication)
		app.Send(sel_unhide, objc.ID(0))
		// activate replaces activateIgnoringOtherApps:, deprecated in
		// macOS 14, which is what Petal needs; an older system keeps the
		// app where it is rather than raising an exception.
		if objc.Send[bool](app, sel_respondsToSelector, sel_activate) {
			app.Send(sel_activate)
		}
	})
}

// setPolicy switches the activation policy, on the main thread.
func setPolicy(dock bool) {
	policy := activationPolicyAccessory
	if dock {
		policy = activationPolicyRegular
	}
	objc.ID(objc.GetClass("NSApplication")).Send(sel_sharedApplication).Send(sel_setActivationPolicy, policy)
}

// DockFollowsWindow keeps the Dock icon shown exactly while the app is not
// hidden. A toolkit that hides the app when its window is closed, as Wails
// does with HideWindowOnClose ([NSApp hide:] in its window delegate's
// windowShouldClose:, which then tells the Go side nothing), thereby also
// takes the icon out of the Dock; unhiding the app, as opening the window
// does, puts it back.
func DockFollowsWindow() error {
	if err := load(); err != nil {
		return err
	}
	names := map[string]objc.SEL{
		"NSApplicationDidHideNotification":   sel_petalAppDidHide,
		"NSApplicationDidUnhideNotification": sel_petalAppDidUnhide,
	}
	observe := map[objc.ID]objc.SEL{}
	for name, sel := range names {
		addr, err := purego.Dlsym(appKit, name)
		if err != nil {
			return fmt.Errorf("menubar: %w", err)
		}
		// The symbol is a variable holding the NSString of the name.
		observe[**(**objc.ID)(unsafe.Pointer(&addr))] = sel
	}
	return onMain(func() {
		app := objc.ID(objc.GetClass("NSApplication")).Send(sel_sharedApplication)
		center := objc.ID(objc.GetClass("NSNotificationCenter")).Send(sel_defaultCenter)
		for name, sel := range observe {
			center.Send(sel_addObserver, target, sel, name, app)
		}
	})
}
