// Tensors on disk: the safetensors format (https://github.com/huggingface/safetensors).
//
//   [8 bytes: N, little-endian u64] [N bytes: JSON header] [data section]
//   header = {"__metadata__": {"k": "v", ...},
//             "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//
// Offsets are relative to the data section. A file is trusted in nothing: the header goes
// through nlohmann-json's strict parser (its SAX interface, with duplicate keys and deep nesting
// refused here), then every entry is checked against the file before anything is allocated. The rules are those of the reference implementation
// (safetensors' `validate`): header at most 100 MB and starting with '{', known dtypes, byte
// ranges of exactly product(shape) × element size that tile the data section with no overlap,
// no hole and nothing after the last tensor.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <memory>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "internal.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian bytes; a big-endian host would need swapping");

namespace deepx::host {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr int kMaxJsonDepth = 64;                   // the header nests 3 deep; refuse bombs
constexpr int32_t kMaxRank = 32;                    // as dx_tensor_create()
constexpr const char* kMetadataKey = "__metadata__";

// ---- dtypes ------------------------------------------------------------------------------------

struct FormatDtype {
  const char* name;
  dx_dtype_t dtype;
};
constexpr FormatDtype kFormatDtypes[] = {
    {"F64", DX_DTYPE_F64}, {"F32", DX_DTYPE_F32}, {"F16", DX_DTYPE_F16},
    {"BF16", DX_DTYPE_BF16}, {"I64", DX_DTYPE_I64}, {"I32", DX_DTYPE_I32},
    {"I16", DX_DTYPE_I16}, {"I8", DX_DTYPE_I8},   {"U8", DX_DTYPE_U8},
    {"BOOL", DX_DTYPE_BOOL},
};
// Valid in the format, but deepx has no such dtype.
constexpr const char* kUnsupportedFormatDtypes[] = {"U16", "U32", "U64", "F8_E5M2", "F8_E4M3",
                                                    "F8_E4M3FN", "F8_E8M0", "F4", "F6_E2M3",
                                                    "F6_E3M2"};

const char* FormatName(dx_dtype_t dtype) {
  for (const auto& d : kFormatDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return nullptr;
}

// ---- messages ----------------------------------------------------------------------------------

// Quotes a name for a message: printable ASCII as is, anything else escaped, long names cut.
std::string Quote(std::string_view s) {
  std::string out = "'";
  size_t n = 0;
  for (unsigned char c : s) {
    if (++n > 80) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7F && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + "'";
}

std::string U64(uint64_t v) { return std::to_string(v); }

// Length of the well-formed UTF-8 sequence at s[i] (1 for ASCII), or 0 when it is malformed:
// overlong, a surrogate, past U+10FFFF, or cut short.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  uint32_t cp = 0, min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2, cp = b0 & 0x1F, min = 0x80;
  else if (b0 >= 0xE0 && b0 <= 0xEF) len = 3, cp = b0 & 0x0F, min = 0x800;
  else if (b0 >= 0xF0 && b0 <= 0xF4) len = 4, cp = b0 & 0x07, min = 0x10000;
  else return 0;
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// ---- strict JSON (nlohmann-json's parser) --------------------------------------------------------

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  bool is_u64 = false;  // a number that is a non-negative integer fitting a u64 ...
  uint64_t u64 = 0;     // ... and its value
  std::string text;     // a string's value (UTF-8)
  std::vector<Json> items;
  // An object's members, in file order. Not std::pair<std::string, Json>: a pair of the
  // incomplete Json is refused by clang's C++20 library checks.
  struct Member;
  std::vector<Member> members;

  const Json* Find(std::string_view key) const;
};

struct Json::Member {
  std::string first;
  Json second;
};

const Json* Json::Find(std::string_view key) const {
  for (const auto& m : members) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

const char* KindName(Json::Kind k) {
  switch (k) {
    case Json::Kind::kNull: return "null";
    case Json::Kind::kBool: return "a boolean";
    case Json::Kind::kNumber: return "a number";
    case Json::Kind::kString: return "a string";
    case Json::Kind::kArray: return "an array";
    case Json::Kind::kObject: return "an object";
  }
  return "?";
}

// Builds a Json from nlohmann-json's SAX events (RFC 8259, strict: no comments, no trailing
// commas, no NaN, no single quotes, no control characters in strings, UTF-8 checked with no
// overlongs and no surrogates, nothing after the value), adding what the format needs on top:
// duplicate object keys refused (the format's maps are sets of names) and nesting limited to
// kMaxJsonDepth (the header nests 3 deep; deeper is a bomb). The library reads the header
// iteratively, so a deep file cannot exhaust the stack before the limit stops it.
class JsonBuilder : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit JsonBuilder(Json* root) : root_(root) {}

  // Parses `text`, one value followed only by whitespace. False with `error()` set on any fault.
  bool Parse(std::string_view text) {
    // The library's reader takes a NUL byte for the end of the input; JSON text has none
    // (inside strings it must be escaped), so one would hide whatever follows it.
    if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
      return Error("header byte " + U64(nul) + ": a NUL byte, which JSON text never contains");
    }
    const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), this,
                                              nlohmann::json::input_format_t::json,
                                              /*strict=*/true, /*ignore_comments=*/false);
    if (!ok && error_.empty()) error_ = "unreadable JSON";
    return ok;
  }
  const std::string& error() const { return error_; }

  bool null() override { return Add(Json{}); }
  bool boolean(bool value) override {
    Json j;
    j.kind = Json::Kind::kBool;
    j.boolean = value;
    return Add(std::move(j));
  }
  bool number_integer(number_integer_t) override { return AddNumber(false, 0); }  // negative
  bool number_unsigned(number_unsigned_t value) override { return AddNumber(true, value); }
  bool number_float(number_float_t, const string_t&) override { return AddNumber(false, 0); }
  bool string(string_t& value) override {
    Json j;
    j.kind = Json::Kind::kString;
    j.text = std::move(value);
    return Add(std::move(j));
  }
  bool binary(binary_t&) override { return Error("binary data"); }  // not in JSON text
  bool start_object(std::size_t) override { return Open(Json::Kind::kObject); }
  bool key(string_t& name) override {
    OpenContainer& open = open_.back();
    auto& members = open.json->members;
    // A linear search for small objects; a hash set once an object (the header's top level,
    // one member per tensor) grows past a few members.
    bool duplicate;
    if (open.keys != nullptr) {
      duplicate = !open.keys->insert(name).second;
    } else {
      duplicate = open.json->Find(name) != nullptr;
      if (!duplicate && members.size() + 1 >= kHashKeysFrom) {
        open.keys = std::make_unique<std::unordered_set<std::string>>();
        for (const auto& m : members) open.keys->insert(m.first);
        open.keys->insert(name);
      }
    }
    if (duplicate) return Error("duplicate key " + Quote(name));
    members.push_back(Json::Member{std::move(name), Json{}});
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(Json::Kind::kArray); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::json::exception& e) override {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 6: <what>".
    std::string_view what = e.what();
    const size_t column = what.find("column ");
    const size_t colon = column == std::string_view::npos ? column : what.find(": ", column);
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
    // Its "last read" excerpt copies the file's bytes: keep the message printable ASCII.
    std::string message;
    for (const unsigned char c : what) {
      if (c >= 0x20 && c < 0x7F) {
        message += static_cast<char>(c);
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        message += buf;
      }
    }
    return Error("header byte " + U64(position > 0 ? position - 1 : 0) + ": " + message);
  }

 private:
  bool Error(const std::string& what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  static constexpr size_t kHashKeysFrom = 16;
  struct OpenContainer {
    Json* json;
    std::unique_ptr<std::unordered_set<std::string>> keys;  // an object's keys, once it is big
  };

  // The slot the next value fills: the root, an array's new item, or the member key() added.
  Json* Slot() {
    if (open_.empty()) return root_;
    Json* parent = open_.back().json;
    if (parent->kind == Json::Kind::kArray) {
      parent->items.emplace_back();
      return &parent->items.back();
    }
    return &parent->members.back().second;
  }
  bool Add(Json value) {
    *Slot() = std::move(value);
    return true;
  }
  bool AddNumber(bool is_u64, uint64_t value) {
    Json j;
    j.kind = Json::Kind::kNumber;
    j.is_u64 = is_u64;
    j.u64 = value;
    return Add(std::move(j));
  }
  bool Open(Json::Kind kind) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      return Error("nesting deeper than " + std::to_string(kMaxJsonDepth));
    }
    Json* slot = Slot();
    slot->kind = kind;
    open_.push_back(OpenContainer{slot, nullptr});
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  Json* root_;
  // The objects and arrays being filled, outermost first. An element stays put while it is
  // open: only the innermost open container grows.
  std::vector<OpenContainer> open_;
  std::string error_;
};

