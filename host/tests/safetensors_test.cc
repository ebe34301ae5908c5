// dx_safetensors_*: round trips of every dtype and of the awkward shapes, the exact byte layout
// against a hand-built file, atomic saves, strided and device tensors, and a battery of
// malformed files that must each be refused with a clear status and message, never a crash.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "deepx/safetensors.h"
#include "dx_test_util.h"

namespace {

using deepx_test::Code;
using deepx_test::LastError;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string U64Le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// A safetensors file from a header and a data section, as the format defines it.
std::string MakeFile(const std::string& header, const std::string& data) {
  return U64Le(header.size()) + header + data;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dx_runtime_options_t options{};
    options.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
    options.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
    ASSERT_EQ(Code(dx_runtime_create(&options, &rt_)), DX_OK);
    ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, HOST_TEST_PLUGIN, nullptr)), DX_OK)
        << LastError();
    ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, SAFETENSORS_DEVICE_PLUGIN, nullptr)), DX_OK)
        << LastError();
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "hosttest", &host_)), DX_OK);
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "scrambled", &device_)), DX_OK);
    char templ[] = "/tmp/deepx-safetensors-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    for (auto* t : owned_) Code(dx_tensor_destroy(t));
    for (const auto& n : ListDir(dir_)) std::remove((dir_ + "/" + n).c_str());
    rmdir(dir_.c_str());
    Code(dx_runtime_destroy(rt_));
  }

  std::string Path(const char* name) const { return dir_ + "/" + name; }

  dx_tensor_t* Tensor(dx_dtype_t dtype, std::vector<int64_t> shape, const std::string& bytes,
                      int32_t device = -1) {
    dx_tensor_t* t = nullptr;
    EXPECT_EQ(Code(dx_tensor_create(rt_, device < 0 ? host_ : device, dtype, shape.data(),
                                    static_cast<int32_t>(shape.size()), &t)),
              DX_OK)
        << LastError();
    EXPECT_EQ(Code(dx_tensor_write(t, bytes.data(), bytes.size())), DX_OK) << LastError();
    owned_.push_back(t);
    return t;
  }

  static std::string Bytes(const dx_tensor_t* t) {
    int64_t numel = 0;
    dx_dtype_t dtype = 0;
    EXPECT_EQ(Code(dx_tensor_numel(t, &numel)), DX_OK);
    EXPECT_EQ(Code(dx_tensor_dtype(t, &dtype)), DX_OK);
    const uint64_t size = static_cast<uint64_t>(numel) * (((dtype >> 8) & 0xFF) / 8);
    std::string out(size, '\0');
    EXPECT_EQ(Code(dx_tensor_read(t, out.data(), size)), DX_OK) << LastError();
    return out;
  }

  static dx_safetensors_tensor_info_t Info(const dx_safetensors_t* f, int64_t i) {
    dx_safetensors_tensor_info_t info{};
    info.struct_size = DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0;
    EXPECT_EQ(Code(dx_safetensors_tensor_info(f, i, &info)), DX_OK) << LastError();
    return info;
  }

  // Loads `bytes` as a file and expects `status` with `needle` in the message.
  void ExpectRefused(const std::string& bytes, dx_status_t status, const std::string& needle) {
    const std::string path = Path("bad.safetensors");
    WriteFile(path, bytes);
    dx_safetensors_t* f = nullptr;
    const dx_status_t got = Code(dx_safetensors_load(rt_, path.c_str(), host_, &f));
    EXPECT_EQ(got, status) << dx_status_string(got) << ": " << LastError();
    EXPECT_EQ(f, nullptr);
    EXPECT_NE(LastError().find(needle), std::string::npos)
        << "message: " << LastError() << "\nexpected to contain: " << needle;
    if (f) Code(dx_safetensors_destroy(f));
  }

  dx_runtime_t* rt_ = nullptr;
  int32_t host_ = -1, device_ = -1;
  std::string dir_;
  std::vector<dx_tensor_t*> owned_;
};

struct DtypeCase {
  const char* name;
  dx_dtype_t dtype;
  size_t bytes;
};
const DtypeCase kDtypes[] = {
    {"f64", DX_DTYPE_F64, 8}, {"f32", DX_DTYPE_F32, 4}, {"f16", DX_DTYPE_F16, 2},
    {"bf16", DX_DTYPE_BF16, 2}, {"i64", DX_DTYPE_I64, 8}, {"i32", DX_DTYPE_I32, 4},
    {"i16", DX_DTYPE_I16, 2}, {"i8", DX_DTYPE_I8, 1},     {"u8", DX_DTYPE_U8, 1},
    {"bool", DX_DTYPE_BOOL, 1},
};

std::string Pattern(size_t n, unsigned seed, bool boolean) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    s[i] = boolean ? static_cast<char>((i * 7 + seed) % 3 == 0)
                   : static_cast<char>((i * 131 + seed * 17 + 3) & 0xFF);
  }
  return s;
}

