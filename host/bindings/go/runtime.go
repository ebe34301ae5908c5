package deepx

// #include "deepxgo.h"
import "C"

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"
)

// HeaderABIVersion is the packed ABI version (major << 16 | minor) of the headers this
// package was compiled against (DX_ABI_VERSION_PACKED).
const HeaderABIVersion uint32 = C.DX_ABI_VERSION_PACKED

// ABIVersion is the packed ABI version of the host library actually loaded (dx_abi_version()).
// Its major must equal HeaderABIVersion's; its minor may be older or newer.
func ABIVersion() uint32 { return uint32(C.dx_abi_version()) }

// HasConnect reports whether the loaded host library offers dx_runtime_connect() (ABI 1.1),
// which Connect needs.
func HasConnect() bool { return C.deepxgo_has_connect() != 0 }

// Options are the options of NewRuntime (dx_runtime_options_t). The zero value (or a nil
// *Options) is the default.
type Options struct {
	// PluginPath: colon-separated directories searched for plugins named by name, before
	// DEEPX_PLUGIN_PATH.
	PluginPath string
	// CertificatePath: colon-separated directories searched for plugin certificates.
	CertificatePath string
	// IgnoreEnv: do not look at DEEPX_PLUGIN_PATH and DEEPX_REQUIRE_CERTIFIED.
	IgnoreEnv bool
	// RequireCertified: trust-gated dispatch (only certified kernels run).
	RequireCertified bool
}

// ConnectOptions are the options of Connect (dx_connect_options_t). Zero fields mean the
// host's defaults (5 s to connect, 60 s per call).
type ConnectOptions struct {
	ConnectTimeout time.Duration
	RequestTimeout time.Duration
	ClientName     string // a name for the daemon's logs
}

// Runtime is a deepx runtime: in-process (NewRuntime) or connected to a deepxd daemon
// (Connect); every other method is the same for both.
//
// All methods may be called from many goroutines at once. Close waits for the calls in
// flight on the runtime and makes later ones fail with StatusFailedPrecondition (host.h
// forbids dx_runtime_destroy() to overlap other calls on the runtime; the binding enforces
// it). Tensors of a closed runtime stay usable until they are closed themselves.
type Runtime struct {
	h      *C.dx_runtime_t
	g      guard
	remote bool
}

// NewRuntime creates an in-process runtime with no plugins loaded (dx_runtime_create()).
func NewRuntime(opts *Options) (*Runtime, error) {
	const call = "NewRuntime"
	if err := checkABI(call); err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	var flags C.uint64_t
	if o.IgnoreEnv {
		flags |= C.DX_RUNTIME_FLAG_IGNORE_ENV
	}
	if o.RequireCertified {
		flags |= C.DX_RUNTIME_FLAG_REQUIRE_CERTIFIED
	}
	pluginPath, certPath := cStringOrNil(o.PluginPath), cStringOrNil(o.CertificatePath)
	defer C.free(unsafe.Pointer(pluginPath))
	defer C.free(unsafe.Pointer(certPath))
	var h *C.dx_runtime_t
	if err := takeError(call, C.deepxgo_runtime_create(flags, pluginPath, certPath, &h)); err != nil {
		return nil, err
	}
	return newRuntime(h, false), nil
}

// Connect returns a runtime whose calls go to the deepxd daemon listening at address
// ("unix:PATH" or a bare socket path) (dx_runtime_connect()). The plugins are the daemon's:
// LoadPlugin is refused with StatusUnsupported, as are DeviceStats. A call on a runtime whose
// daemon went away fails with StatusUnavailable.
func Connect(address string, opts *ConnectOptions) (*Runtime, error) {
	const call = "Connect"
	if err := checkABI(call); err != nil {
		return nil, err
	}
	var o ConnectOptions
	if opts != nil {
		o = *opts
	}
	addr := C.CString(address)
	defer C.free(unsafe.Pointer(addr))
	name := cStringOrNil(o.ClientName)
	defer C.free(unsafe.Pointer(name))
	var h *C.dx_runtime_t
	var e *C.dx_error_t
	if C.deepxgo_connect(addr, C.uint32_t(o.ConnectTimeout.Milliseconds()),
		C.uint32_t(o.RequestTimeout.Milliseconds()), name, &h, &e) != 0 {
		return nil, newError(StatusUnsupported, call,
			"the loaded host library (ABI %s) has no dx_runtime_connect (added in ABI 1.1)",
			versionString(ABIVersion()))
	}
	if err := takeError(call, e); err != nil {
		return nil, err
	}
	return newRuntime(h, true), nil
}

// checkABI refuses a host library of another ABI major than the headers this package was built
// with: the layouts of the structs it fills would differ.
func checkABI(call string) error {
	if lib := ABIVersion(); lib>>16 != HeaderABIVersion>>16 {
		return newError(StatusVersionMismatch, call,
			"the host library has ABI %s, this package was built with the headers of ABI %s",
			versionString(lib), versionString(HeaderABIVersion))
	}
	return nil
}