// A non-negative JSON integer (no sign, fraction or exponent) that fits a u64.
bool ToU64(const Json& j, uint64_t* out) {
  if (j.kind != Json::Kind::kNumber || !j.is_u64) return false;
  *out = j.u64;
  return true;
}

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF).
bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// Writes `s` as a JSON string literal (s is valid UTF-8; control characters escaped).
void AppendJsonString(std::string* out, std::string_view s) {
  *out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') *out += "\\\"";
    else if (c == '\\') *out += "\\\\";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      *out += buf;
    } else {
      *out += ch;
    }
  }
  *out += '"';
}

// ---- files -------------------------------------------------------------------------------------

class File {
 public:
  File() = default;
  explicit File(int fd) : fd_(fd) {}
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { Close(); }
  int fd() const { return fd_; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  int Close() {
    int rc = 0;
    if (fd_ >= 0) rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_ = -1;
};

std::string SystemError(int err) {
  char buf[256];
  // GNU strerror_r returns the message (possibly not in buf).
  return strerror_r(err, buf, sizeof buf);
}

// Reads exactly `size` bytes at `offset`; false with errno (0 for a short file) otherwise.
bool ReadAt(int fd, void* data, uint64_t size, uint64_t offset) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, 1u << 30));
    const ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = 0;
      return false;
    }
    p += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

bool WriteAll(int fd, const void* data, uint64_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, 1u << 30));
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<uint64_t>(n);
  }
  return true;
}

// ---- tensors -----------------------------------------------------------------------------------

bool HostAccessibleCompact(const Tensor* t) {
  return t->storage != nullptr && t->storage->space != nullptr &&
         t->storage->space->HostAccessible() && IsCompact(t->dl);
}
char* FirstByte(const Tensor* t) {
  return static_cast<char*>(t->dl.data) + t->dl.byte_offset;
}

using OwnedTensor = std::unique_ptr<Tensor>;