TEST_F(Safetensors, RoundTripsEveryDtypeWithMetadata) {
  std::vector<const char*> names;
  std::vector<const dx_tensor_t*> tensors;
  std::vector<std::string> contents;
  unsigned seed = 1;
  for (const auto& d : kDtypes) {
    contents.push_back(Pattern(6 * d.bytes, seed++, d.dtype == DX_DTYPE_BOOL));
    tensors.push_back(Tensor(d.dtype, {2, 3}, contents.back()));
    names.push_back(d.name);
  }
  const char* keys[] = {"format", "note \"quoted\" \xC3\xA9\n"};
  const char* values[] = {"pt", "line1\nline2\t\\ \xE2\x82\xAC"};
  dx_safetensors_save_options_t options{};
  options.struct_size = DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0;
  options.metadata_count = 2;
  options.metadata_keys = keys;
  options.metadata_values = values;
  const std::string path = Path("all.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names.data(), tensors.data(),
                                     static_cast<int64_t>(names.size()), &options)),
            DX_OK)
      << LastError();
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"all.safetensors"});  // no temp file left

  dx_safetensors_t* f = nullptr;
  ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK) << LastError();
  int64_t count = 0;
  ASSERT_EQ(Code(dx_safetensors_tensor_count(f, &count)), DX_OK);
  ASSERT_EQ(count, 10);
  uint64_t previous_end = 0;
  for (int64_t i = 0; i < count; ++i) {
    const auto info = Info(f, i);
    EXPECT_EQ(info.data_offset, previous_end) << "tensors are listed in file order";
    EXPECT_EQ(info.data_offset % ((info.dtype >> 8 & 0xFF) / 8), 0u) << "aligned to the element";
    previous_end = info.data_offset + info.byte_size;
  }
  for (size_t k = 0; k < names.size(); ++k) {
    SCOPED_TRACE(names[k]);
    int64_t index = -1;
    ASSERT_EQ(Code(dx_safetensors_find(f, names[k], &index)), DX_OK);
    const auto info = Info(f, index);
    EXPECT_STREQ(info.name, names[k]);
    EXPECT_EQ(info.dtype, kDtypes[k].dtype);
    ASSERT_EQ(info.ndim, 2);
    EXPECT_EQ(info.shape[0], 2);
    EXPECT_EQ(info.shape[1], 3);
    EXPECT_EQ(info.byte_size, 6 * kDtypes[k].bytes);
    dx_tensor_t* t = nullptr;
    ASSERT_EQ(Code(dx_safetensors_get_tensor(f, index, &t)), DX_OK);
    owned_.push_back(t);
    int32_t device = -1;
    EXPECT_EQ(Code(dx_tensor_device(t, &device)), DX_OK);
    EXPECT_EQ(device, host_);
    EXPECT_EQ(Bytes(t), contents[k]);
  }
  int64_t metadata_count = 0;
  ASSERT_EQ(Code(dx_safetensors_metadata_count(f, &metadata_count)), DX_OK);
  ASSERT_EQ(metadata_count, 2);
  for (int i = 0; i < 2; ++i) {
    const char* key = nullptr;
    const char* value = nullptr;
    ASSERT_EQ(Code(dx_safetensors_metadata(f, i, &key, &value)), DX_OK);
    EXPECT_STREQ(key, keys[i]);
    EXPECT_STREQ(value, values[i]);
    const char* found = nullptr;
    ASSERT_EQ(Code(dx_safetensors_metadata_find(f, keys[i], &found)), DX_OK);
    EXPECT_STREQ(found, values[i]);
  }
  const char* missing = nullptr;
  EXPECT_EQ(Code(dx_safetensors_metadata_find(f, "nope", &missing)), DX_NOT_FOUND);
  int64_t index = 0;
  EXPECT_EQ(Code(dx_safetensors_find(f, "nope", &index)), DX_NOT_FOUND);
  EXPECT_NE(LastError().find("'nope'"), std::string::npos);
  // Tensors handed out outlive the file object.
  dx_tensor_t* survivor = nullptr;
  ASSERT_EQ(Code(dx_safetensors_find(f, "i32", &index)), DX_OK);
  ASSERT_EQ(Code(dx_safetensors_get_tensor(f, index, &survivor)), DX_OK);
  owned_.push_back(survivor);
  EXPECT_EQ(Code(dx_safetensors_destroy(f)), DX_OK);
  EXPECT_EQ(Bytes(survivor), contents[5]);
}

TEST_F(Safetensors, EmptyRankZeroAndNoTensors) {
  const float scalar = 2.5f;
  dx_tensor_t* s = Tensor(DX_DTYPE_F32, {}, std::string(reinterpret_cast<const char*>(&scalar), 4));
  dx_tensor_t* e1 = Tensor(DX_DTYPE_I64, {0, 4}, "");
  dx_tensor_t* e2 = Tensor(DX_DTYPE_BOOL, {3, 0, 2}, "");
  const char* names[] = {"scalar", "empty_a", "empty_b"};
  const dx_tensor_t* tensors[] = {s, e1, e2};
  const std::string path = Path("shapes.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, tensors, 3, nullptr)), DX_OK)
      << LastError();
  dx_safetensors_t* f = nullptr;
  ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK) << LastError();
  int64_t index = -1;
  ASSERT_EQ(Code(dx_safetensors_find(f, "scalar", &index)), DX_OK);
  auto info = Info(f, index);
  EXPECT_EQ(info.ndim, 0);
  EXPECT_EQ(info.shape, nullptr);
  EXPECT_EQ(info.byte_size, 4u);
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_safetensors_get_tensor(f, index, &t)), DX_OK);
  owned_.push_back(t);
  float back = 0;
  ASSERT_EQ(Code(dx_tensor_read(t, &back, 4)), DX_OK);
  EXPECT_EQ(back, 2.5f);
  ASSERT_EQ(Code(dx_safetensors_find(f, "empty_b", &index)), DX_OK);
  info = Info(f, index);
  ASSERT_EQ(info.ndim, 3);
  EXPECT_EQ(info.shape[1], 0);
  EXPECT_EQ(info.byte_size, 0u);
  int64_t metadata_count = -1;
  EXPECT_EQ(Code(dx_safetensors_metadata_count(f, &metadata_count)), DX_OK);
  EXPECT_EQ(metadata_count, 0);
  Code(dx_safetensors_destroy(f));

  // No tensors at all: a valid file whose header is an empty object.
  const std::string empty_path = Path("nothing.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, empty_path.c_str(), nullptr, nullptr, 0, nullptr)), DX_OK);
  EXPECT_EQ(ReadFile(empty_path), MakeFile("{}      ", ""));
  ASSERT_EQ(Code(dx_safetensors_load(rt_, empty_path.c_str(), host_, &f)), DX_OK);
  int64_t count = -1;
  EXPECT_EQ(Code(dx_safetensors_tensor_count(f, &count)), DX_OK);
  EXPECT_EQ(count, 0);
  Code(dx_safetensors_destroy(f));
}

