// Trust-gated dispatch: a certificate grants a plugin's kernels only when it is signed by a key
// of the trust store that is not revoked, its signature covers its text, its sha256 is that of
// the bytes loaded (hashed before any plugin code ran) and its verdict is CERTIFIED. Keys and
// certificates are made here with the certificate module (certificate/); each refusal is checked
// for the check it names. Also: the module's own round trips, and two fixture plugins (a plugin
// that swaps its own file in init; a plugin that finds its library through $ORIGIN).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "certificate.h"
#include "deepx/host.h"
#include "dx_test_util.h"

namespace {

namespace fs = std::filesystem;
namespace cert = deepx::cert;

using deepx_test::Code;
using deepx_test::LastError;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string FileSha(const std::string& path) {
  return cert::Sha256Hex(ReadAll(path));
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

class Certificates : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepx-cert-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "trust");
    sha_ = FileSha(HOST_TEST_PLUGIN);
    ASSERT_EQ(sha_.size(), 64u);
    std::string why;
    auto id = cert::GenerateKey((dir_ / "vendor.key").string(), (dir_ / "vendor.pub").string(), &why);
    ASSERT_TRUE(id) << why;
    key_id_ = *id;
    fs::copy_file(dir_ / "vendor.pub", dir_ / "trust" / "vendor.pub");
    ::setenv("DEEPX_TRUST_DIR", (dir_ / "trust").c_str(), 1);
  }
  void TearDown() override {
    Close();
    ::unsetenv("DEEPX_TRUST_DIR");
    fs::remove_all(dir_);
  }
  void Close() {
    for (auto* t : tensors_) Code(dx_tensor_destroy(t));
    tensors_.clear();
    Code(dx_runtime_destroy(rt_));
    rt_ = nullptr;
  }
  void WriteCertificate(const std::string& text) {
    std::ofstream(dir_ / "hosttest.certificate", std::ios::binary | std::ios::trunc) << text;
  }
  cert::Certificate Good() {
    cert::Certificate c;
    c.plugin = "hosttest";
    c.sha256 = sha_;
    c.suite = "test";
    c.verdict = "CERTIFIED";
    c.kernels.push_back({"dx.add", 1, {DX_DTYPE_F32, DX_DTYPE_F32, DX_DTYPE_F32}});
    return c;
  }
  std::string Signed(const cert::Certificate& c, const std::string& key = "vendor.key") {
    std::string why;
    auto text = cert::Sign(c, (dir_ / key).string(), &why);
    EXPECT_TRUE(text) << why;
    return text.value_or("");
  }
  void Open(uint64_t flags) {
    Close();
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
  void OpenGated() { Open(DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED); }
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
  dx_plugin_info_t Info(int32_t index = 0) {
    dx_plugin_info_t info{};
    info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
    EXPECT_EQ(Code(dx_runtime_plugin_info(rt_, index, &info)), DX_OK);
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
  // Loads the gated runtime with `text` as the certificate and expects a refusal naming `check`:
  // the plugin INVALID with that note, no kernel certified, dx.add refused with it too.
  void ExpectRefused(const std::string& text, const std::string& check) {
    WriteCertificate(text);
    OpenGated();
    dx_plugin_info_t info = Info();
    EXPECT_EQ(info.certification, DX_CERTIFICATION_INVALID) << check;
    EXPECT_NE(std::string(info.certification_note).find(check), std::string::npos)
        << "expected '" << check << "' in: " << info.certification_note;
    EXPECT_EQ(Certified("dx.add"), 0);
    EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
    EXPECT_NE(LastError().find(check), std::string::npos) << LastError();
  }

  fs::path dir_;
  std::string sha_, key_id_;
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
  OpenGated();
  EXPECT_EQ(Info().certification, DX_CERTIFICATION_NONE);
  EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
  std::string msg = LastError();
  EXPECT_NE(msg.find("not certified"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no certificate found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deepx certify"), std::string::npos) << msg;
}

TEST_F(Certificates, SignedCertificateCoversExactlyItsKernels) {
  WriteCertificate(Signed(Good()));
  OpenGated();
  dx_plugin_info_t info = Info();
  EXPECT_EQ(info.certification, DX_CERTIFICATION_VALID) << info.certification_note;
  EXPECT_NE(std::string(info.certificate).find("hosttest.certificate"), std::string::npos);
  EXPECT_EQ(Certified("dx.add"), 1);
  EXPECT_EQ(Certified("dx.sum"), 0);
  EXPECT_EQ(Add(), DX_OK) << LastError();
  EXPECT_EQ(Sum(), DX_PERMISSION_DENIED);
  EXPECT_NE(LastError().find("kernel not listed: its certificate"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("does not cover this kernel"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("--sign KEY"), std::string::npos) << LastError();
}

// The forgery: written by hand with the right name, hash and kernel line, no signature.
TEST_F(Certificates, ForgedUnsignedCertificateGrantsNothing) {
  ExpectRefused(cert::Write(Good()), "unsigned");
  ExpectRefused("deepx-certificate 1\nplugin hosttest\nsha256 " + sha_ + "\nkernel dx.add 1 " +
                    std::to_string(DX_DTYPE_F32) + "," + std::to_string(DX_DTYPE_F32) + "," +
                    std::to_string(DX_DTYPE_F32) + "\n",
                "unsigned");
}

TEST_F(Certificates, TamperedCertificateIsRefused) {
  cert::Certificate c = Good();
  c.kernels.push_back({"dx.neg", 1, {DX_DTYPE_F32, DX_DTYPE_F32}});
  // A kernel line edited after signing.
  ExpectRefused(Replace(Signed(c), "kernel dx.neg", "kernel dx.sum"), "bad signature");
  // The verdict edited after signing.
  c.verdict = "NOT CERTIFIED";
  ExpectRefused(Replace(Signed(c), "verdict NOT CERTIFIED", "verdict CERTIFIED"), "bad signature");
  // A kernel line added after the signature.
  ExpectRefused(Signed(Good()) + "kernel dx.sum 1 1,1\n", "text after the signature line");
  // A signature that is not base64 of 64 bytes.
  std::string text = Signed(Good());
  const size_t at = text.rfind("signature ");
  ExpectRefused(text.substr(0, at) + "signature AAAA\n", "bad signature");
}

TEST_F(Certificates, SignatureByAnUntrustedKeyIsRefused) {
  std::string why;
  ASSERT_TRUE(cert::GenerateKey((dir_ / "other.key").string(), (dir_ / "other.pub").string(), &why)) << why;
  ExpectRefused(Signed(Good(), "other.key"), "untrusted key");
}

TEST_F(Certificates, RevokedKeyIsRefused) {
  std::ofstream(dir_ / "trust" / "revoked-keys") << "# rotated 2026-11\n" << key_id_ << "  # vendor.pub\n";
  ExpectRefused(Signed(Good()), "revoked key");
}

TEST_F(Certificates, NotCertifiedVerdictSignedByATrustedKeyGrantsNothing) {
  cert::Certificate c = Good();
  c.verdict = "NOT CERTIFIED";
  ExpectRefused(Signed(c), "verdict not certified");
}

TEST_F(Certificates, ACertificateOfAnotherBuildIsRefused) {
  cert::Certificate c = Good();
  c.sha256[0] = c.sha256[0] == 'a' ? 'b' : 'a';
  ExpectRefused(Signed(c), "hash mismatch");
  EXPECT_NE(LastError().find("certify it again"), std::string::npos) << LastError();
}

// One .so may serve several builds (the CPU plugin picks an instruction-set variant at load and
// says which in its build id): `build` lines restrict a certificate to the builds that earned it.
TEST_F(Certificates, BuildLinesCoverOnlyTheBuildsTheyName) {
  cert::Certificate c = Good();
  c.builds = {"other+x86-64-v4", "test"};
  WriteCertificate(Signed(c));
  OpenGated();
  EXPECT_EQ(Info().certification, DX_CERTIFICATION_VALID) << Info().certification_note;
  EXPECT_EQ(Add(), DX_OK) << LastError();

  c.builds = {"test+x86-64-v4"};
  WriteCertificate(Signed(c));
  OpenGated();
  dx_plugin_info_t info = Info();
  EXPECT_EQ(info.certification, DX_CERTIFICATION_INVALID);
  const std::string note = info.certification_note;
  EXPECT_NE(note.find("covers build test+x86-64-v4"), std::string::npos) << note;
  EXPECT_NE(note.find("loaded build test "), std::string::npos) << note;
  EXPECT_EQ(Add(), DX_PERMISSION_DENIED);
}

// A library the certificate records, loaded here in another version, voids it.
TEST_F(Certificates, ALibraryOfAnotherVersionVoidsIt) {
  cert::Certificate c = Good();
  c.libraries.push_back({"libc.so.6", "glibc-0.1"});
  c.libraries.push_back({"libdeepx-never-loaded.so.1", "libdeepx-never-loaded.so.1.2.3"});
  ExpectRefused(Signed(c), "library changed");
  EXPECT_NE(LastError().find("libc.so.6: recorded glibc-0.1, loaded glibc-"), std::string::npos) << LastError();
  // The versions of this process: accepted.
  c.libraries = cert::LoadedLibraries();
  WriteCertificate(Signed(c));
  OpenGated();
  EXPECT_EQ(Info().certification, DX_CERTIFICATION_VALID) << Info().certification_note;
}

TEST_F(Certificates, MalformedCertificatesAreInvalidNotFatal) {
  const std::string head = "deepx-certificate 2\nplugin hosttest\nsha256 " + sha_ + "\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hello\n", "not a deepx certificate"},
      {"", "not a deepx certificate"},
      {"deepx-certificate 1\nplugin other\nsha256 " + sha_ + "\n", "certifies plugin 'other'"},
      {"deepx-certificate 1\nplugin hosttest\n", "no valid sha256"},
      {head + "kernel dx.add\n", "malformed kernel line"},
      {head + "kernel dx.add 1 x,y\n", "malformed dtype"},
      {head + "kernel dx.add 1 4294967296\n", "malformed dtype"},
      {head + "build\n", "empty build line"},
      {head + "plugin hosttest\n", "a second 'plugin' line"},
      {head + "signature AAAA\n", "without a signed-by line"},
      {head + "signed-by " + std::string(64, 'a') + "\n", "without a signature line"},
      {head + "library libm.so.6\n", "malformed library line"},
  };
  for (const auto& [text, expected] : cases) {
    WriteCertificate(text);
    OpenGated();
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
  Open(DX_RUNTIME_FLAG_IGNORE_ENV);
  EXPECT_EQ(Add(), DX_OK);
  ::setenv("DEEPX_REQUIRE_CERTIFIED", "0", 1);
  Open(0);
  EXPECT_EQ(Add(), DX_OK);
  ::unsetenv("DEEPX_REQUIRE_CERTIFIED");
}

// The swap: the file next to the certificate is the evil build; its init renames the
// good (certified) build over its own path. The host hashed the sealed copy of what it loaded
// before init ran, so the certificate of the good build does not cover the evil code.
TEST_F(Certificates, APluginThatSwapsItsOwnFileInInitIsNotTrusted) {
  const fs::path plugin = dir_ / "libdeepx-plugin-swapper.so";
  const fs::path good = dir_ / "good.so";
  fs::copy_file(SWAP_PLUGIN_EVIL, plugin);
  fs::copy_file(SWAP_PLUGIN_GOOD, good);
  cert::Certificate c;
  c.plugin = "swapper";
  c.sha256 = FileSha(good.string());
  c.suite = "test";
  c.verdict = "CERTIFIED";
  c.kernels.push_back({"dx.neg", 1, {DX_DTYPE_F32, DX_DTYPE_F32}});
  std::ofstream(plugin.string() + ".certificate") << Signed(c);
  ::setenv("DEEPX_TEST_SWAP_FROM", good.c_str(), 1);
  ::setenv("DEEPX_TEST_SWAP_TO", plugin.c_str(), 1);
  dx_runtime_options_t opts{};
  opts.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  opts.flags = DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED;
  ASSERT_EQ(Code(dx_runtime_create(&opts, &rt_)), DX_OK) << LastError();
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, plugin.c_str(), nullptr)), DX_OK) << LastError();
  ::unsetenv("DEEPX_TEST_SWAP_FROM");
  ::unsetenv("DEEPX_TEST_SWAP_TO");
  // The swap happened: the file now holds the certified build.
  EXPECT_EQ(FileSha(plugin.string()), c.sha256);
  EXPECT_FALSE(fs::exists(good));
  dx_plugin_info_t info = Info();
  EXPECT_EQ(info.certification, DX_CERTIFICATION_INVALID);
  EXPECT_NE(std::string(info.certification_note).find("hash mismatch"), std::string::npos)
      << info.certification_note;
  EXPECT_EQ(Certified("dx.neg"), 0);
}

// Under the gate the host maps a sealed in-memory copy; a plugin whose RUNPATH names $ORIGIN
// still finds the libraries of its own directory.
TEST_F(Certificates, APluginFindsItsOwnLibrariesThroughOriginUnderTheGate) {
  dx_runtime_options_t opts{};
  opts.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  opts.flags = DX_RUNTIME_FLAG_IGNORE_ENV | DX_RUNTIME_FLAG_REQUIRE_CERTIFIED;
  ASSERT_EQ(Code(dx_runtime_create(&opts, &rt_)), DX_OK) << LastError();
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, ORIGIN_PLUGIN, nullptr)), DX_OK) << LastError();
  EXPECT_EQ(std::string(Info().path), fs::canonical(ORIGIN_PLUGIN).string());
}

