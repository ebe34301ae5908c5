// fuzz_safetensors_load: the input is a file; dx_safetensors_load() reads it (through a memfd,
// as /proc/self/fd/N) into a host and into a device memory space, then every accessor of what
// was loaded runs, and what loaded is saved and loaded again.
//
// Checks, besides the sanitizers:
//   - a refused file leaves *out_file alone;
//   - an accepted file is what the format says: tensors in file order, each range of
//     product(shape) x element size bytes, ranges back to back from 0 to the end of the file;
//     every tensor's bytes are the file's bytes (host and device spaces alike), names and
//     metadata keys are found again by dx_safetensors_find / _metadata_find;
//   - out-of-range indices are refused; a short struct_size is honoured (nothing written past it);
//   - tensors taken from the file outlive it;
//   - what was loaded saves (unless a name is empty, which a save refuses) and loads back equal.
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <memory>

#include "deepx/safetensors.h"
#include "fuzz_common.h"

using namespace deepx_fuzz;

namespace {

dx_runtime_t* g_rt = nullptr;
int32_t g_devices[2] = {-1, -1};
int g_fd = -1;
std::string g_path;       // /proc/self/fd/N of the memfd
std::string g_save_path;  // a file in a private temporary directory

struct Loaded {
  std::string name;
  dx_dtype_t dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Everything a loaded file says, checked against the file's bytes when `file_bytes` is set.
void Walk(const dx_safetensors_t* f, const std::string* file_bytes, std::vector<Loaded>* tensors,
          std::map<std::string, std::string>* metadata) {
  uint64_t data_start = 0, data_size = 0;
  if (file_bytes) {
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<uint8_t>((*file_bytes)[i]);
    data_start = 8 + header;
    FUZZ_CHECK(data_start <= file_bytes->size(), "a file whose header runs past its end loaded");
    data_size = file_bytes->size() - data_start;
  }
  int64_t count = -1;
  FUZZ_OK(dx_safetensors_tensor_count(f, &count));
  FUZZ_CHECK(count >= 0, "negative tensor count");
  uint64_t next = 0;
  std::vector<dx_tensor_t*> taken;
  for (int64_t i = 0; i < count; ++i) {
    dx_safetensors_tensor_info_t info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0;
    FUZZ_OK(dx_safetensors_tensor_info(f, i, &info));
    FUZZ_CHECK(info.name != nullptr, "tensor %lld has no name", static_cast<long long>(i));
    FUZZ_CHECK(info.ndim >= 0 && info.ndim <= 32, "tensor rank %d", info.ndim);
    FUZZ_CHECK((info.ndim == 0) == (info.shape == nullptr), "shape pointer and rank disagree");
    i128 numel = 1;
    for (int32_t d = 0; d < info.ndim; ++d) {
      FUZZ_CHECK(info.shape[d] >= 0, "negative dimension");
      numel *= info.shape[d];
      FUZZ_CHECK(numel <= (i128{1} << 64), "element count overflows");
    }
    const uint64_t elem = (((info.dtype >> 8) & 0xffu) + 7) / 8 * (info.dtype >> 16);
    FUZZ_CHECK(static_cast<i128>(info.byte_size) == numel * elem,
               "tensor '%s': byte_size %llu is not product(shape) x %llu", info.name,
               static_cast<unsigned long long>(info.byte_size),
               static_cast<unsigned long long>(elem));
    FUZZ_CHECK(info.data_offset == next, "tensor '%s' starts at %llu, the previous ended at %llu",
               info.name, static_cast<unsigned long long>(info.data_offset),
               static_cast<unsigned long long>(next));
    next = info.data_offset + info.byte_size;

    // A short struct_size: nothing past `name` is written.
    dx_safetensors_tensor_info_t partial;
    std::memset(&partial, 0xab, sizeof partial);
    partial.struct_size = DX_STRUCT_SIZE(dx_safetensors_tensor_info_t, name);
    FUZZ_OK(dx_safetensors_tensor_info(f, i, &partial));
    FUZZ_CHECK(partial.name != nullptr && std::strcmp(partial.name, info.name) == 0,
               "a short info has another name");
    FUZZ_CHECK(partial.ndim == static_cast<int32_t>(0xabababab),
               "dx_safetensors_tensor_info wrote past struct_size");

    int64_t found = -1;
    FUZZ_OK(dx_safetensors_find(f, info.name, &found));
    FUZZ_CHECK(found == i, "dx_safetensors_find('%s') gave %lld, not %lld", info.name,
               static_cast<long long>(found), static_cast<long long>(i));

    dx_tensor_t* t = nullptr;
    FUZZ_OK(dx_safetensors_get_tensor(f, i, &t));
    dx_dtype_t dtype = 0;
    FUZZ_OK(dx_tensor_dtype(t, &dtype));
    FUZZ_CHECK(dtype == info.dtype, "the tensor's dtype is not the info's");
    int32_t ndim = -1;
    FUZZ_OK(dx_tensor_ndim(t, &ndim));
    FUZZ_CHECK(ndim == info.ndim, "the tensor's rank is not the info's");
    std::vector<int64_t> shape(static_cast<size_t>(ndim) + 1);
    FUZZ_OK(dx_tensor_shape(t, shape.data(), ndim));
    shape.resize(static_cast<size_t>(ndim));
    for (int32_t d = 0; d < ndim; ++d) FUZZ_CHECK(shape[d] == info.shape[d], "shape differs");
    std::string bytes(static_cast<size_t>(info.byte_size), '\0');
    FUZZ_OK(dx_tensor_read(t, bytes.data(), bytes.size()));
    if (file_bytes) {
      FUZZ_CHECK(info.data_offset + info.byte_size <= data_size, "a tensor runs past the file");
      FUZZ_CHECK(file_bytes->compare(static_cast<size_t>(data_start + info.data_offset),
                                     bytes.size(), bytes) == 0,
                 "tensor '%s' does not hold the file's bytes", info.name);
    }
    if (tensors) tensors->push_back(Loaded{info.name, info.dtype, shape, bytes});
    taken.push_back(t);
  }
  if (file_bytes) {
    FUZZ_CHECK(next == data_size, "the tensors cover %llu of the %llu data bytes",
               static_cast<unsigned long long>(next), static_cast<unsigned long long>(data_size));
  }
  dx_safetensors_tensor_info_t info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0;
  FUZZ_CHECK(Take(dx_safetensors_tensor_info(f, count, &info)) != DX_OK, "index count accepted");
  FUZZ_CHECK(Take(dx_safetensors_tensor_info(f, -1, &info)) != DX_OK, "index -1 accepted");
  dx_tensor_t* none = nullptr;
  FUZZ_CHECK(Take(dx_safetensors_get_tensor(f, count, &none)) != DX_OK && none == nullptr,
             "get_tensor(count) accepted");

  int64_t mcount = -1;
  FUZZ_OK(dx_safetensors_metadata_count(f, &mcount));
  FUZZ_CHECK(mcount >= 0, "negative metadata count");
  for (int64_t i = 0; i < mcount; ++i) {
    const char* key = nullptr;
    const char* value = nullptr;
    FUZZ_OK(dx_safetensors_metadata(f, i, &key, &value));
    FUZZ_CHECK(key != nullptr && value != nullptr, "null metadata");
    const char* again = nullptr;
    FUZZ_OK(dx_safetensors_metadata_find(f, key, &again));
    FUZZ_CHECK(again != nullptr && std::strcmp(again, value) == 0,
               "metadata_find('%s') disagrees with metadata(%lld)", key, static_cast<long long>(i));
    if (metadata) (*metadata)[key] = value;
  }
  const char* k = nullptr;
  FUZZ_CHECK(Take(dx_safetensors_metadata(f, mcount, &k, nullptr)) != DX_OK,
             "metadata index count accepted");
  for (dx_tensor_t* t : taken) FUZZ_OK(dx_tensor_destroy(t));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* plugin = std::getenv("DEEPX_FUZZ_PLUGIN");
  g_rt = MakeRuntime(plugin && *plugin ? plugin : DEEPX_FUZZ_PLUGIN);
  g_devices[0] = FindDevice(g_rt, "fuzzhost");
  g_devices[1] = FindDevice(g_rt, "fuzzdev");
  g_fd = memfd_create("deepx-fuzz-safetensors", MFD_CLOEXEC);
  FUZZ_CHECK(g_fd >= 0, "memfd_create failed");
  g_path = "/proc/self/fd/" + std::to_string(g_fd);
  std::string dir_template =
      std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/deepx-fuzz-XXXXXX";
  FUZZ_CHECK(mkdtemp(dir_template.data()) != nullptr, "mkdtemp failed");
  g_save_path = dir_template + "/saved.safetensors";
  // The directory goes when the process does (libFuzzer exits through exit()).
  static std::string dir = dir_template;
  std::atexit([] {
    unlink(g_save_path.c_str());
    rmdir(dir.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  FUZZ_CHECK(ftruncate(g_fd, 0) == 0, "ftruncate");
  FUZZ_CHECK(pwrite(g_fd, data, size, 0) == static_cast<ssize_t>(size), "pwrite");

  for (int dev = 0; dev < 2; ++dev) {
    dx_safetensors_t* const kUntouched = reinterpret_cast<dx_safetensors_t*>(uintptr_t{0x5eed});
    dx_safetensors_t* f = kUntouched;
    if (Take(dx_safetensors_load(g_rt, g_path.c_str(), g_devices[dev], &f)) != DX_OK) {
      FUZZ_CHECK(f == kUntouched, "a refused load wrote *out_file");
      // Both spaces refuse a file alike: it is refused before any tensor is made.
      if (dev == 0) return 0;
      Fatal("the file loads into the host space but not into the device space");
    }
    std::vector<Loaded> tensors;
    std::map<std::string, std::string> metadata;
    Walk(f, &file, &tensors, &metadata);

    // Tensors taken from the file outlive it.
    int64_t count = 0;
    FUZZ_OK(dx_safetensors_tensor_count(f, &count));
    dx_tensor_t* kept = nullptr;
    if (count > 0) FUZZ_OK(dx_safetensors_get_tensor(f, count - 1, &kept));
    FUZZ_OK(dx_safetensors_destroy(f));
    FUZZ_CHECK(Take(dx_safetensors_destroy(f)) == DX_FAILED_PRECONDITION,
               "a destroyed file was destroyed again");
    if (kept != nullptr) {
      std::string bytes(tensors.back().bytes.size(), '\0');
      FUZZ_OK(dx_tensor_read(kept, bytes.data(), bytes.size()));
      FUZZ_CHECK(bytes == tensors.back().bytes, "a tensor changed when its file was destroyed");
      FUZZ_OK(dx_tensor_destroy(kept));
    }
    if (dev != 0) continue;

    // Save what loaded and load it back.
    bool empty_name = false;
    std::vector<const char*> names;
    std::vector<dx_tensor_t*> made;
    for (const Loaded& t : tensors) {
      empty_name = empty_name || t.name.empty();
      names.push_back(t.name.c_str());
      dx_tensor_t* h = nullptr;
      FUZZ_OK(dx_tensor_create(g_rt, g_devices[0], t.dtype, t.shape.data(),
                               static_cast<int32_t>(t.shape.size()), &h));
      FUZZ_OK(dx_tensor_write(h, t.bytes.data(), t.bytes.size()));
      made.push_back(h);
    }
    std::vector<const char*> keys, values;
    for (const auto& [key, value] : metadata) {
      keys.push_back(key.c_str());
      values.push_back(value.c_str());
    }
    dx_safetensors_save_options_t options;
    std::memset(&options, 0, sizeof options);
    options.struct_size = DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0;
    options.metadata_count = static_cast<int64_t>(keys.size());
    options.metadata_keys = keys.data();
    options.metadata_values = values.data();
    std::string message;
    const dx_status_t saved =
        TakeWithMessage(dx_safetensors_save(g_rt, g_save_path.c_str(), names.data(),
                                            const_cast<const dx_tensor_t* const*>(made.data()),
                                            static_cast<int64_t>(made.size()), &options),
                        &message);
    for (dx_tensor_t* h : made) FUZZ_OK(dx_tensor_destroy(h));
    if (empty_name) {
      FUZZ_CHECK(saved == DX_INVALID_ARGUMENT, "a save with an empty name returned %s",
                 dx_status_string(saved));
      continue;
    }
    FUZZ_CHECK(saved == DX_OK, "what loaded does not save: %s: %s", dx_status_string(saved),
               message.c_str());
    dx_safetensors_t* again = nullptr;
    FUZZ_OK(dx_safetensors_load(g_rt, g_save_path.c_str(), g_devices[0], &again));
    std::vector<Loaded> tensors2;
    std::map<std::string, std::string> metadata2;
    Walk(again, nullptr, &tensors2, &metadata2);
    FUZZ_OK(dx_safetensors_destroy(again));
    FUZZ_CHECK(metadata2 == metadata, "the metadata changed in a save and load");
    FUZZ_CHECK(tensors2.size() == tensors.size(), "a save and load changed the tensor count");
    std::map<std::string, const Loaded*> by_name;
    for (const Loaded& t : tensors2) by_name[t.name] = &t;
    for (const Loaded& t : tensors) {
      auto it = by_name.find(t.name);
      FUZZ_CHECK(it != by_name.end(), "tensor '%s' was lost in a save and load", t.name.c_str());
      FUZZ_CHECK(it->second->dtype == t.dtype && it->second->shape == t.shape &&
                     it->second->bytes == t.bytes,
                 "tensor '%s' changed in a save and load", t.name.c_str());
    }
  }
  return 0;
}
