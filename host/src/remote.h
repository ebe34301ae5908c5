// The remote runtime: a runtime whose calls go to a deepx daemon (deepxd) over the wire protocol
// (docs/protocol.md, the codec deepx::wire of daemon/wire/). dx_runtime_connect() makes one; the
// entry points of api.cc, tensor.cc and dispatch.cc hand their calls to it when the runtime or a
// tensor is remote.
//
// A RemoteConnection is a blocking unix-socket client: one request at a time on the connection
// (a mutex serialises the threads that share the runtime), each with a task id of its own, its
// reply found by that id; a reply of an earlier request that timed out is read and dropped. The
// first failure of the stream itself (the daemon closed it, a frame that does not verify, a
// request that could not be sent whole) breaks the connection for good: that call and every later
// one fail at once with the same status and message.
//
// Every function parks its failure message (Fail) and returns the status, like the rest of the
// host. Built without the wire codec (DEEPX_HOST_ONLY), Connect refuses with DX_UNSUPPORTED.
#ifndef DEEPX_HOST_SRC_REMOTE_H_
#define DEEPX_HOST_SRC_REMOTE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "internal.h"

namespace deepx::host {

// What dx_runtime_connect() asks for, its defaults applied.
struct ConnectSettings {
  std::string address;
  uint32_t connect_timeout_ms = 5000;
  uint32_t request_timeout_ms = 60000;
  std::string client_name = "libdeepx_host";
};

// The daemon's catalogue, listed once at connect; its strings are what the queries lend out for
// the runtime's lifetime.
struct RemotePlugin {
  std::string name, version;
  int32_t certification = DX_CERTIFICATION_NONE;
  int32_t num_kernels = 0, num_devices = 0;
};
struct RemoteDevice {
  std::string name;
  int32_t device_type = 0;  // from the device name ("cpu", "cuda:1"); 0 when it says nothing
  int32_t device_id = 0;
  int32_t kind = DX_MEMORY_DEVICE;
  int32_t plugin_index = -1;
};
struct RemoteKernel {
  int32_t plugin_index = -1;
  int32_t device_type = 0;
  int32_t num_inputs = -1;   // from the standard op's schema; -1 for a vendor op
  int32_t num_outputs = -1;
  std::vector<dx_dtype_t> dtypes;
  bool certified = false;
};
struct RemoteOp {
  std::string name;
  std::vector<RemoteKernel> kernels;
};

class RemoteConnection;

// A tensor's handle in the daemon; freeing it (best effort: a lost connection freed it already)
// is this object's destructor.
struct RemoteTensor {
  std::shared_ptr<RemoteConnection> connection;
  uint64_t handle = 0;
  RemoteTensor() = default;
  RemoteTensor(const RemoteTensor&) = delete;
  RemoteTensor& operator=(const RemoteTensor&) = delete;
  ~RemoteTensor();
};

class RemoteConnection : public std::enable_shared_from_this<RemoteConnection> {
 public:
  // Connects, says Hello and reads the catalogue. `where` names the entry point.
  static dx_status_t Connect(const ConnectSettings& settings,
                             std::shared_ptr<RemoteConnection>* out, const char* where);
  ~RemoteConnection();
  RemoteConnection(const RemoteConnection&) = delete;
  RemoteConnection& operator=(const RemoteConnection&) = delete;

  const std::string& address() const { return settings_.address; }
  const std::vector<RemotePlugin>& plugins() const { return plugins_; }
  const std::vector<RemoteDevice>& devices() const { return devices_; }
  const std::vector<RemoteOp>& ops() const { return ops_; }
  // The id of an op of the catalogue, or false.
  bool FindOp(const std::string& name, dx_op_id_t* id) const;

  // A new tensor of `core`'s runtime in the daemon (shape checked by the caller).
  dx_status_t CreateTensor(const std::shared_ptr<Core>& core, int32_t device_index,
                           dx_dtype_t dtype, const int64_t* shape, int32_t ndim,
                           std::unique_ptr<Tensor>* out, const char* where);
  // A view of `base` (a tensor of this connection); strides null for compact.
  dx_status_t ViewTensor(const Tensor& base, const int64_t* shape, const int64_t* strides,
                         int32_t ndim, int64_t elem_offset, std::unique_ptr<Tensor>* out,
                         const char* where);
  // The tensor's elements, row-major, from / into `size` bytes of this process (size checked by
  // the caller: numel × element size).
  dx_status_t Write(const Tensor& tensor, const void* data, uint64_t size, const char* where);
  dx_status_t Read(const Tensor& tensor, void* data, uint64_t size, const char* where);
  // Both tensors of this connection, same dtype and shape (checked by the caller).
  dx_status_t Copy(const Tensor& dst, const Tensor& src, const char* where);
  // dx_invoke of op `name`; the handles are resolved here.
  dx_status_t Invoke(const std::string& name, dx_tensor_t* const* inputs, int32_t num_inputs,
                     dx_tensor_t* const* outputs, int32_t num_outputs, const dx_attrs_t* attrs,
                     const dx_invoke_options_t* options, const char* where);
  // dx_program_submit on this connection: the steps as one Submit request, one reply;
  // `completed` receives the daemon's count of ops that ran (also on failure).
  dx_status_t Submit(const std::vector<InvokeStep>& steps, int32_t* completed, const char* where);
  // Frees a handle in the daemon, ignoring failures (destructors call it).
  void Free(uint64_t handle) noexcept;

  struct Impl;  // the socket, the decoder and the lock (remote.cc)

 private:
  explicit RemoteConnection(const ConnectSettings& settings);
  ConnectSettings settings_;
  std::vector<RemotePlugin> plugins_;
  std::vector<RemoteDevice> devices_;
  std::vector<RemoteOp> ops_;
  std::unordered_map<std::string, dx_op_id_t> op_ids_;
  std::unique_ptr<Impl> impl_;
};

// dx_invoke on a remote runtime (dispatch.cc calls it): the op id names an op of the catalogue.
dx_status_t RemoteInvoke(const Runtime& runtime, dx_op_id_t id, dx_tensor_t* const* inputs,
                         int32_t num_inputs, dx_tensor_t* const* outputs, int32_t num_outputs,
                         const dx_attrs_t* attrs, const dx_invoke_options_t* options);

}  // namespace deepx::host

#endif  // DEEPX_HOST_SRC_REMOTE_H_