// The bytes we write are exactly what the format (and the reference writer) specifies: the
// header length, a compact JSON header (metadata first, then largest elements first, then by
// name), padded with spaces to an 8-byte boundary, then the packed data.
TEST_F(Safetensors, ByteLayoutMatchesTheSpecification) {
  const float a[2] = {1.0f, -2.0f};
  const int8_t b[3] = {1, -1, 127};
  dx_tensor_t* ta = Tensor(DX_DTYPE_F32, {2}, std::string(reinterpret_cast<const char*>(a), 8));
  dx_tensor_t* tb = Tensor(DX_DTYPE_I8, {3}, std::string(reinterpret_cast<const char*>(b), 3));
  const char* names[] = {"b", "a"};
  const dx_tensor_t* tensors[] = {tb, ta};
  const char* keys[] = {"format"};
  const char* values[] = {"pt"};
  dx_safetensors_save_options_t options{};
  options.struct_size = DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0;
  options.metadata_count = 1;
  options.metadata_keys = keys;
  options.metadata_values = values;
  const std::string path = Path("layout.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, tensors, 2, &options)), DX_OK)
      << LastError();
  std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  const std::string expected =
      MakeFile(header, std::string(reinterpret_cast<const char*>(a), 8) +
                           std::string(reinterpret_cast<const char*>(b), 3));
  EXPECT_EQ(ReadFile(path), expected);

  // A hand-built file in another writer's style (whitespace, key order, escapes, no padding)
  // reads back to the same tensors.
  const std::string hand_header =
      "{ \"b\" : { \"data_offsets\" : [ 8 , 11 ], \"shape\" : [ 3 ], \"dtype\" : \"I8\" },\n"
      "  \"\\u0061\": {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [0, 8]},\n"
      "  \"caf\\u00e9 \\ud83d\\ude00\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [11, 11]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"} }  \n";
  const std::string hand_path = Path("hand.safetensors");
  WriteFile(hand_path, MakeFile(hand_header, std::string(reinterpret_cast<const char*>(a), 8) +
                                                 std::string(reinterpret_cast<const char*>(b), 3)));
  dx_safetensors_t* f = nullptr;
  ASSERT_EQ(Code(dx_safetensors_load(rt_, hand_path.c_str(), host_, &f)), DX_OK)
      << LastError();
  int64_t index = -1;
  ASSERT_EQ(Code(dx_safetensors_find(f, "a", &index)), DX_OK);
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_safetensors_get_tensor(f, index, &t)), DX_OK);
  owned_.push_back(t);
  EXPECT_EQ(Bytes(t), std::string(reinterpret_cast<const char*>(a), 8));
  ASSERT_EQ(Code(dx_safetensors_find(f, "b", &index)), DX_OK);
  ASSERT_EQ(Code(dx_safetensors_get_tensor(f, index, &t)), DX_OK);
  owned_.push_back(t);
  EXPECT_EQ(Bytes(t), std::string(reinterpret_cast<const char*>(b), 3));
  EXPECT_EQ(Code(dx_safetensors_find(f, "caf\xC3\xA9 \xF0\x9F\x98\x80", &index)), DX_OK);
  const char* format = nullptr;
  EXPECT_EQ(Code(dx_safetensors_metadata_find(f, "format", &format)), DX_OK);
  EXPECT_STREQ(format, "pt");
  Code(dx_safetensors_destroy(f));
}

TEST_F(Safetensors, StridedViewsAreWrittenCompactly) {
  std::vector<float> values(24);
  for (int i = 0; i < 24; ++i) values[i] = static_cast<float>(i);
  dx_tensor_t* base = Tensor(DX_DTYPE_F32, {4, 6},
                             std::string(reinterpret_cast<const char*>(values.data()), 96));
  // The transpose [6, 4] and a broadcast row [3, 6] with stride 0.
  const int64_t tshape[] = {6, 4}, tstrides[] = {1, 6};
  const int64_t bshape[] = {3, 6}, bstrides[] = {0, 1};
  dx_tensor_t* transposed = nullptr;
  dx_tensor_t* broadcast = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, tshape, tstrides, 2, 0, &transposed)), DX_OK);
  owned_.push_back(transposed);
  ASSERT_EQ(Code(dx_tensor_view(base, bshape, bstrides, 2, 6, &broadcast)), DX_OK);
  owned_.push_back(broadcast);
  const char* names[] = {"t", "b"};
  const dx_tensor_t* tensors[] = {transposed, broadcast};
  const std::string path = Path("strided.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, tensors, 2, nullptr)), DX_OK)
      << LastError();
  dx_safetensors_t* f = nullptr;
  ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK) << LastError();
  int64_t index = -1;
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_safetensors_find(f, "t", &index)), DX_OK);
  ASSERT_EQ(Code(dx_safetensors_get_tensor(f, index, &t)), DX_OK);
  owned_.push_back(t);
  std::vector<float> got(24);
  ASSERT_EQ(Code(dx_tensor_read(t, got.data(), 96)), DX_OK);
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(got[r * 4 + c], values[c * 6 + r]);
  }
  ASSERT_EQ(Code(dx_safetensors_find(f, "b", &index)), DX_OK);
  EXPECT_EQ(Info(f, index).byte_size, 72u);
  ASSERT_EQ(Code(dx_safetensors_get_tensor(f, index, &t)), DX_OK);
  owned_.push_back(t);
  std::vector<float> row(18);
  ASSERT_EQ(Code(dx_tensor_read(t, row.data(), 72)), DX_OK);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 6; ++c) EXPECT_EQ(row[r * 6 + c], values[6 + c]);
  }
  Code(dx_safetensors_destroy(f));
}