// ---- the certificate module on its own ----

TEST(CertificateModule, WriteParseRoundTripAndSignatureCoversTheText) {
  const fs::path dir = fs::temp_directory_path() / ("deepx-cert-module-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  cert::Certificate c;
  c.plugin = "acme";
  c.sha256 = std::string(64, 'c');
  c.suite = "0.1.0";
  c.builds = {"acme-1+x86-64-v3"};
  c.verdict = "CERTIFIED-with-relaxations";
  c.isa = "x86-64-v3";
  c.cpu = "GenuineIntel family 6 model 143 (Xeon)";
  c.libraries = {{"libopenblas.so.0", "libopenblasp-r0.3.21.so"}};
  c.tolerance_table_sha256 = std::string(64, 'd');
  c.relaxed = {"dx.exp f16 forward 4 ulp: reason"};
  c.kernels = {{"dx.exp", 1, {2, 2}}, {"acme.op", 2, {1}}};
  std::string why;
  cert::Certificate back;
  ASSERT_TRUE(cert::Parse(cert::Write(c), &back, &why)) << why;
  EXPECT_EQ(cert::Write(back), cert::Write(c));
  EXPECT_TRUE(back.signature.empty());

  ASSERT_TRUE(cert::GenerateKey((dir / "k.key").string(), (dir / "k.pub").string(), &why)) << why;
  struct stat st {};
  ASSERT_EQ(::stat((dir / "k.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Never overwritten.
  EXPECT_FALSE(cert::GenerateKey((dir / "k.key").string(), (dir / "k2.pub").string(), &why));
  EXPECT_NE(why.find("never overwritten"), std::string::npos) << why;
  // A private key others can read is refused.
  fs::copy_file(dir / "k.key", dir / "open.key");
  ::chmod((dir / "open.key").c_str(), 0644);
  EXPECT_FALSE(cert::Sign(c, (dir / "open.key").string(), &why));
  EXPECT_NE(why.find("chmod 600"), std::string::npos) << why;
  EXPECT_FALSE(cert::Sign(c, (dir / "k.pub").string(), &why));  // not a private key

  auto text = cert::Sign(c, (dir / "k.key").string(), &why);
  ASSERT_TRUE(text) << why;
  ASSERT_TRUE(cert::Parse(*text, &back, &why)) << why;
  EXPECT_EQ(back.signed_by, cert::PublicKeyId((dir / "k.pub").string(), &why).value_or("?"));
  cert::TrustStore store = cert::LoadTrustStore({dir.string()}, {});
  ASSERT_EQ(store.keys.size(), 1u);
  EXPECT_EQ(cert::Verify(back, store, c.sha256, &why), cert::Check::kTrusted) << why;
  // Every byte before the signature line is covered: flip each line's last character.
  size_t start = 0;
  const size_t signature_at = text->rfind("signature ");
  while (start < signature_at) {
    const size_t end = text->find('\n', start);
    std::string edited = *text;
    edited[end - 1] = edited[end - 1] == 'x' ? 'y' : 'x';
    cert::Certificate e;
    if (cert::Parse(edited, &e, &why)) {
      EXPECT_NE(cert::Verify(e, store, e.sha256, &why), cert::Check::kTrusted) << edited;
    }
    start = end + 1;
  }
  EXPECT_EQ(cert::Verify(back, cert::LoadTrustStore({}, {}), c.sha256, &why), cert::Check::kUntrustedKey);
  fs::remove_all(dir);
}

TEST(CertificateModule, Sha256KnownVectors) {
  EXPECT_EQ(cert::Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(cert::Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
