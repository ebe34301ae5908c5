// Trust-gated dispatch: certificates bind kernels to one plugin binary (by SHA-256); with
// certification required, only covered kernels run. Tested both ways.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "deepx/host.h"
#include "dx_test_util.h"
#include "sha256.h"

namespace {

namespace fs = std::filesystem;

using deepx_test::Code;
using deepx_test::LastError;

class Certificates : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepx-cert-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    sha_ = deepx::util::sha256_file(HOST_TEST_PLUGIN).value_or("");
    ASSERT_EQ(sha_.size(), 64u);
  }
  void TearDown() override {
    for (auto* t : tensors_) Code(dx_tensor_destroy(t));
    Code(dx_runtime_destroy(rt_));
    fs::remove_all(dir_);
  }
  void WriteCertificate(const std::string& text) {
    std::ofstream(dir_ / "hosttest.certificate") << text;
  }
  static std::string AddKernelLine() {
    return "kernel dx.add 1 " + std::to_string(DX_DTYPE_F32) + "," + std::to_string(DX_DTYPE_F32) +
           "," + std::to_string(DX_DTYPE_F32) + "\n";
  }
  std::string Valid() {
    return "deepx-certificate 1\nplugin hosttest\nsha256 " + sha_ + "\nsuite test\n" +
           AddKernelLine();
  }
  void Open(uint64_t flags) {
    dx_runtime_options_t opts{};
    opts.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
    opts.flags = flags;
    opts.plugin_path = HOST_TEST_PLUGIN_DIR;
    std::string cert_dir = dir_.string();
    opts.certificate_path = cert_dir.c_str();
    ASSERT_EQ(Code(dx_runtime_create(&opts, &rt_)), DX_OK) << LastError();
    ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, "hosttest", nullptr)), DX_OK) << LastError();
    int32_t device = -1;
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "hosttest", &device)), DX_OK);
    int64_t shape[1] = {2};
    for (int i = 0; i < 3; ++i) {
      dx_tensor_t* t = nullptr;
      ASSERT_EQ(Code(dx_tensor_create(rt_, device, DX_DTYPE_F32, shape, 1, &t)), DX_OK);
      float v[2] = {1, 2};
      Code(dx_tensor_write(t, v, sizeof v));
      tensors_.push_back(t);
    }
    dx_tensor_t* s = nullptr;
    ASSERT_EQ(Code(dx_tensor_create(rt_, device, DX_DTYPE_F32, nullptr, 0, &s)), DX_OK);
    tensors_.push_back(s);
  }
  dx_status_t Add() {
    dx_tensor_t* in[2] = {tensors_[0], tensors_[1]};
    return Code(dx_invoke_by_name(rt_, "dx.add", in, 2, &tensors_[2], 1, nullptr));
  }
  dx_status_t Sum() {
    dx_attrs_t* attrs = nullptr;
    Code(dx_attrs_create(&attrs));
    Code(dx_attrs_set_bool(attrs, "keepdims", 0));
    dx_status_t st = Code(dx_invoke_by_name(rt_, "dx.sum", &tensors_[0], 1, &tensors_[3], 1, attrs));
    Code(dx_attrs_destroy(attrs));
    return st;
  }
  dx_plugin_info_t Info() {
    dx_plugin_info_t info{};
    info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
    EXPECT_EQ(Code(dx_runtime_plugin_info(rt_, 0, &info)), DX_OK);
    return info;
  }
  int32_t Certified(const char* op) {
    dx_op_id_t id = 0;
    EXPECT_EQ(Code(dx_runtime_op_lookup(rt_, op, &id)), DX_OK);
    dx_kernel_info_t k{};
    k.struct_size = DX_KERNEL_INFO_SIZE_1_0;
    EXPECT_EQ(Code(dx_runtime_kernel_info(rt_, id, 0, &k)), DX_OK);
    return k.certified;
  }

  fs::path dir_;
  std::string sha_;
  dx_runtime_t* rt_ = nullptr;
  std::vector<dx_tensor_t*> tensors_;
};

TEST_F(Certificates, WithoutRequirementEverythingRuns) {
  Open(DX_RUNTIME_FLAG_IGNORE_ENV);
  EXPECT_EQ(Info().certification, DX_CERTIFICATION_NONE);
  EXPECT_EQ(Add(), DX_OK) << LastError();
  EXPECT_EQ(Sum(), DX_OK) << LastError();
}