// A space registered with the 1.0 struct size before `stats` existed has no statistics.
TEST_F(Safetensors, DeviceStatsOfASpaceWithoutTheSlotAreUnsupported) {
  dx_memory_stats_t st{};
  st.struct_size = DX_MEMORY_STATS_SIZE_1_0;
  EXPECT_EQ(Code(dx_runtime_device_stats(rt_, device_, &st)), DX_UNSUPPORTED);
  EXPECT_NE(LastError().find("reports no statistics"), std::string::npos)
      << LastError();
}

// dx_tensor_read / dx_tensor_write of strided views of device memory (this fixture's
// "scrambled" space is reachable only through its copy slot): reads copy the view's byte span
// and gather, writes copy run by run and leave the bytes between the view's elements alone.
TEST_F(Safetensors, StridedDeviceViewsReadAndWriteThroughTheCopySlot) {
  std::vector<int32_t> grid(4 * 6);
  for (int i = 0; i < 24; ++i) grid[i] = 1000 + i;
  dx_tensor_t* base = Tensor(DX_DTYPE_I32, {4, 6},
                             std::string(reinterpret_cast<const char*>(grid.data()), 96), device_);
  // Transposed columns 1..4 of rows 0..2, and rank 0 at an offset.
  const int64_t tshape[] = {4, 3}, tstrides[] = {1, 6};
  dx_tensor_t* transposed = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, tshape, tstrides, 2, 1, &transposed)), DX_OK);
  owned_.push_back(transposed);
  std::vector<int32_t> got(12);
  ASSERT_EQ(Code(dx_tensor_read(transposed, got.data(), 48)), DX_OK) << LastError();
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(got[r * 3 + c], grid[c * 6 + 1 + r]) << r << "," << c;
  }
  dx_tensor_t* scalar = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, nullptr, nullptr, 0, 23, &scalar)), DX_OK);
  owned_.push_back(scalar);
  int32_t one = 0;
  ASSERT_EQ(Code(dx_tensor_read(scalar, &one, 4)), DX_OK);
  EXPECT_EQ(one, 1023);
  EXPECT_EQ(Code(dx_tensor_read(transposed, got.data(), 44)), DX_INVALID_ARGUMENT);  // wrong size

  // Write rows 1 and 3 (a stride-2 row view) and check every byte of the base.
  const int64_t rshape[] = {2, 6}, rstrides[] = {12, 1};
  dx_tensor_t* rows = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, rshape, rstrides, 2, 6, &rows)), DX_OK);
  owned_.push_back(rows);
  std::vector<int32_t> fresh(12);
  for (int i = 0; i < 12; ++i) fresh[i] = -i - 1;
  ASSERT_EQ(Code(dx_tensor_write(rows, fresh.data(), 48)), DX_OK) << LastError();
  ASSERT_EQ(Code(dx_tensor_write(transposed, nullptr, 48)), DX_INVALID_ARGUMENT);
  std::vector<int32_t> after(24);
  ASSERT_EQ(Code(dx_tensor_read(base, after.data(), 96)), DX_OK);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 6; ++c) {
      const int32_t want = r == 1 ? fresh[c] : r == 3 ? fresh[6 + c] : grid[r * 6 + c];
      EXPECT_EQ(after[r * 6 + c], want) << r << "," << c;
    }
  }
  // A column view (one element per run) round-trips too.
  const int64_t cshape[] = {4}, cstrides[] = {6};
  dx_tensor_t* column = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, cshape, cstrides, 1, 5, &column)), DX_OK);
  owned_.push_back(column);
  const int32_t col[4] = {7, 8, 9, 10};
  ASSERT_EQ(Code(dx_tensor_write(column, col, 16)), DX_OK);
  int32_t back[4] = {};
  ASSERT_EQ(Code(dx_tensor_read(column, back, 16)), DX_OK);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], col[i]);
  ASSERT_EQ(Code(dx_tensor_read(base, after.data(), 96)), DX_OK);
  EXPECT_EQ(after[4], grid[4]);  // neighbours untouched
  EXPECT_EQ(after[5], 7);
}

// Device memory is only reachable through its space's copy function (the fixture scrambles
// its bytes): saving from it and loading into it must both go through the copy path.
TEST_F(Safetensors, DeviceTensorsGoThroughTheCopyPath) {
  const std::string content = Pattern(5 * 8, 9, false);
  dx_tensor_t* on_device = Tensor(DX_DTYPE_I64, {5}, content, device_);
  EXPECT_EQ(Bytes(on_device), content);
  const char* names[] = {"w"};
  const dx_tensor_t* tensors[] = {on_device};
  const std::string path = Path("device.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, tensors, 1, nullptr)), DX_OK)
      << LastError();
  const std::string file = ReadFile(path);
  EXPECT_EQ(file.substr(file.size() - content.size()), content) << "unscrambled bytes on disk";
  for (int32_t device : {device_, host_}) {
    dx_safetensors_t* f = nullptr;
    ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), device, &f)), DX_OK) << LastError();
    dx_tensor_t* t = nullptr;
    ASSERT_EQ(Code(dx_safetensors_get_tensor(f, 0, &t)), DX_OK);
    owned_.push_back(t);
    int32_t where = -1;
    EXPECT_EQ(Code(dx_tensor_device(t, &where)), DX_OK);
    EXPECT_EQ(where, device);
    EXPECT_EQ(Bytes(t), content);
    Code(dx_safetensors_destroy(f));
  }
  // A strided view of device memory (a transpose, at an offset) is gathered on the host.
  std::vector<int16_t> grid(24);
  for (int i = 0; i < 24; ++i) grid[i] = static_cast<int16_t>(100 + i);
  dx_tensor_t* base = Tensor(DX_DTYPE_I16, {4, 6},
                             std::string(reinterpret_cast<const char*>(grid.data()), 48), device_);
  const int64_t vshape[] = {5, 3}, vstrides[] = {1, 6};
  dx_tensor_t* view = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, vshape, vstrides, 2, 1, &view)), DX_OK);  // rows 0..2, cols 1..5
  owned_.push_back(view);
  const char* view_names[] = {"v"};
  const dx_tensor_t* view_tensors[] = {view};
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), view_names, view_tensors, 1, nullptr)), DX_OK)
      << LastError();
  {
    dx_safetensors_t* f = nullptr;
    ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK) << LastError();
    dx_tensor_t* t = nullptr;
    ASSERT_EQ(Code(dx_safetensors_get_tensor(f, 0, &t)), DX_OK);
    owned_.push_back(t);
    std::vector<int16_t> got(15);
    ASSERT_EQ(Code(dx_tensor_read(t, got.data(), 30)), DX_OK);
    for (int r = 0; r < 5; ++r) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(got[r * 3 + c], grid[c * 6 + 1 + r]) << r << "," << c;
    }
    Code(dx_safetensors_destroy(f));
  }

  // A bool file loaded into device memory is checked before it is copied.
  const std::string bad_bool = MakeFile(
      "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", std::string("\x01\x07", 2));
  WriteFile(path, bad_bool);
  dx_safetensors_t* f = nullptr;
  EXPECT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), device_, &f)), DX_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("'m': BOOL element 1 has byte value 7"),
            std::string::npos)
      << LastError();
}