func newRuntime(h *C.dx_runtime_t, remote bool) *Runtime {
	r := &Runtime{h: h, remote: remote}
	liveHandles.Add(1)
	runtime.SetFinalizer(r, (*Runtime).finalize)
	return r
}

// Remote reports whether the runtime was made by Connect.
func (r *Runtime) Remote() bool { return r.remote }

// Close destroys the runtime handle (dx_runtime_destroy()) after the calls in flight on it
// return. Its plugins are shut down once its last tensor is closed. Closing twice is a no-op.
func (r *Runtime) Close() error {
	if !r.g.close() {
		return nil
	}
	runtime.SetFinalizer(r, nil)
	liveHandles.Add(-1)
	return takeError("Runtime.Close", C.dx_runtime_destroy(r.h))
}

func (r *Runtime) finalize() {
	if r.g.close() {
		liveHandles.Add(-1)
		reportLeak("deepx: a Runtime was never closed; the garbage collector released it")
		C.dx_error_destroy(C.dx_runtime_destroy(r.h))
	}
}

// enter and leave bracket every C call that uses the runtime handle.
func (r *Runtime) enter(call string) error {
	if !r.g.acquire() {
		return closedError(call, "runtime")
	}
	return nil
}

func (r *Runtime) leave() { r.g.release() }

// Plugin describes a loaded plugin (dx_plugin_info_t).
type Plugin struct {
	Index             int
	Name              string
	Vendor            string
	Version           string
	BuildID           string
	Path              string
	ABIVersion        uint32 // packed ABI version the plugin was built against
	Capabilities      uint64 // DX_PLUGIN_CAP_* bits
	NumKernels        int
	NumMemorySpaces   int
	NumTransports     int
	Certification     int // 0 none, 1 valid, 2 invalid (dx_certification_t)
	Certificate       string
	CertificationNote string
}

// LoadPlugin loads a plugin by path (containing '/') or by name ("cpu"), looked up in the
// options' PluginPath, DEEPX_PLUGIN_PATH and the installed plugin directory
// (dx_runtime_load_plugin()). It may run while other goroutines invoke ops.
func (r *Runtime) LoadPlugin(nameOrPath string) (Plugin, error) {
	const call = "Runtime.LoadPlugin"
	if err := r.enter(call); err != nil {
		return Plugin{}, err
	}
	defer r.leave()
	s := C.CString(nameOrPath)
	defer C.free(unsafe.Pointer(s))
	var index C.int32_t
	if err := takeError(call, C.dx_runtime_load_plugin(r.h, s, &index)); err != nil {
		return Plugin{}, err
	}
	return r.plugin(call, int(index))
}

// LoadSearchPath loads every plugin found in the search path (dx_runtime_load_search_path())
// and returns how many loaded and how many failed.
func (r *Runtime) LoadSearchPath() (loaded, failed int, err error) {
	const call = "Runtime.LoadSearchPath"
	if err := r.enter(call); err != nil {
		return 0, 0, err
	}
	defer r.leave()
	var l, f C.int32_t
	if err := takeError(call, C.dx_runtime_load_search_path(r.h, &l, &f)); err != nil {
		return 0, 0, err
	}
	return int(l), int(f), nil
}

