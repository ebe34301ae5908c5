// fuzz_attrs_invoke: attribute lists built from the input (dx_attrs_set_* with any name, type and
// value: the wrong type for a standard op's schema, a string for dx.sum's `axes`, huge or negative
// axes, names the op does not have, replacements) and dx_invoke_ex() of the standard ops on small
// tensors (any dtype and shape, null optional inputs, strided views, the backward pass) through
// the reference plugin, which implements every op.
//
// The host side is what is fuzzed: attribute validation and ordering, the output-shape checks
// of the standard ops, kernel matching, the attribute cache (the same list used for two ops).
// The reference plugin is loaded as built (without sanitizers is fine) from the path given at
// configure time (DEEPX_FUZZ_REFERENCE_PLUGIN) or in the environment variable of that name; the
// target prints DEEPX_FUZZ_SKIPPED and exits when it is missing.
//
// Input (fuzz_common.h for Int()):
//   U8 op (index into the standard op table, % its size), U8 flags (bit 0: backward, bit 1:
//   pin the plugin in dx_invoke_options_t, bit 2: invoke a second op with the same attributes,
//   bit 3: strided views as inputs), [U8 second op]
//   U8 attribute count (% 8), each: U8 name selector (below 0xc0: the op's schema attribute,
//   below 0xe0: one of kOtherNames, else U8 length then bytes), U8 type (% 7: none means a
//   replacement by another type of the previous name), the value (Int()s, U8 count + values)
//   then the tensors: for each input U8 spec (bit 0..1 rank source, bits 2..3 dtype source,
//   bit 7 null), for each output U8 mode (0 input 0's shape, 1 scalar, 2 its own spec, 3 input
//   0's shape reduced), U8 dims as needed.
#include <sys/stat.h>

#include <memory>

#include "deepx/ops.h"
#include "fuzz_common.h"

using namespace deepx_fuzz;