TEST_F(Safetensors, SaveIsAtomic) {
  const std::string path = Path("model.safetensors");
  const float one = 1.0f, two = 2.0f;
  dx_tensor_t* t1 = Tensor(DX_DTYPE_F32, {}, std::string(reinterpret_cast<const char*>(&one), 4));
  dx_tensor_t* t2 = Tensor(DX_DTYPE_F32, {}, std::string(reinterpret_cast<const char*>(&two), 4));
  const char* names[] = {"x", "y"};
  const dx_tensor_t* first[] = {t1};
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, first, 1, nullptr)), DX_OK);
  const std::string before = ReadFile(path);
  const dx_tensor_t* second[] = {t2};
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, second, 1, nullptr)), DX_OK);
  const std::string replaced = ReadFile(path);
  EXPECT_NE(replaced, before);
  EXPECT_EQ(replaced.substr(replaced.size() - 4), std::string(reinterpret_cast<const char*>(&two), 4));

  // A save that fails while writing the data (a tensor whose bytes cannot be read: an import
  // of a device no plugin serves) leaves the old file and no temporary file behind.
  static float foreign_data[3] = {1, 2, 3};
  static int64_t foreign_shape[1] = {3};
  auto* managed = new DLManagedTensor();
  std::memset(managed, 0, sizeof *managed);
  managed->dl_tensor.data = foreign_data;
  managed->dl_tensor.device = {kDLExtDev, 7};
  managed->dl_tensor.ndim = 1;
  managed->dl_tensor.dtype = {kDLFloat, 32, 1};
  managed->dl_tensor.shape = foreign_shape;
  managed->deleter = [](DLManagedTensor* self) { delete self; };
  dx_tensor_t* foreign = nullptr;
  ASSERT_EQ(Code(dx_tensor_from_dlpack_legacy(rt_, managed, &foreign)), DX_OK) << LastError();
  owned_.push_back(foreign);
  const dx_tensor_t* failing[] = {t1, foreign};
  const dx_status_t st = Code(dx_safetensors_save(rt_, path.c_str(), names, failing, 2, nullptr));
  EXPECT_NE(st, DX_OK);
  EXPECT_NE(LastError().find("'y'"), std::string::npos)
      << LastError();
  EXPECT_EQ(ReadFile(path), replaced);
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"model.safetensors"});

  // An unwritable destination is an I/O error naming the path.
  const std::string nowhere = dir_ + "/no/such/dir/x.safetensors";
  EXPECT_EQ(Code(dx_safetensors_save(rt_, nowhere.c_str(), names, first, 1, nullptr)), DX_IO_ERROR);
  EXPECT_NE(LastError().find(nowhere), std::string::npos);
}

TEST_F(Safetensors, SaveRefusesBadArguments) {
  const float v = 0;
  dx_tensor_t* t = Tensor(DX_DTYPE_F32, {}, std::string(reinterpret_cast<const char*>(&v), 4));
  const std::string path = Path("args.safetensors");
  const char* p = path.c_str();
  const char* one[] = {"a"};
  const dx_tensor_t* ts[] = {t, t};
  EXPECT_EQ(Code(dx_safetensors_save(nullptr, p, one, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_save(rt_, nullptr, one, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_save(rt_, "", one, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, nullptr, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, nullptr, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, ts, -1, nullptr)), DX_INVALID_ARGUMENT);
  const dx_tensor_t* null_tensor[] = {nullptr};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, null_tensor, 1, nullptr)), DX_INVALID_ARGUMENT);
  const char* null_name[] = {nullptr};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, null_name, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  const char* empty_name[] = {""};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, empty_name, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  const char* reserved[] = {"__metadata__"};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, reserved, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  const char* bad_utf8[] = {"a\xC0\xAF"};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, bad_utf8, ts, 1, nullptr)), DX_INVALID_ARGUMENT);
  const char* twice[] = {"same", "same"};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, twice, ts, 2, nullptr)), DX_ALREADY_EXISTS);
  EXPECT_NE(LastError().find("'same'"), std::string::npos);

  dx_safetensors_save_options_t options{};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, ts, 1, &options)), DX_INVALID_ARGUMENT)
      << "struct_size unset";
  options.struct_size = DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0;
  options.metadata_count = 1;
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, ts, 1, &options)), DX_INVALID_ARGUMENT)
      << "null metadata arrays";
  const char* keys[] = {"k", "k"};
  const char* values[] = {"v", "w"};
  options.metadata_keys = keys;
  options.metadata_values = values;
  options.metadata_count = 2;
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, ts, 1, &options)), DX_ALREADY_EXISTS);
  const char* null_value[] = {nullptr};
  options.metadata_count = 1;
  options.metadata_values = null_value;
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, ts, 1, &options)), DX_INVALID_ARGUMENT);
  EXPECT_TRUE(ListDir(dir_).empty()) << "no refused save leaves a file";

  // A tensor of another runtime.
  dx_runtime_t* other = nullptr;
  ASSERT_EQ(Code(dx_runtime_create(nullptr, &other)), DX_OK);
  ASSERT_EQ(Code(dx_runtime_load_plugin(other, HOST_TEST_PLUGIN, nullptr)), DX_OK);
  dx_tensor_t* foreign = nullptr;
  ASSERT_EQ(Code(dx_tensor_create(other, 0, DX_DTYPE_F32, nullptr, 0, &foreign)), DX_OK);
  const dx_tensor_t* foreign_list[] = {foreign};
  EXPECT_EQ(Code(dx_safetensors_save(rt_, p, one, foreign_list, 1, nullptr)), DX_INVALID_ARGUMENT);
  Code(dx_tensor_destroy(foreign));
  Code(dx_runtime_destroy(other));
}