// Plugins lists the loaded plugins in load order.
func (r *Runtime) Plugins() ([]Plugin, error) {
	const call = "Runtime.Plugins"
	if err := r.enter(call); err != nil {
		return nil, err
	}
	defer r.leave()
	var n C.int32_t
	if err := takeError(call, C.dx_runtime_plugin_count(r.h, &n)); err != nil {
		return nil, err
	}
	out := make([]Plugin, 0, int(n))
	for i := 0; i < int(n); i++ {
		p, err := r.plugin(call, i)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (r *Runtime) plugin(call string, index int) (Plugin, error) {
	var info C.dx_plugin_info_t
	if err := takeError(call, C.deepxgo_plugin_info(r.h, C.int32_t(index), &info)); err != nil {
		return Plugin{}, err
	}
	return Plugin{
		Index:             index,
		Name:              C.GoString(info.name),
		Vendor:            C.GoString(info.vendor),
		Version:           C.GoString(info.version),
		BuildID:           C.GoString(info.build_id),
		Path:              C.GoString(info.path),
		ABIVersion:        uint32(info.abi_version),
		Capabilities:      uint64(info.capabilities),
		NumKernels:        int(info.num_kernels),
		NumMemorySpaces:   int(info.num_memory_spaces),
		NumTransports:     int(info.num_transports),
		Certification:     int(info.certification),
		Certificate:       C.GoString(info.certificate),
		CertificationNote: C.GoString(info.certification_note),
	}, nil
}

// Device describes a device, i.e. a memory space (dx_device_info_t).
type Device struct {
	Index       int
	Name        string // "cpu", "cuda:0"
	DeviceType  int    // DLDeviceType (1 is kDLCPU)
	DeviceID    int
	Kind        int // dx_memory_kind_t
	PluginIndex int
	Capacity    uint64 // bytes, 0 when unknown
	Alignment   uint64 // bytes
}

// Devices lists the devices of every loaded plugin.
func (r *Runtime) Devices() ([]Device, error) {
	const call = "Runtime.Devices"
	if err := r.enter(call); err != nil {
		return nil, err
	}
	defer r.leave()
	var n C.int32_t
	if err := takeError(call, C.dx_runtime_device_count(r.h, &n)); err != nil {
		return nil, err
	}
	out := make([]Device, 0, int(n))
	for i := 0; i < int(n); i++ {
		var info C.dx_device_info_t
		if err := takeError(call, C.deepxgo_device_info(r.h, C.int32_t(i), &info)); err != nil {
			return nil, err
		}
		out = append(out, Device{
			Index:       i,
			Name:        C.GoString(info.name),
			DeviceType:  int(info.device_type),
			DeviceID:    int(info.device_id),
			Kind:        int(info.kind),
			PluginIndex: int(info.plugin_index),
			Capacity:    uint64(info.capacity),
			Alignment:   uint64(info.alignment),
		})
	}
	return out, nil
}

// FindDevice returns the index of the device named name ("cpu"); StatusNotFound when absent.
func (r *Runtime) FindDevice(name string) (int, error) {
	const call = "Runtime.FindDevice"
	if err := r.enter(call); err != nil {
		return -1, err
	}
	defer r.leave()
	s := C.CString(name)
	defer C.free(unsafe.Pointer(s))
	var index C.int32_t
	if err := takeError(call, C.dx_runtime_find_device(r.h, s, &index)); err != nil {
		return -1, err
	}
	return int(index), nil
}

// MemoryStats are a device's allocation statistics (dx_memory_stats_t).
type MemoryStats struct {
	InUseBytes        uint64
	PeakInUseBytes    uint64
	ReservedBytes     uint64
	PeakReservedBytes uint64
	LiveAllocations   uint64
}

// DeviceStats reads device index's allocation statistics (dx_runtime_device_stats()).
// StatusUnsupported on a remote runtime.
func (r *Runtime) DeviceStats(index int) (MemoryStats, error) {
	const call = "Runtime.DeviceStats"
	if err := r.enter(call); err != nil {
		return MemoryStats{}, err
	}
	defer r.leave()
	var s C.dx_memory_stats_t
	if err := takeError(call, C.deepxgo_device_stats(r.h, C.int32_t(index), &s)); err != nil {
		return MemoryStats{}, err
	}
	return MemoryStats{
		InUseBytes:        uint64(s.in_use_bytes),
		PeakInUseBytes:    uint64(s.peak_in_use_bytes),
		ReservedBytes:     uint64(s.reserved_bytes),
		PeakReservedBytes: uint64(s.peak_reserved_bytes),
		LiveAllocations:   uint64(s.live_allocations),
	}, nil
}

// Op is an interned op: its id, stable for the runtime's lifetime, and its name. Resolve it
// once with Runtime.Op and pass it to Invoke on the hot path.
type Op struct {
	ID   uint32
	Name string
}

// Op looks an op up by name (dx_runtime_op_lookup()); StatusNotFound when no loaded plugin
// implements it.
func (r *Runtime) Op(name string) (Op, error) {
	const call = "Runtime.Op"
	if err := r.enter(call); err != nil {
		return Op{}, err
	}
	defer r.leave()
	s := C.CString(name)
	defer C.free(unsafe.Pointer(s))
	var id C.dx_op_id_t
	if err := takeError(call, C.dx_runtime_op_lookup(r.h, s, &id)); err != nil {
		return Op{}, err
	}
	return Op{ID: uint32(id), Name: name}, nil
}

// Ops lists the interned ops, by id.
func (r *Runtime) Ops() ([]Op, error) {
	const call = "Runtime.Ops"
	if err := r.enter(call); err != nil {
		return nil, err
	}
	defer r.leave()
	var n C.int32_t
	if err := takeError(call, C.dx_runtime_op_count(r.h, &n)); err != nil {
		return nil, err
	}
	out := make([]Op, 0, int(n))
	for i := 0; i < int(n); i++ {
		var name *C.char
		if err := takeError(call, C.dx_runtime_op_name(r.h, C.dx_op_id_t(i), &name)); err != nil {
			return nil, err
		}
		out = append(out, Op{ID: uint32(i), Name: C.GoString(name)})
	}
	return out, nil
}

func cStringOrNil(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

func versionString(v uint32) string { return fmt.Sprintf("%d.%d", v>>16, v&0xffff) }