namespace {

struct OpEntry {
  const char* name;
  int32_t num_inputs;   // -1: variadic
  int32_t num_outputs;  // -1: variadic
  std::vector<std::string> attrs;
  dx_op_id_t id = 0;
  bool known = false;
};

std::vector<OpEntry> BuildOps() {
  std::vector<OpEntry> ops;
  auto split = [](const char* list) {
    std::vector<std::string> out;
    std::string s(list), cur;
    for (char c : s) {
      if (c == ',') {
        out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
  };
#define DX_FUZZ_OP_(id, op_name, nin, nout, attr_list) \
  ops.push_back(OpEntry{op_name, nin, nout, split(attr_list)});
  DX_OP_TABLE(DX_FUZZ_OP_)
#undef DX_FUZZ_OP_
  return ops;
}

const char* const kOtherNames[] = {
    "axes",    "axis",   "keepdims", "perm",       "transpose_a", "transpose_b",  "eps",
    "dtype",   "shape",  "sizes",    "starts",     "stops",       "steps",        "value",
    "repeats", "pads",   "kernel",   "stride",     "padding",     "dilation",     "groups",
    "seed",    "offset", "p",        "training",   "reduction",   "ignore_index", "causal",
    "scale",   "min",    "max",      "approximate"};

dx_runtime_t* g_rt = nullptr;
int32_t g_device = 0;
int32_t g_plugin = 0;
std::vector<OpEntry> g_ops;

double F64From(Reader& r) {
  const uint8_t kind = r.U8();
  switch (kind % 6) {
    case 0:
      return static_cast<double>(r.Int());
    case 1:
      return std::numeric_limits<double>::quiet_NaN();
    case 2:
      return std::numeric_limits<double>::infinity();
    case 3:
      return -std::numeric_limits<double>::infinity();
    case 4: {
      uint64_t bits = r.Raw64();
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return d;
    }
    default:
      return static_cast<double>(r.Int()) / 16.0;
  }
}

// Sets one attribute from the input; refusals (a bool that is not 0 or 1, a NUL in a string) are
// fine, anything else must succeed.
void SetAttr(Reader& r, dx_attrs_t* attrs, const OpEntry& op, std::string* last_name) {
  const uint8_t sel = r.U8();
  std::string name;
  if (sel < 0xc0 && !op.attrs.empty()) {
    name = op.attrs[sel % op.attrs.size()];
  } else if (sel < 0xe0) {
    name = kOtherNames[sel % (sizeof kOtherNames / sizeof kOtherNames[0])];
  } else {
    name = r.Bytes(r.U8() % 24);
  }
  uint8_t type = r.U8() % 7;
  if (type == 0) {  // replace the previous attribute with a value of another type
    name = *last_name;
    type = static_cast<uint8_t>(1 + r.U8() % 6);
  }
  *last_name = name;
  const bool bad_name = name.empty() || name.find('\0') != std::string::npos;
  dx_status_t st = DX_OK;
  bool may_refuse = bad_name;
  switch (type) {
    case DX_ATTR_I64:
      st = Take(dx_attrs_set_i64(attrs, name.c_str(), r.Int()));
      break;
    case DX_ATTR_F64:
      st = Take(dx_attrs_set_f64(attrs, name.c_str(), F64From(r)));
      break;
    case DX_ATTR_BOOL: {
      const int32_t v = static_cast<int32_t>(r.Int());
      may_refuse = may_refuse || (v != 0 && v != 1);
      st = Take(dx_attrs_set_bool(attrs, name.c_str(), v));
      break;
    }
    case DX_ATTR_STRING: {
      const std::string value = r.Bytes(r.U8() % 32);
      may_refuse = may_refuse || value.find('\0') != std::string::npos;
      st = Take(dx_attrs_set_string(attrs, name.c_str(), value.data(),
                                    static_cast<int64_t>(value.size())));
      break;
    }
    case DX_ATTR_I64_ARRAY: {
      const size_t n = r.U8() % 9;
      std::unique_ptr<int64_t[]> v(n ? new int64_t[n] : nullptr);
      for (size_t i = 0; i < n; ++i) v[i] = r.Int();
      st = Take(dx_attrs_set_i64_array(attrs, name.c_str(), v.get(), static_cast<int64_t>(n)));
      break;
    }
    default: {
      const size_t n = r.U8() % 9;
      std::unique_ptr<double[]> v(n ? new double[n] : nullptr);
      for (size_t i = 0; i < n; ++i) v[i] = F64From(r);
      st = Take(dx_attrs_set_f64_array(attrs, name.c_str(), v.get(), static_cast<int64_t>(n)));
      break;
    }
  }
  FUZZ_CHECK(st == DX_OK || may_refuse, "dx_attrs_set (type %d, name '%s') returned %s", type,
             name.c_str(), dx_status_string(st));
}

dx_dtype_t DtypeFrom(uint8_t spec, Reader& r) {
  switch ((spec >> 2) & 3) {
    case 0:
    case 1:
      return DX_DTYPE_F32;
    case 2:
      return DX_DTYPE_I64;
    default:
      return kDtypes[r.U8() % 10];
  }
}

// Fills a tensor with small values of its dtype (indices in -1..2, floats in -2..2).
void Fill(dx_tensor_t* t, uint8_t seed) {
  dx_dtype_t dtype = 0;
  int64_t numel = 0;
  FUZZ_OK(dx_tensor_dtype(t, &dtype));
  FUZZ_OK(dx_tensor_numel(t, &numel));
  const size_t elem = (((dtype >> 8) & 0xffu) + 7) / 8;
  std::vector<uint8_t> bytes(static_cast<size_t>(numel) * elem);
  for (int64_t i = 0; i < numel; ++i) {
    const int v = static_cast<int>((seed + i * 5) % 4) - 1;
    uint8_t* p = bytes.data() + static_cast<size_t>(i) * elem;
    switch (dtype) {
      case DX_DTYPE_F64: {
        double d = v * 0.75;
        std::memcpy(p, &d, 8);
        break;
      }
      case DX_DTYPE_F32: {
        float f = static_cast<float>(v) * 0.75f;
        std::memcpy(p, &f, 4);
        break;
      }
      case DX_DTYPE_F16: {
        uint16_t h = v == 0 ? 0 : (v < 0 ? 0xbc00 : 0x3c00);
        std::memcpy(p, &h, 2);
        break;
      }
      case DX_DTYPE_BF16: {
        uint16_t h = v == 0 ? 0 : (v < 0 ? 0xbf80 : 0x3f80);
        std::memcpy(p, &h, 2);
        break;
      }
      case DX_DTYPE_BOOL:
        p[0] = static_cast<uint8_t>(v > 0);
        break;
      case DX_DTYPE_U8:
        p[0] = static_cast<uint8_t>(v + 1);
        break;
      default: {
        int64_t x = v;
        std::memcpy(p, &x, elem);  // little-endian: the low bytes of x
        break;
      }
    }
  }
  FUZZ_OK(dx_tensor_write(t, bytes.data(), bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("DEEPX_FUZZ_REFERENCE_PLUGIN");
  const char* path = env && *env ? env : DEEPX_FUZZ_REFERENCE_PLUGIN;
  struct stat st;
  if (::stat(path, &st) != 0) {
    std::printf(
        "DEEPX_FUZZ_SKIPPED: fuzz_attrs_invoke: the reference plugin %s does not exist; "
        "build it (cmake --build --preset default) or point DEEPX_FUZZ_REFERENCE_PLUGIN "
        "at a libdeepx-plugin-reference.so\n",
        path);
    std::fflush(stdout);
    std::exit(0);
  }
  dx_runtime_options_t options;
  std::memset(&options, 0, sizeof options);
  options.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  options.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  FUZZ_OK(dx_runtime_create(&options, &g_rt));
  std::string message;
  if (TakeWithMessage(dx_runtime_load_plugin(g_rt, path, &g_plugin), &message) != DX_OK) {
    std::printf(
        "DEEPX_FUZZ_SKIPPED: fuzz_attrs_invoke: the reference plugin %s does not load "
        "(%s); rebuild it with this tree\n",
        path, message.c_str());
    std::fflush(stdout);
    std::exit(0);
  }
  g_ops = BuildOps();
  for (OpEntry& op : g_ops) {
    op.known = Take(dx_runtime_op_lookup(g_rt, op.name, &op.id)) == DX_OK;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const OpEntry& op = g_ops[r.U8() % g_ops.size()];
  const uint8_t flags = r.U8();
  const bool backward = flags & 1;
  const OpEntry& second = g_ops[(flags & 4) ? r.U8() % g_ops.size() : 0];

  dx_attrs_t* attrs = nullptr;
  FUZZ_OK(dx_attrs_create(&attrs));
  const int n_attrs = r.U8() % 8;
  std::string last_name = "axes";
  for (int i = 0; i < n_attrs; ++i) SetAttr(r, attrs, op, &last_name);

  // Tensors: at most 4 x 4 x 4 x 4 elements each.
  int32_t nin = op.num_inputs >= 0 ? op.num_inputs : 1 + r.U8() % 3;
  int32_t nout = op.num_outputs >= 0 ? op.num_outputs : 1 + r.U8() % 3;
  if (backward) {
    const int32_t fwd_in = nin;
    nin = 2 * nout + fwd_in;
    nout = fwd_in;
  }
  std::vector<dx_tensor_t*> owned;
  std::vector<dx_tensor_t*> inputs, outputs;
  int64_t shape0[4] = {0, 0, 0, 0};
  int32_t rank0 = 0;
  auto make = [&](dx_dtype_t dtype, const int64_t* shape, int32_t rank, bool strided) {
    dx_tensor_t* t = nullptr;
    if (strided && rank > 0) {
      // A view of every other element of a tensor twice as long in the last dimension.
      int64_t big[4];
      std::memcpy(big, shape, sizeof(int64_t) * static_cast<size_t>(rank));
      big[rank - 1] = shape[rank - 1] * 2;
      dx_tensor_t* base = nullptr;
      FUZZ_OK(dx_tensor_create(g_rt, g_device, dtype, big, rank, &base));
      owned.push_back(base);
      Fill(base, 3);
      int64_t strides[4];
      int64_t s = 1;
      for (int32_t d = rank - 1; d >= 0; --d) {
        strides[d] = d == rank - 1 ? 2 : s;
        s *= big[d];
      }
      FUZZ_OK(dx_tensor_view(base, shape, strides, rank, 0, &t));
    } else {
      FUZZ_OK(dx_tensor_create(g_rt, g_device, dtype, shape, rank, &t));
      Fill(t, static_cast<uint8_t>(owned.size()));
    }
    owned.push_back(t);
    return t;
  };
  for (int32_t i = 0; i < nin && i < 64; ++i) {
    const uint8_t spec = r.U8();
    if ((spec & 0x80) && i > 0) {
      inputs.push_back(nullptr);
      continue;
    }
    const dx_dtype_t dtype = DtypeFrom(spec, r);
    int64_t shape[4];
    int32_t rank;
    if ((spec & 3) == 0 && i > 0) {
      rank = rank0;
      std::memcpy(shape, shape0, sizeof shape);
    } else {
      rank = r.U8() % 5;
      for (int32_t d = 0; d < rank; ++d) shape[d] = r.U8() % 5;
    }
    if (i == 0) {
      rank0 = rank;
      std::memcpy(shape0, shape, sizeof shape);
    }
    inputs.push_back(make(dtype, shape, rank, (flags & 8) && (spec & 0x40)));
  }
  for (int32_t i = 0; i < nout && i < 64; ++i) {
    const uint8_t mode = r.U8();
    if (backward && (mode & 0x80)) {
      outputs.push_back(nullptr);  // an unwanted gradient
      continue;
    }
    const dx_dtype_t dtype = DtypeFrom(mode, r);
    int64_t shape[4] = {0, 0, 0, 0};
    int32_t rank = 0;
    switch (mode & 3) {
      case 0:
        rank = rank0;
        std::memcpy(shape, shape0, sizeof shape);
        break;
      case 1:
        break;
      case 2:
        rank = r.U8() % 5;
        for (int32_t d = 0; d < rank; ++d) shape[d] = r.U8() % 5;
        break;
      default:
        rank = rank0 > 0 ? rank0 - 1 : 0;
        for (int32_t d = 0; d < rank; ++d) shape[d] = shape0[d + 1];
        break;
    }
    outputs.push_back(make(dtype, shape, rank, false));
  }

  dx_invoke_options_t options;
  std::memset(&options, 0, sizeof options);
  options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  options.flags =
      (backward ? DX_INVOKE_FLAG_BACKWARD : 0) | ((flags & 2) ? DX_INVOKE_FLAG_PLUGIN : 0);
  options.plugin_index = g_plugin;
  if (op.known) {
    Take(dx_invoke_ex(g_rt, op.id, inputs.data(), static_cast<int32_t>(inputs.size()),
                      outputs.data(), static_cast<int32_t>(outputs.size()), attrs, &options));
  } else {
    FUZZ_CHECK(Take(dx_invoke_by_name(g_rt, op.name, inputs.data(),
                                      static_cast<int32_t>(inputs.size()), outputs.data(),
                                      static_cast<int32_t>(outputs.size()), attrs)) != DX_OK,
               "an op no plugin implements ran");
  }
  // The same attribute list for another op: the cached schema order must be rebuilt.
  if ((flags & 4) && second.known) {
    Take(dx_invoke_ex(g_rt, second.id, inputs.data(), static_cast<int32_t>(inputs.size()),
                      outputs.data(), static_cast<int32_t>(outputs.size()), attrs, &options));
  }
  // An op id that is not interned.
  FUZZ_CHECK(Take(dx_invoke(g_rt, 0x7fffffffu, nullptr, 0, nullptr, 0, attrs)) == DX_NOT_FOUND,
             "an unknown op id was not refused");

  for (auto it = owned.rbegin(); it != owned.rend(); ++it) FUZZ_OK(dx_tensor_destroy(*it));
  FUZZ_OK(dx_attrs_destroy(attrs));
  return 0;
}