TEST_F(Safetensors, AccessorsRefuseBadArguments) {
  dx_safetensors_t* f = nullptr;
  const std::string path = Path("acc.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), nullptr, nullptr, 0, nullptr)), DX_OK);
  EXPECT_EQ(Code(dx_safetensors_load(nullptr, path.c_str(), host_, &f)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_load(rt_, nullptr, host_, &f)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), 99, &f)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), -1, &f)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_safetensors_load(rt_, Path("missing").c_str(), host_, &f)), DX_NOT_FOUND);
  EXPECT_NE(LastError().find("missing"), std::string::npos);
  EXPECT_EQ(Code(dx_safetensors_load(rt_, dir_.c_str(), host_, &f)), DX_INVALID_ARGUMENT)
      << "a directory";
  EXPECT_EQ(f, nullptr);
  ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK);
  int64_t n = 0;
  const char* s = nullptr;
  dx_tensor_t* t = nullptr;
  dx_safetensors_tensor_info_t info{};
  EXPECT_EQ(Code(dx_safetensors_tensor_count(nullptr, &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_tensor_count(f, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_tensor_info(f, 0, &info)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_safetensors_tensor_info(nullptr, 0, &info)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_get_tensor(f, 0, &t)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_safetensors_get_tensor(f, -1, &t)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_safetensors_find(f, nullptr, &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_find(nullptr, "a", &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_metadata_count(nullptr, &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_metadata(f, 0, &s, &s)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_safetensors_metadata(nullptr, 0, &s, &s)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_metadata_find(f, nullptr, &s)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_metadata_find(f, "k", nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_safetensors_destroy(nullptr)), DX_OK);
  Code(dx_safetensors_destroy(f));

  // struct_size is checked, and an older caller's smaller struct is filled only that far.
  const float v = 1;
  dx_tensor_t* one = Tensor(DX_DTYPE_F32, {1}, std::string(reinterpret_cast<const char*>(&v), 4));
  const char* names[] = {"w"};
  const dx_tensor_t* ts[] = {one};
  ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, ts, 1, nullptr)), DX_OK);
  ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK);
  EXPECT_EQ(Code(dx_safetensors_tensor_info(f, 0, &info)), DX_INVALID_ARGUMENT) << "struct_size 0";
  info.struct_size = DX_STRUCT_SIZE(dx_safetensors_tensor_info_t, shape);
  info.byte_size = 12345;
  ASSERT_EQ(Code(dx_safetensors_tensor_info(f, 0, &info)), DX_OK);
  EXPECT_STREQ(info.name, "w");
  EXPECT_EQ(info.ndim, 1);
  EXPECT_EQ(info.byte_size, 12345u) << "beyond the caller's struct_size: untouched";
  Code(dx_safetensors_destroy(f));
}

// ---- malformed files -------------------------------------------------------------------------

const std::string kF32x2 = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
const std::string kEightBytes(8, '\x11');

TEST_F(Safetensors, RefusesTruncatedOrLyingLengths) {
  ExpectRefused("", DX_INVALID_ARGUMENT, "fewer than the 8-byte header length");
  ExpectRefused(std::string("\x05\x00\x00", 3), DX_INVALID_ARGUMENT, "fewer than the 8-byte header length");
  ExpectRefused(U64Le(100) + "{}", DX_INVALID_ARGUMENT, "header length 100 runs past the end");
  ExpectRefused(U64Le(uint64_t{1} << 63) + "{}", DX_INVALID_ARGUMENT, "exceeds the format's limit");
  ExpectRefused(U64Le(~uint64_t{0}) + "{}", DX_INVALID_ARGUMENT, "exceeds the format's limit");
  ExpectRefused(U64Le(100'000'001) + "{}", DX_INVALID_ARGUMENT, "exceeds the format's limit");
  ExpectRefused(U64Le(0), DX_INVALID_ARGUMENT, "does not start with '{'");
  ExpectRefused(MakeFile(" {}", ""), DX_INVALID_ARGUMENT, "does not start with '{'");
  ExpectRefused(MakeFile("[]", ""), DX_INVALID_ARGUMENT, "does not start with '{'");
  // The data section is shorter than the header says: a truncated download.
  ExpectRefused(MakeFile("{" + kF32x2 + "}", kEightBytes.substr(0, 5)), DX_INVALID_ARGUMENT,
                "tensor 'a': data_offsets [0, 8] run past the data section (5 bytes");
}

TEST_F(Safetensors, RefusesBadJson) {
  struct Case {
    std::string header, needle;
  };
  const Case cases[] = {
      {"{\"a\":", "unexpected end of input"},
      {"{\"a\":{}", "unexpected end of input; expected '}'"},
      {"{\"a\":1,}", "expected string literal"},
      {"{'a':1}", "expected string literal"},
      {"{\"a\" 1}", "expected ':'"},
      {"{\"a\":[1 2]}", "expected ']'"},
      {"{\"a\":NaN}", "invalid literal"},
      {"{\"a\":tru}", "invalid literal"},
      {"{\"a\":01}", "unexpected number literal"},
      {"{\"a\":1.}", "expected digit after '.'"},
      {"{\"a\":1e}", "digit after exponent"},
      {"{\"a\":-}", "expected digit after '-'"},
      {"{\"a\":\"x\ty\"}", "control character U+0009"},
      {"{\"a\":\"\\q\"}", "forbidden character after backslash"},
      {"{\"a\":\"\\u12G4\"}", "must be followed by 4 hex digits"},
      {"{\"a\":\"\\ud800\"}", "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
      {"{\"a\":\"\\udc00\"}", "surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"},
      {"{\"a\":\"\xC0\xAF\"}", "ill-formed UTF-8 byte; last read: '\"\\xc0'"},
      {"{\"a\":\"\xED\xA0\x80\"}", "ill-formed UTF-8 byte"},
      {"{\"a\":\"\xF4\x90\x80\x80\"}", "ill-formed UTF-8 byte"},
      {"{\"a\":\"unterminated}", "missing closing quote"},
      {"{}x", "expected end of input"},
      {"{}{}", "expected end of input"},
      {std::string("{}\0", 3), "a NUL byte"},
      {std::string("{\"a\":1}\0{\"b\":2}", 15), "header byte 7: a NUL byte"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    ExpectRefused(MakeFile(c.header, ""), DX_INVALID_ARGUMENT, c.needle);
    EXPECT_NE(LastError().find("bad JSON: header byte "), std::string::npos);
  }
  // Nesting is limited before the parser goes deep.
  ExpectRefused(MakeFile("{\"a\":" + std::string(1000, '[') + std::string(1000, ']') + "}", ""),
                DX_INVALID_ARGUMENT, "bad JSON: nesting deeper than 64");
  // Only JSON whitespace may pad the header.
  ExpectRefused(MakeFile("{} \x0c", ""), DX_INVALID_ARGUMENT, "expected end of input");
}

TEST_F(Safetensors, RefusesBadEntries) {
  auto file = [](const std::string& entries, const std::string& data) {
    return MakeFile("{" + entries + "}", data);
  };
  const std::string d8 = kEightBytes;
  ExpectRefused(file("\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "tensor 'a': unknown dtype 'F33'");
  ExpectRefused(file("\"a\":{\"dtype\":\"U16\",\"shape\":[4],\"data_offsets\":[0,8]}", d8),
                DX_UNSUPPORTED, "tensor 'a': dtype U16 has no deepx equivalent");
  ExpectRefused(file("\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "unknown dtype 'f32'");
  ExpectRefused(file("\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "tensor 'a': \"dtype\" is not a string");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "tensor 'a': F32 shape needs 12 bytes but data_offsets [0, 8] span 8");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}", d8),
                DX_INVALID_ARGUMENT, "needs 8 bytes");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "tensor 'a': shape[0] is not a non-negative integer");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "shape[0] is not a non-negative integer");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "shape[0] is not a non-negative integer");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "tensor 'a': the shape's byte size overflows");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}", d8),
                DX_INVALID_ARGUMENT, "\"shape\" is not an array");
  std::string rank33 = "[";
  for (int i = 0; i < 33; ++i) rank33 += i ? ",1" : "1";
  ExpectRefused(file("\"a\":{\"dtype\":\"U8\",\"shape\":" + rank33 + "],\"data_offsets\":[0,1]}", "x"),
                DX_INVALID_ARGUMENT, "rank 33 exceeds");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}", d8),
                DX_INVALID_ARGUMENT, "end before they begin");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}", d8),
                DX_INVALID_ARGUMENT, "\"data_offsets\" is not [begin, end]");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}", d8),
                DX_INVALID_ARGUMENT, "\"data_offsets\" is not [begin, end]");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551608,18446744073709551616]}", d8),
                DX_INVALID_ARGUMENT, "\"data_offsets\" is not [begin, end]");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551600,18446744073709551608]}", d8),
                DX_INVALID_ARGUMENT, "run past the data section");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}", d8),
                DX_INVALID_ARGUMENT, "tensor 'a': data_offsets [8, 16] run past the data section (8 bytes");
  ExpectRefused(file("\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}", d8), DX_INVALID_ARGUMENT,
                "tensor 'a': no \"dtype\"");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}", d8), DX_INVALID_ARGUMENT,
                "tensor 'a': no \"shape\"");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2]}", d8), DX_INVALID_ARGUMENT,
                "tensor 'a': no \"data_offsets\"");
  ExpectRefused(file("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}", d8),
                DX_INVALID_ARGUMENT, "tensor 'a': unknown field 'x'");
  ExpectRefused(file("\"a\":[1]", d8), DX_INVALID_ARGUMENT, "tensor 'a': the entry is an array");
  ExpectRefused(file(kF32x2 + "," + kF32x2, d8), DX_INVALID_ARGUMENT, "duplicate key 'a'");
  // Past 16 keys the duplicate check goes through a hash set: a duplicate there is refused too.
  {
    std::string many;
    for (int i = 0; i < 40; ++i) {
      many += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]},";
    }
    ExpectRefused(file(many + "\"t3\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[40,40]}",
                       std::string(40, '\1')),
                  DX_INVALID_ARGUMENT, "duplicate key 't3'");
    many.pop_back();  // the same 40 tensors without the duplicate load
    const std::string path = Path("many.safetensors");
    WriteFile(path, file(many, std::string(40, '\1')));
    dx_safetensors_t* f = nullptr;
    ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK) << LastError();
    int64_t count = 0;
    EXPECT_EQ(Code(dx_safetensors_tensor_count(f, &count)), DX_OK);
    EXPECT_EQ(count, 40);
    Code(dx_safetensors_destroy(f));
  }
  ExpectRefused(file("\"__metadata__\":{\"k\":1}", ""), DX_INVALID_ARGUMENT,
                "__metadata__ entry 'k' is a number, not a string");
  ExpectRefused(file("\"__metadata__\":[]", ""), DX_INVALID_ARGUMENT, "__metadata__ is an array");
  ExpectRefused(file("\"__metadata__\":{\"k\":\"a\\u0000b\"}", ""), DX_INVALID_ARGUMENT,
                "contains a NUL character");
  ExpectRefused(file("\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", "x"),
                DX_INVALID_ARGUMENT, "the name contains a NUL character");
  ExpectRefused(file("\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}", std::string("\x00\x01\x02", 3)),
                DX_INVALID_ARGUMENT, "tensor 'm': BOOL element 2 has byte value 2");
}

