package deepx

import (
	"log"
	"sync"
	"sync/atomic"
)

// guard counts the calls in flight on one handle and lets Close wait for them: host.h forbids
// destroying a handle while another thread uses it, and this is how the binding keeps that
// rule for the goroutines of a program. Acquiring is one compare-and-swap; acquiring twice in
// one call (the same tensor as input and output) is fine.
type guard struct {
	state   atomic.Int64 // calls in flight, plus closedBit once Close started
	closeMu sync.Mutex   // serialises Close with itself
	drained chan struct{}
}

const closedBit = int64(1) << 62

// acquire registers a call in flight; false when the handle is closed or closing.
func (g *guard) acquire() bool {
	for {
		s := g.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if g.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

func (g *guard) release() {
	if g.state.Add(-1) == closedBit {
		close(g.drained) // the last call in flight of a closing handle
	}
}

// close marks the handle closed (later acquires fail) and waits for the calls in flight;
// false when it was already closed, so that Close is idempotent.
func (g *guard) close() bool {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	if g.state.Load()&closedBit != 0 {
		return false
	}
	g.drained = make(chan struct{})
	for {
		s := g.state.Load()
		if g.state.CompareAndSwap(s, s|closedBit) {
			if s != 0 {
				<-g.drained
			}
			return true
		}
	}
}

func (g *guard) closed() bool { return g.state.Load()&closedBit != 0 }

// liveHandles counts the Runtime, Tensor, Attrs and Program values made and not yet closed.
var liveHandles atomic.Int64

// LiveHandles returns how many Runtime, Tensor, Attrs and Program values of this process are
// open: made and neither closed nor reclaimed by the garbage collector. A program that closes
// what it makes returns to the same number; the tests use it as a leak check.
func LiveHandles() int64 { return liveHandles.Load() }

var leakLogger atomic.Value // func(string)

// SetLeakLogger replaces where leak reports go (the standard logger by default). A leak report
// is written when the garbage collector finds a Runtime, Tensor, Attrs or Program that was never
// closed; the finalizer then releases the handle. Pass nil to restore the default.
func SetLeakLogger(fn func(message string)) {
	if fn == nil {
		fn = defaultLeakLogger
	}
	leakLogger.Store(fn)
}

func defaultLeakLogger(message string) { log.Print(message) }

func reportLeak(message string) {
	fn, _ := leakLogger.Load().(func(string))
	if fn == nil {
		fn = defaultLeakLogger
	}
	fn(message)
}