// What a safetensors handle names: the file's entries, each with the tensor it was loaded into.
struct SafetensorsFile {
  struct Entry {
    std::string name;
    dx_dtype_t dtype = 0;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
    OwnedTensor tensor;
  };
  std::vector<Entry> entries;  // by ascending data offset
  std::vector<std::pair<std::string, std::string>> metadata;
};

// ---- load --------------------------------------------------------------------------------------

dx_status_t Malformed(const std::string& path, const std::string& what) {
  return Fail(DX_INVALID_ARGUMENT, "safetensors file '" + path + "': " + what);
}

// Checks the parsed header against the data section and fills `file` (without tensors).
dx_status_t ReadHeader(const std::string& path, const Json& header, uint64_t data_size,
                       SafetensorsFile* file) {
  if (header.kind != Json::Kind::kObject) return Malformed(path, "the header is not a JSON object");
  for (const auto& [name, value] : header.members) {
    if (name == kMetadataKey) {
      if (value.kind == Json::Kind::kNull) continue;
      if (value.kind != Json::Kind::kObject) {
        return Malformed(path, std::string("__metadata__ is ") + KindName(value.kind) +
                                   ", not an object of strings");
      }
      for (const auto& [key, v] : value.members) {
        if (v.kind != Json::Kind::kString) {
          return Malformed(path, "__metadata__ entry " + Quote(key) + " is " + KindName(v.kind) +
                                     ", not a string");
        }
        if (key.find('\0') != std::string::npos || v.text.find('\0') != std::string::npos) {
          return Malformed(path, "__metadata__ entry " + Quote(key) + " contains a NUL character");
        }
        file->metadata.emplace_back(key, v.text);
      }
      continue;
    }
    const std::string who = "tensor " + Quote(name);
    if (name.find('\0') != std::string::npos) return Malformed(path, who + ": the name contains a NUL character");
    // dx_safetensors_save() refuses an empty name, so a file with one could not be written back.
    if (name.empty()) return Malformed(path, "a tensor has an empty name");
    if (value.kind != Json::Kind::kObject) {
      return Malformed(path, who + ": the entry is " + KindName(value.kind) + ", not an object");
    }
    for (const auto& m : value.members) {
      if (m.first != "dtype" && m.first != "shape" && m.first != "data_offsets") {
        return Malformed(path, who + ": unknown field " + Quote(m.first));
      }
    }
    const Json* dtype = value.Find("dtype");
    const Json* shape = value.Find("shape");
    const Json* offsets = value.Find("data_offsets");
    if (dtype == nullptr) return Malformed(path, who + ": no \"dtype\"");
    if (shape == nullptr) return Malformed(path, who + ": no \"shape\"");
    if (offsets == nullptr) return Malformed(path, who + ": no \"data_offsets\"");
    if (dtype->kind != Json::Kind::kString) return Malformed(path, who + ": \"dtype\" is not a string");

    SafetensorsFile::Entry entry;
    entry.name = name;
    for (const auto& d : kFormatDtypes) {
      if (dtype->text == d.name) entry.dtype = d.dtype;
    }
    if (entry.dtype == 0) {
      for (const char* u : kUnsupportedFormatDtypes) {
        if (dtype->text == u) {
          return Fail(DX_UNSUPPORTED, "safetensors file '" + path + "': " + who + ": dtype " +
                                          dtype->text + " has no deepx equivalent");
        }
      }
      return Malformed(path, who + ": unknown dtype " + Quote(dtype->text));
    }
    if (shape->kind != Json::Kind::kArray) return Malformed(path, who + ": \"shape\" is not an array");
    if (shape->items.size() > static_cast<size_t>(kMaxRank)) {
      return Malformed(path, who + ": rank " + std::to_string(shape->items.size()) +
                                 " exceeds deepx's limit of " + std::to_string(kMaxRank));
    }
    uint64_t numel = 1;
    bool numel_overflow = false;
    for (size_t d = 0; d < shape->items.size(); ++d) {
      uint64_t dim = 0;
      if (!ToU64(shape->items[d], &dim) ||
          dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Malformed(path, who + ": shape[" + std::to_string(d) +
                                   "] is not a non-negative integer that fits int64");
      }
      entry.shape.push_back(static_cast<int64_t>(dim));
      numel_overflow = numel_overflow || __builtin_mul_overflow(numel, dim, &numel);
    }
    if (offsets->kind != Json::Kind::kArray || offsets->items.size() != 2 ||
        !ToU64(offsets->items[0], &entry.begin) || !ToU64(offsets->items[1], &entry.end)) {
      return Malformed(path, who + ": \"data_offsets\" is not [begin, end] of non-negative integers");
    }
    if (entry.end < entry.begin) {
      return Malformed(path, who + ": data_offsets [" + U64(entry.begin) + ", " + U64(entry.end) +
                                 "] end before they begin");
    }
    uint64_t bytes = 0;
    if (numel_overflow || __builtin_mul_overflow(numel, DtypeBytes(entry.dtype), &bytes) ||
        bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Malformed(path, who + ": the shape's byte size overflows");
    }
    if (bytes != entry.end - entry.begin) {
      return Malformed(path, who + ": " + dtype->text + " shape needs " + U64(bytes) +
                                 " bytes but data_offsets [" + U64(entry.begin) + ", " +
                                 U64(entry.end) + "] span " + U64(entry.end - entry.begin));
    }
    if (entry.end > data_size) {
      return Malformed(path, who + ": data_offsets [" + U64(entry.begin) + ", " + U64(entry.end) +
                                 "] run past the data section (" + U64(data_size) +
                                 " bytes; is the file truncated?)");
    }
    file->entries.push_back(std::move(entry));
  }
  // The byte ranges must tile the data section: sorted, each starts where the last ended.
  auto& entries = file->entries;
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.begin < covered) {
      const auto& prev = entries[i - 1];
      return Malformed(path, "tensor " + Quote(e.name) + ": data_offsets [" + U64(e.begin) + ", " +
                                 U64(e.end) + "] overlap tensor " + Quote(prev.name) + " [" +
                                 U64(prev.begin) + ", " + U64(prev.end) + "]");
    }
    if (e.begin > covered) {
      return Malformed(path, "bytes [" + U64(covered) + ", " + U64(e.begin) +
                                 ") of the data section belong to no tensor (before tensor " +
                                 Quote(e.name) + ")");
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Malformed(path, "the data section has " + U64(data_size) + " bytes but the tensors "
                           "cover only " + U64(covered) + " (trailing bytes after the last tensor)");
  }
  return DX_OK;
}