TEST_F(Safetensors, RefusesOverlapsHolesAndTrailingBytes) {
  auto entry = [](const char* name, int begin, int end) {
    return "\"" + std::string(name) + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(end - begin) +
           "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
  };
  const std::string d8 = kEightBytes;
  ExpectRefused(MakeFile("{" + entry("a", 0, 6) + "," + entry("b", 4, 8) + "}", d8),
                DX_INVALID_ARGUMENT, "tensor 'b': data_offsets [4, 8] overlap tensor 'a' [0, 6]");
  ExpectRefused(MakeFile("{" + entry("a", 0, 8) + "," + entry("b", 0, 8) + "}", d8),
                DX_INVALID_ARGUMENT, "overlap tensor");
  ExpectRefused(MakeFile("{" + entry("a", 0, 8) + "," + entry("e", 4, 4) + "}", d8),
                DX_INVALID_ARGUMENT, "tensor 'e': data_offsets [4, 4] overlap tensor 'a' [0, 8]");
  ExpectRefused(MakeFile("{" + entry("a", 0, 3) + "," + entry("b", 5, 8) + "}", d8),
                DX_INVALID_ARGUMENT, "bytes [3, 5) of the data section belong to no tensor");
  ExpectRefused(MakeFile("{" + entry("b", 2, 8) + "}", d8), DX_INVALID_ARGUMENT,
                "bytes [0, 2) of the data section belong to no tensor");
  ExpectRefused(MakeFile("{" + entry("a", 0, 6) + "}", d8), DX_INVALID_ARGUMENT,
                "the data section has 8 bytes but the tensors cover only 6");
  ExpectRefused(MakeFile("{}", "junk"), DX_INVALID_ARGUMENT, "cover only 0");
  // Zero-sized tensors may sit at any boundary, including the end.
  const std::string path = Path("zeros.safetensors");
  WriteFile(path, MakeFile("{" + entry("z0", 0, 0) + "," + entry("a", 0, 8) + "," + entry("z8", 8, 8) + "}", d8));
  dx_safetensors_t* f = nullptr;
  ASSERT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK) << LastError();
  Code(dx_safetensors_destroy(f));
}