TEST_F(Certificates, RequiredButMissingRefusesWithAClearMessage) {
  Open(DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED);
  EXPECT_EQ(Info().certification, DX_CERTIFICATION_NONE);
  EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
  std::string msg = LastError();
  EXPECT_NE(msg.find("not certified"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no certificate found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deepx certify"), std::string::npos) << msg;
}

TEST_F(Certificates, ValidCertificateCoversExactlyItsKernels) {
  WriteCertificate(Valid());
  Open(DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED);
  dx_plugin_info_t info = Info();
  EXPECT_EQ(info.certification, DX_CERTIFICATION_VALID) << info.certification_note;
  EXPECT_NE(std::string(info.certificate).find("hosttest.certificate"), std::string::npos);
  EXPECT_EQ(Certified("dx.add"), 1);
  EXPECT_EQ(Certified("dx.sum"), 0);
  EXPECT_EQ(Add(), DX_OK) << LastError();
  EXPECT_EQ(Sum(), DX_PERMISSION_DENIED);
  EXPECT_NE(LastError().find("does not cover this kernel"), std::string::npos) << LastError();
}

TEST_F(Certificates, ACertificateOfAnotherBuildIsInvalid) {
  std::string other = sha_;
  other[0] = other[0] == 'a' ? 'b' : 'a';
  WriteCertificate("deepx-certificate 1\nplugin hosttest\nsha256 " + other + "\n" +
                   AddKernelLine());
  Open(DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED);
  dx_plugin_info_t info = Info();
  EXPECT_EQ(info.certification, DX_CERTIFICATION_INVALID);
  EXPECT_NE(std::string(info.certification_note).find("another build"), std::string::npos)
      << info.certification_note;
  EXPECT_EQ(Certified("dx.add"), 0);
  EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
  EXPECT_NE(LastError().find("certify it again"), std::string::npos) << LastError();
}

// One .so may serve several builds (the CPU plugin picks an instruction-set variant at load and
// says which in its build id): `build` lines restrict a certificate to the builds that earned it.
TEST_F(Certificates, BuildLinesCoverOnlyTheBuildsTheyName) {
  const std::string head = "deepx-certificate 1\nplugin hosttest\nsha256 " + sha_ + "\n";
  WriteCertificate(head + "build other+x86-64-v4\nbuild test\n" + AddKernelLine());
  Open(DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED);
  EXPECT_EQ(Info().certification, DX_CERTIFICATION_VALID) << Info().certification_note;
  EXPECT_EQ(Add(), DX_OK) << LastError();

  WriteCertificate(head + "build test+x86-64-v4\n" + AddKernelLine());
  Code(dx_runtime_destroy(rt_));
  rt_ = nullptr;
  for (auto* t : tensors_) Code(dx_tensor_destroy(t));
  tensors_.clear();
  Open(DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED);
  dx_plugin_info_t info = Info();
  EXPECT_EQ(info.certification, DX_CERTIFICATION_INVALID);
  const std::string note = info.certification_note;
  EXPECT_NE(note.find("covers build test+x86-64-v4"), std::string::npos) << note;
  EXPECT_NE(note.find("loaded build test "), std::string::npos) << note;
  EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
}

TEST_F(Certificates, MalformedCertificatesAreInvalidNotFatal) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hello\n", "not a deepx certificate"},
      {"", "not a deepx certificate"},
      {"deepx-certificate 1\nplugin other\nsha256 " + sha_ + "\n", "certifies plugin 'other'"},
      {"deepx-certificate 1\nplugin hosttest\n", "no valid sha256"},
      {"deepx-certificate 1\nplugin hosttest\nsha256 " + sha_ + "\nkernel dx.add\n",
       "malformed kernel line"},
      {"deepx-certificate 1\nplugin hosttest\nsha256 " + sha_ + "\nkernel dx.add 1 x,y\n",
       "malformed dtype"},
      {"deepx-certificate 1\nplugin hosttest\nsha256 " + sha_ + "\nbuild\n", "empty build line"},
  };
  for (const auto& [text, expected] : cases) {
    WriteCertificate(text);
    Code(dx_runtime_destroy(rt_));
    rt_ = nullptr;
    for (auto* t : tensors_) Code(dx_tensor_destroy(t));
    tensors_.clear();
    Open(DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED);
    dx_plugin_info_t info = Info();
    EXPECT_EQ(info.certification, DX_CERTIFICATION_INVALID) << text;
    EXPECT_NE(std::string(info.certification_note).find(expected), std::string::npos)
        << info.certification_note;
    EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
  }
}

TEST_F(Certificates, EnvironmentTurnsTheGateOnUnlessIgnored) {
  ::setenv("DEEPX_REQUIRE_CERTIFIED", "1", 1);
  Open(0);
  EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
  Code(dx_runtime_destroy(rt_));
  rt_ = nullptr;
  for (auto* t : tensors_) Code(dx_tensor_destroy(t));
  tensors_.clear();
  Open(DX_RUNTIME_FLAG_IGNORE_ENV);
  EXPECT_EQ(Add(), DX_OK);
  ::setenv("DEEPX_REQUIRE_CERTIFIED", "0", 1);
  Code(dx_runtime_destroy(rt_));
  rt_ = nullptr;
  for (auto* t : tensors_) Code(dx_tensor_destroy(t));
  tensors_.clear();
  Open(0);
  EXPECT_EQ(Add(), DX_OK);
  ::unsetenv("DEEPX_REQUIRE_CERTIFIED");
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(deepx::util::sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(deepx::util::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_FALSE(deepx::util::sha256_file("/nonexistent/file").has_value());
}

}  // namespace