dx_status_t CheckBools(const std::string& path, const SafetensorsFile::Entry& e,
                       const unsigned char* data, uint64_t size) {
  if (e.dtype != DX_DTYPE_BOOL) return DX_OK;
  for (uint64_t i = 0; i < size; ++i) {
    if (data[i] > 1) {
      return Malformed(path, "tensor " + Quote(e.name) + ": BOOL element " + U64(i) +
                                 " has byte value " + std::to_string(data[i]) + " (must be 0 or 1)");
    }
  }
  return DX_OK;
}

dx_status_t Load(Runtime* runtime, const std::string& path, int32_t device_index,
                 std::unique_ptr<SafetensorsFile>* out_file) {
  const Core& core = *runtime->core;
  std::shared_lock<RegistryLock> registry(runtime->core->registry);
  if (device_index < 0 || device_index >= static_cast<int32_t>(core.spaces.size())) {
    return Failf(DX_OUT_OF_RANGE, "dx_safetensors_load: device index %d out of range (%zu devices)",
                 device_index, core.spaces.size());
  }
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not a regular file).
  File f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (f.fd() < 0) {
    const int err = errno;
    return Fail(err == ENOENT ? DX_NOT_FOUND : DX_IO_ERROR,
                "dx_safetensors_load: cannot open '" + path + "': " + SystemError(err));
  }
  struct stat st {};
  if (::fstat(f.fd(), &st) != 0) {
    return Fail(DX_IO_ERROR, "dx_safetensors_load: cannot stat '" + path + "': " + SystemError(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_load: '" + path + "' is not a regular file");
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    return Malformed(path, "the file has " + U64(file_size) +
                               " bytes, fewer than the 8-byte header length (truncated?)");
  }
  unsigned char len_bytes[8];
  if (!ReadAt(f.fd(), len_bytes, 8, 0)) {
    return Fail(DX_IO_ERROR, "dx_safetensors_load: reading '" + path + "' failed: " +
                                 (errno ? SystemError(errno) : std::string("short read")));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | len_bytes[i];
  if (header_size > kMaxHeaderBytes) {
    return Malformed(path, "header length " + U64(header_size) + " exceeds the format's limit of " +
                               U64(kMaxHeaderBytes) + " bytes");
  }
  if (header_size > file_size - 8) {
    return Malformed(path, "header length " + U64(header_size) + " runs past the end of the file (" +
                               U64(file_size) + " bytes; truncated?)");
  }
  std::string header_text(static_cast<size_t>(header_size), '\0');
  if (header_size > 0 && !ReadAt(f.fd(), header_text.data(), header_size, 8)) {
    return Fail(DX_IO_ERROR, "dx_safetensors_load: reading the header of '" + path + "' failed: " +
                                 (errno ? SystemError(errno) : std::string("short read")));
  }
  if (header_text.empty() || header_text[0] != '{') {
    return Malformed(path, "the header does not start with '{'");
  }
  Json header;
  JsonBuilder builder(&header);
  if (!builder.Parse(header_text)) return Malformed(path, "bad JSON: " + builder.error());

  auto file = std::make_unique<SafetensorsFile>();
  const uint64_t data_start = 8 + header_size;
  if (dx_status_t s = ReadHeader(path, header, file_size - data_start, file.get()); s != DX_OK) {
    return s;
  }
  const MemorySpace& space = core.spaces[device_index];
  std::vector<unsigned char> staging;
  for (auto& e : file->entries) {
    if (dx_status_t s = CreateTensor(runtime->core, device_index, e.dtype, e.shape.data(),
                                     static_cast<int32_t>(e.shape.size()), &e.tensor,
                                     "dx_safetensors_load");
        s != DX_OK) {
      return Fail(s, "dx_safetensors_load: tensor " + Quote(e.name) + ": " + PendingMessage());
    }
    Tensor* raw = e.tensor.get();
    const uint64_t bytes = e.end - e.begin;
    if (bytes == 0) continue;
    const uint64_t offset = data_start + e.begin;
    auto read_failed = [&]() {
      return Fail(DX_IO_ERROR, "dx_safetensors_load: reading tensor " + Quote(e.name) + " from '" +
                                   path + "' failed: " +
                                   (errno ? SystemError(errno) : std::string("short read")));
    };
    if (space.HostAccessible() && HostAccessibleCompact(raw)) {
      auto* dst = reinterpret_cast<unsigned char*>(FirstByte(raw));
      if (!ReadAt(f.fd(), dst, bytes, offset)) return read_failed();
      if (dx_status_t s = CheckBools(path, e, dst, bytes); s != DX_OK) return s;
    } else {
      staging.resize(static_cast<size_t>(bytes));
      if (!ReadAt(f.fd(), staging.data(), bytes, offset)) return read_failed();
      if (dx_status_t s = CheckBools(path, e, staging.data(), bytes); s != DX_OK) return s;
      if (dx_status_t s = TensorWrite(raw, staging.data(), bytes, "dx_safetensors_load");
          s != DX_OK) {
        return Fail(s, "dx_safetensors_load: tensor " + Quote(e.name) + ": " + PendingMessage());
      }
    }
  }
  *out_file = std::move(file);
  return DX_OK;
}

// ---- save --------------------------------------------------------------------------------------

struct SaveItem {
  std::string name;
  const Tensor* tensor = nullptr;
  const char* format_dtype = nullptr;
  uint64_t elem_bytes = 0;
  uint64_t bytes = 0;
  uint64_t begin = 0;
};

// Removes the temporary file unless disarmed.
struct TempFileGuard {
  std::string path;
  bool armed = true;
  ~TempFileGuard() {
    if (armed && !path.empty()) ::unlink(path.c_str());
  }
};

// Copies the elements of a strided view of device memory into `out`, compact row-major: one
// device-to-host copy of the span the view covers, then a gather on the host.
dx_status_t GatherDeviceView(const Tensor* t, const SaveItem& item, char* out) {
  const int32_t ndim = t->dl.ndim;
  const uint64_t elem = item.elem_bytes;
  uint64_t span = 1;  // elements from the first to the last one the view reaches, inclusive
  for (int32_t d = 0; d < ndim; ++d) span += static_cast<uint64_t>(t->dl.strides[d]) * (t->dl.shape[d] - 1);
  std::vector<char> window(static_cast<size_t>(span * elem));
  const MemorySpace* space = t->storage->space;
  if (dx_error_t* e = space->desc.copy(space->desc.space_data, window.data(), FirstByte(t),
                                       span * elem, DX_COPY_DEVICE_TO_HOST, nullptr)) {
    return FailFromError(e, "dx_safetensors_save: tensor " + Quote(item.name) + ": copy from '" +
                                space->name + "' failed: ");
  }
  const int64_t numel = Numel(t->dl);
  std::vector<int64_t> index(static_cast<size_t>(ndim), 0);
  int64_t offset = 0;  // in elements, into `window`
  for (int64_t i = 0; i < numel; ++i) {
    std::memcpy(out + static_cast<uint64_t>(i) * elem, window.data() + offset * elem, elem);
    for (int32_t d = ndim - 1; d >= 0; --d) {
      if (++index[d] < t->dl.shape[d]) {
        offset += t->dl.strides[d];
        break;
      }
      offset -= t->dl.strides[d] * (t->dl.shape[d] - 1);
      index[d] = 0;
    }
  }
  return DX_OK;
}

dx_status_t WriteTensor(int fd, const SaveItem& item, const std::string& tmp_path) {
  if (item.bytes == 0) return DX_OK;
  const Tensor* t = item.tensor;
  auto write_failed = [&]() {
    return Fail(DX_IO_ERROR, "dx_safetensors_save: writing tensor " + Quote(item.name) + " to '" +
                                 tmp_path + "' failed: " + SystemError(errno));
  };
  if (HostAccessibleCompact(t)) {
    if (!WriteAll(fd, FirstByte(t), item.bytes)) return write_failed();
    return DX_OK;
  }
  std::vector<char> staging(static_cast<size_t>(item.bytes));
  const Storage* storage = t->storage;
  const bool device_view = storage != nullptr && storage->space != nullptr &&
                           !storage->space->HostAccessible() && !IsCompact(t->dl);
  if (device_view) {
    // dx_tensor_read() refuses strided views of device memory: copy the byte range the view
    // spans to the host through the space, then gather the elements there.
    if (dx_status_t s = GatherDeviceView(t, item, staging.data()); s != DX_OK) return s;
  } else if (dx_status_t s = TensorRead(t, staging.data(), item.bytes, "dx_safetensors_save");
             s != DX_OK) {
    // Strided host tensors and compact device tensors: the host's read path does it.
    return Fail(s, "dx_safetensors_save: tensor " + Quote(item.name) + ": " + PendingMessage());
  }
  if (!WriteAll(fd, staging.data(), item.bytes)) return write_failed();
  return DX_OK;
}

dx_status_t Save(Runtime* runtime, const std::string& path, const char* const* names,
                 const dx_tensor_t* const* tensors, int64_t count,
                 const dx_safetensors_save_options_t* options) {
  const char* kWhere = "dx_safetensors_save";
  if (count < 0) return Failf(DX_INVALID_ARGUMENT, "%s: count %lld is negative", kWhere, (long long)count);
  if (count > 0 && (names == nullptr || tensors == nullptr)) {
    return Failf(DX_INVALID_ARGUMENT, "%s: names or tensors is null", kWhere);
  }
  dx_safetensors_save_options_t opts;
  std::memset(&opts, 0, sizeof opts);
  if (options != nullptr) {
    if (options->struct_size < DX_STRUCT_SIZE(dx_safetensors_save_options_t, metadata_count)) {
      return Failf(DX_INVALID_ARGUMENT,
                   "%s: options->struct_size (%zu) is unset or too small; set it with "
                   "DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0",
                   kWhere, options->struct_size);
    }
    std::memcpy(&opts, options,
                std::min<size_t>(options->struct_size,
                         DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0));
  }
  if (opts.metadata_count < 0) {
    return Failf(DX_INVALID_ARGUMENT, "%s: metadata_count is negative", kWhere);
  }
  if (opts.metadata_count > 0 && (opts.metadata_keys == nullptr || opts.metadata_values == nullptr)) {
    return Failf(DX_INVALID_ARGUMENT, "%s: metadata_keys or metadata_values is null", kWhere);
  }
  std::vector<std::pair<std::string, std::string>> metadata;
  for (int64_t i = 0; i < opts.metadata_count; ++i) {
    const char* key = opts.metadata_keys[i];
    const char* value = opts.metadata_values[i];
    if (key == nullptr || value == nullptr) {
      return Failf(DX_INVALID_ARGUMENT, "%s: metadata entry %lld has a null key or value", kWhere,
                   (long long)i);
    }
    if (!ValidUtf8(key) || !ValidUtf8(value)) {
      return Fail(DX_INVALID_ARGUMENT, std::string(kWhere) + ": metadata entry " + Quote(key) +
                                           " is not valid UTF-8");
    }
    for (const auto& m : metadata) {
      if (m.first == key) {
        return Fail(DX_ALREADY_EXISTS, std::string(kWhere) + ": metadata key " + Quote(key) +
                                           " is given twice");
      }
    }
    metadata.emplace_back(key, value);
  }

  std::vector<SaveItem> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if (names[i] == nullptr) return Failf(DX_INVALID_ARGUMENT, "%s: names[%lld] is null", kWhere, (long long)i);
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(tensors[i], kWhere, "a tensor", &tensor)) {
      return Failf(st, "%s (tensors[%lld], %s)", PendingMessage().c_str(), (long long)i,
                   Quote(names[i]).c_str());
    }
    SaveItem item;
    item.name = names[i];
    item.tensor = tensor;
    const std::string who = std::string(kWhere) + ": tensor " + Quote(item.name);
    if (item.name.empty()) return Failf(DX_INVALID_ARGUMENT, "%s: names[%lld] is empty", kWhere, (long long)i);
    if (item.name == kMetadataKey) return Fail(DX_INVALID_ARGUMENT, who + ": the name is reserved");
    if (!ValidUtf8(item.name)) return Fail(DX_INVALID_ARGUMENT, who + ": the name is not valid UTF-8");
    const Storage* storage = item.tensor->storage;
    if (storage != nullptr && storage->core != nullptr && storage->core != runtime->core) {
      return Fail(DX_INVALID_ARGUMENT, who + ": the tensor belongs to another runtime");
    }
    const dx_dtype_t dtype = PackDtype(item.tensor->dl.dtype);
    item.format_dtype = FormatName(dtype);
    if (item.format_dtype == nullptr) {
      return Fail(DX_UNSUPPORTED, who + ": dtype " + DtypeName(dtype) + " has no safetensors name");
    }
    item.elem_bytes = DtypeBytes(dtype);
    item.bytes = static_cast<uint64_t>(Numel(item.tensor->dl)) * item.elem_bytes;
    items.push_back(std::move(item));
  }
  // Largest elements first, then by name: with the data section 8-aligned, every tensor's bytes
  // are aligned to its element size (the reference writer's order). Names must be unique.
  std::vector<SaveItem*> order;
  for (auto& item : items) order.push_back(&item);
  std::sort(order.begin(), order.end(), [](const SaveItem* a, const SaveItem* b) {
    return a->elem_bytes != b->elem_bytes ? a->elem_bytes > b->elem_bytes : a->name < b->name;
  });
  {
    std::vector<std::string_view> sorted_names;
    for (const auto& item : items) sorted_names.push_back(item.name);
    std::sort(sorted_names.begin(), sorted_names.end());
    for (size_t i = 1; i < sorted_names.size(); ++i) {
      if (sorted_names[i] == sorted_names[i - 1]) {
        return Fail(DX_ALREADY_EXISTS, std::string(kWhere) + ": tensor name " +
                                           Quote(sorted_names[i]) + " is given twice");
      }
    }
  }
  uint64_t offset = 0;
  for (SaveItem* item : order) {
    item->begin = offset;
    offset += item->bytes;
  }

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) header += ',';
      AppendJsonString(&header, metadata[i].first);
      header += ':';
      AppendJsonString(&header, metadata[i].second);
    }
    header += '}';
    first = false;
  }
  for (const SaveItem* item : order) {
    if (!first) header += ',';
    first = false;
    AppendJsonString(&header, item->name);
    header += ":{\"dtype\":\"";
    header += item->format_dtype;
    header += "\",\"shape\":[";
    for (int32_t d = 0; d < item->tensor->dl.ndim; ++d) {
      if (d) header += ',';
      header += std::to_string(item->tensor->dl.shape[d]);
    }
    header += "],\"data_offsets\":[" + U64(item->begin) + "," + U64(item->begin + item->bytes) + "]}";
  }
  header += '}';
  // Pad with spaces so the data section starts 8-byte aligned.
  while ((8 + header.size()) % 8 != 0) header += ' ';
  if (header.size() > kMaxHeaderBytes) {
    return Fail(DX_OUT_OF_RANGE, std::string(kWhere) + ": the header would exceed the format's "
                                 "limit of 100 MB");
  }

  // Write a temporary file next to the target, then rename it over the target: atomic on POSIX.
  static std::atomic<uint64_t> counter{0};
  TempFileGuard tmp;
  File out;
  for (int attempt = 0; attempt < 100 && out.fd() < 0; ++attempt) {
    tmp.path = path + ".tmp." + std::to_string(::getpid()) + "." +
               std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
    const int fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      out.Reset(fd);
      break;
    }
    if (errno != EEXIST) {
      const int err = errno;
      tmp.path.clear();
      return Fail(DX_IO_ERROR, std::string(kWhere) + ": cannot create a temporary file next to '" +
                                   path + "': " + SystemError(err));
    }
  }
  if (out.fd() < 0) {
    tmp.path.clear();
    return Fail(DX_IO_ERROR, std::string(kWhere) + ": cannot create a temporary file next to '" +
                                 path + "'");
  }
  unsigned char len_bytes[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len_bytes[i] = static_cast<unsigned char>(n & 0xFF);
  if (!WriteAll(out.fd(), len_bytes, 8) || !WriteAll(out.fd(), header.data(), header.size())) {
    return Fail(DX_IO_ERROR, std::string(kWhere) + ": writing '" + tmp.path + "' failed: " +
                                 SystemError(errno));
  }
  for (const SaveItem* item : order) {
    if (dx_status_t s = WriteTensor(out.fd(), *item, tmp.path); s != DX_OK) return s;
  }
  if (::fsync(out.fd()) != 0 || out.Close() != 0) {
    return Fail(DX_IO_ERROR, std::string(kWhere) + ": flushing '" + tmp.path + "' failed: " +
                                 SystemError(errno));
  }
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    return Fail(DX_IO_ERROR, std::string(kWhere) + ": renaming '" + tmp.path + "' to '" + path +
                                 "' failed: " + SystemError(errno));
  }
  tmp.armed = false;
  // Make the rename itself durable; a failure here leaves a complete file, so it is not fatal.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  File dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.fd() >= 0) (void)::fsync(dir_fd.fd());
  return DX_OK;
}