// Every prefix of a valid file, and every single-byte corruption of its header, is either
// refused with a status or (for harmless corruptions) loaded; nothing crashes or leaks.
TEST_F(Safetensors, SurvivesEveryTruncationAndHeaderCorruption) {
  const double a[2] = {1.5, -3.25};
  dx_tensor_t* ta = Tensor(DX_DTYPE_F64, {2}, std::string(reinterpret_cast<const char*>(a), 16));
  dx_tensor_t* tb = Tensor(DX_DTYPE_BOOL, {3}, std::string("\x01\x00\x01", 3));
  const char* names[] = {"alpha", "mask"};
  const dx_tensor_t* tensors[] = {ta, tb};
  const char* keys[] = {"k"};
  const char* values[] = {"v"};
  dx_safetensors_save_options_t options{};
  options.struct_size = DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0;
  options.metadata_count = 1;
  options.metadata_keys = keys;
  options.metadata_values = values;
  const std::string good_path = Path("good.safetensors");
  ASSERT_EQ(Code(dx_safetensors_save(rt_, good_path.c_str(), names, tensors, 2, &options)), DX_OK);
  const std::string good = ReadFile(good_path);
  const std::string path = Path("mutant.safetensors");
  for (size_t n = 0; n < good.size(); ++n) {
    WriteFile(path, good.substr(0, n));
    dx_safetensors_t* f = nullptr;
    EXPECT_NE(Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)), DX_OK) << "prefix of " << n;
    EXPECT_EQ(f, nullptr);
  }
  const unsigned char replacements[] = {0x00, '"', '}', ']', '9', 0x80};
  size_t refused = 0;
  for (size_t i = 0; i < good.size() - 19; ++i) {  // the length and the header
    for (unsigned char r : replacements) {
      std::string mutant = good;
      if (static_cast<unsigned char>(mutant[i]) == r) continue;
      mutant[i] = static_cast<char>(r);
      WriteFile(path, mutant);
      dx_safetensors_t* f = nullptr;
      if (Code(dx_safetensors_load(rt_, path.c_str(), host_, &f)) == DX_OK) {
        Code(dx_safetensors_destroy(f));
      } else {
        ++refused;
        EXPECT_EQ(f, nullptr);
        EXPECT_NE(LastError(), "");
      }
    }
  }
  EXPECT_GT(refused, 0u);
}

}  // namespace