// Resolves a safetensors handle.
dx_status_t ResolveFile(const dx_safetensors_t* handle, const char* where,
                        const SafetensorsFile** out) {
  HandleProblem problem;
  void* object = Handles(HandleKind::kSafetensors).Get(reinterpret_cast<uint64_t>(handle), &problem);
  if (object == nullptr) return FailHandle(problem, where, "file", "safetensors file");
  *out = static_cast<const SafetensorsFile*>(object);
  return DX_OK;
}

const SafetensorsFile::Entry* EntryAt(const dx_safetensors_t* handle, int64_t index,
                                      const char* where, dx_status_t* status) {
  const SafetensorsFile* file = nullptr;
  if ((*status = ResolveFile(handle, where, &file)) != DX_OK) return nullptr;
  if (index < 0 || index >= static_cast<int64_t>(file->entries.size())) {
    *status = Failf(DX_OUT_OF_RANGE, "%s: index %lld out of range (%zu tensors)", where,
                    (long long)index, file->entries.size());
    return nullptr;
  }
  return &file->entries[static_cast<size_t>(index)];
}

}  // namespace
}  // namespace deepx::host

using namespace deepx::host;

extern "C" {

DX_EXPORT dx_error_t* dx_safetensors_save(dx_runtime_t* runtime, const char* path,
                                          const char* const* names,
                                          const dx_tensor_t* const* tensors, int64_t count,
                                          const dx_safetensors_save_options_t* options) {
  return Guard([&]() -> dx_status_t {
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_safetensors_save", "runtime", &rt)) return st;
    if (path == nullptr || path[0] == '\0') {
      return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_save: path is null or empty");
    }
    return Save(rt, path, names, tensors, count, options);
  });
}

DX_EXPORT dx_error_t* dx_safetensors_load(dx_runtime_t* runtime, const char* path,
                                          int32_t device_index, dx_safetensors_t** out_file) {
  return Guard([&]() -> dx_status_t {
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_safetensors_load", "runtime", &rt)) return st;
    if (path == nullptr || path[0] == '\0') {
      return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_load: path is null or empty");
    }
    if (out_file == nullptr) return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_load: out_file is null");
    if (rt->core->remote) {
      // It allocates through the runtime's devices in this process; a remote runtime has none.
      return Fail(DX_UNSUPPORTED,
                  "dx_safetensors_load: not available on a runtime connected to deepxd: it "
                  "allocates in devices of this process, of which a remote runtime has none "
                  "(load into an in-process runtime and dx_tensor_copy() the tensors over)");
    }
    std::unique_ptr<SafetensorsFile> file;
    if (dx_status_t st = Load(rt, path, device_index, &file)) return st;
    uint64_t h = Handles(HandleKind::kSafetensors).Add(file.get());
    if (h == 0) {
      return Fail(DX_RESOURCE_EXHAUSTED, "dx_safetensors_load: no safetensors handle is free");
    }
    file.release();
    *out_file = reinterpret_cast<dx_safetensors_t*>(h);
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_safetensors_destroy(dx_safetensors_t* handle) {
  return Guard([&]() -> dx_status_t {
    if (handle == nullptr) return DX_OK;
    HandleProblem problem;
    void* object =
        Handles(HandleKind::kSafetensors).Remove(reinterpret_cast<uint64_t>(handle), &problem);
    if (object == nullptr) {
      return FailHandle(problem, "dx_safetensors_destroy", "file", "safetensors file");
    }
    delete static_cast<SafetensorsFile*>(object);
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_safetensors_tensor_count(const dx_safetensors_t* handle,
                                                  int64_t* out_count) {
  return Guard([&]() -> dx_status_t {
    const SafetensorsFile* file = nullptr;
    if (dx_status_t st = ResolveFile(handle, "dx_safetensors_tensor_count", &file)) return st;
    if (out_count == nullptr) {
      return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_tensor_count: out_count is null");
    }
    *out_count = static_cast<int64_t>(file->entries.size());
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_safetensors_tensor_info(const dx_safetensors_t* file, int64_t index,
                                                 dx_safetensors_tensor_info_t* out_info) {
  return Guard([&]() -> dx_status_t {
    dx_status_t status = DX_OK;
    const auto* e = EntryAt(file, index, "dx_safetensors_tensor_info", &status);
    if (e == nullptr) return status;
    if (out_info == nullptr) return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_tensor_info: out_info is null");
    const size_t declared = out_info->struct_size;
    if (declared < DX_STRUCT_SIZE(dx_safetensors_tensor_info_t, name)) {
      return Failf(DX_INVALID_ARGUMENT,
                   "dx_safetensors_tensor_info: out_info->struct_size (%zu) is unset or too small; "
                   "set it with DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0",
                   declared);
    }
    dx_safetensors_tensor_info_t full;
    std::memset(&full, 0, sizeof full);
    full.name = e->name.c_str();
    full.dtype = e->dtype;
    full.ndim = static_cast<int32_t>(e->shape.size());
    full.shape = e->shape.empty() ? nullptr : e->shape.data();
    full.data_offset = e->begin;
    full.byte_size = e->end - e->begin;
    const size_t known = DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0;
    std::memcpy(reinterpret_cast<char*>(out_info) + sizeof(size_t),
                reinterpret_cast<const char*>(&full) + sizeof(size_t),
                std::min(known, declared) - sizeof(size_t));
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_safetensors_find(const dx_safetensors_t* handle, const char* name,
                                          int64_t* out_index) {
  return Guard([&]() -> dx_status_t {
    const SafetensorsFile* file = nullptr;
    if (dx_status_t st = ResolveFile(handle, "dx_safetensors_find", &file)) return st;
    if (name == nullptr || out_index == nullptr) {
      return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_find: null argument");
    }
    for (size_t i = 0; i < file->entries.size(); ++i) {
      if (file->entries[i].name == name) {
        *out_index = static_cast<int64_t>(i);
        return DX_OK;
      }
    }
    return Fail(DX_NOT_FOUND, "dx_safetensors_find: no tensor named " + Quote(name));
  });
}

DX_EXPORT dx_error_t* dx_safetensors_get_tensor(const dx_safetensors_t* file, int64_t index,
                                                dx_tensor_t** out_tensor) {
  return Guard([&]() -> dx_status_t {
    dx_status_t status = DX_OK;
    const auto* e = EntryAt(file, index, "dx_safetensors_get_tensor", &status);
    if (e == nullptr) return status;
    if (out_tensor == nullptr) {
      return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_get_tensor: out_tensor is null");
    }
    std::unique_ptr<Tensor> view;
    if (dx_status_t st = ViewTensor(e->tensor.get(), e->shape.data(), nullptr,
                                    static_cast<int32_t>(e->shape.size()), 0, &view,
                                    "dx_safetensors_get_tensor")) {
      return st;
    }
    view->SetCore(e->tensor->core);
    return Issue(std::move(view), out_tensor, "dx_safetensors_get_tensor");
  });
}

DX_EXPORT dx_error_t* dx_safetensors_metadata_count(const dx_safetensors_t* handle,
                                                    int64_t* out_count) {
  return Guard([&]() -> dx_status_t {
    const SafetensorsFile* file = nullptr;
    if (dx_status_t st = ResolveFile(handle, "dx_safetensors_metadata_count", &file)) return st;
    if (out_count == nullptr) {
      return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_metadata_count: out_count is null");
    }
    *out_count = static_cast<int64_t>(file->metadata.size());
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_safetensors_metadata(const dx_safetensors_t* handle, int64_t index,
                                              const char** out_key, const char** out_value) {
  return Guard([&]() -> dx_status_t {
    const SafetensorsFile* file = nullptr;
    if (dx_status_t st = ResolveFile(handle, "dx_safetensors_metadata", &file)) return st;
    if (index < 0 || index >= static_cast<int64_t>(file->metadata.size())) {
      return Failf(DX_OUT_OF_RANGE,
                   "dx_safetensors_metadata: index %lld out of range (%zu entries)",
                   (long long)index, file->metadata.size());
    }
    const auto& m = file->metadata[static_cast<size_t>(index)];
    if (out_key) *out_key = m.first.c_str();
    if (out_value) *out_value = m.second.c_str();
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_safetensors_metadata_find(const dx_safetensors_t* handle,
                                                   const char* key, const char** out_value) {
  return Guard([&]() -> dx_status_t {
    const SafetensorsFile* file = nullptr;
    if (dx_status_t st = ResolveFile(handle, "dx_safetensors_metadata_find", &file)) return st;
    if (key == nullptr || out_value == nullptr) {
      return Fail(DX_INVALID_ARGUMENT, "dx_safetensors_metadata_find: null argument");
    }
    for (const auto& m : file->metadata) {
      if (m.first == key) {
        *out_value = m.second.c_str();
        return DX_OK;
      }
    }
    return Fail(DX_NOT_FOUND, "dx_safetensors_metadata_find: no metadata key " + Quote(key));
  });
}

}  // extern "C"
