// The deepx certificate: one module that writes, signs, parses and verifies the certificates
// `deepx certify` issues and the host honours (certificate/README.md has the format and the
// trust rules). Used by the conformance runner, the host and the `deepx` CLI; depends on
// OpenSSL's libcrypto only (Ed25519 signatures, SHA-256), never on the host or the runner.
//
// Nothing here keeps global state; every function may be called from any thread.
#ifndef DEEPX_CERTIFICATE_SRC_CERTIFICATE_H_
#define DEEPX_CERTIFICATE_SRC_CERTIFICATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace deepx::cert {

// The format version `Write` emits. Parse reads 1 (unsigned, from deepx before signing) and 2.
inline constexpr int kFormat = 2;

// A certified kernel: op, DLPack device type and the packed dx_dtype_t values of its signature.
struct Kernel {
  std::string op;
  int32_t device_type = 0;
  std::vector<uint32_t> dtypes;
  bool operator<(const Kernel& o) const {
    return std::tie(op, device_type, dtypes) < std::tie(o.op, o.device_type, o.dtypes);
  }
  bool operator==(const Kernel& o) const {
    return op == o.op && device_type == o.device_type && dtypes == o.dtypes;
  }
};

// A shared library loaded with the plugin: its name as the dynamic loader knows it (the
// soname or the file name) and a version (see LibraryVersion()).
struct Library {
  std::string name;
  std::string version;
};

// What a certificate says. `Write` emits the fields in this order; `Parse` fills them.
struct Certificate {
  int format = kFormat;
  std::string plugin;                  // the plugin's name (dx_plugin_t::name)
  std::string sha256;                  // of the plugin's .so, 64 lowercase hex digits
  std::string suite;                   // the conformance suite's version
  std::vector<std::string> builds;     // build ids the verdict was earned by (at most one written)
  std::string verdict;                 // CERTIFIED, CERTIFIED-with-relaxations, NOT CERTIFIED, ...
  std::string isa;                     // the instruction-set variant that ran ("" when none)
  std::string cpu;                     // the CPU it ran on, one line (information only)
  std::vector<Library> libraries;      // what else was loaded with the plugin
  std::string tolerance_table_sha256;  // the tolerance table the verdict was judged by
  std::vector<std::string> relaxed;    // one line per relaxation the verdict relied on
  std::vector<Kernel> kernels;         // the kernels the verdict covers
  // The signature (format 2): the key's id (KeyId()) and the base64 Ed25519 signature of the
  // bytes of the file up to and including the `signed-by` line. Empty when unsigned.
  std::string signed_by;
  std::string signature;
  // Set by Parse: exactly the bytes the signature covers ("" when unsigned).
  std::string signed_text;
};

// Verdicts that grant trust to the listed kernels.
bool VerdictGrantsTrust(std::string_view verdict);

// The text of `c` without signature lines (what a signature covers, minus the `signed-by` line).
// Characters that would break the line format (newlines; spaces in one-word fields) are replaced.
std::string Write(const Certificate& c);

// Parses a certificate. Strict: the first line, one of each single-valued key, well-formed
// kernel and library lines, and nothing after the `signature` line. Unknown keys are kept out
// of the result but, when signed, covered by the signature. False with `why` (one line, no
// path) when the text is refused.
bool Parse(std::string_view text, Certificate* out, std::string* why);

// ---- keys and signatures (Ed25519 through libcrypto) ----

// Creates a new Ed25519 key pair: the private key (PKCS#8 PEM, created with mode 0600, never
// overwriting a file) and the public key (SubjectPublicKeyInfo PEM). Returns the key's id, or
// nullopt with `why`.
std::optional<std::string> GenerateKey(const std::string& private_path,
                                       const std::string& public_path, std::string* why);

// The id of a public key: the SHA-256 (hex) of its 32 raw bytes. nullopt with `why` for a file
// that is not an Ed25519 public key (PEM).
std::optional<std::string> PublicKeyId(const std::string& public_pem_path, std::string* why);

// Signs `c` with the private key at `private_path`: returns the complete certificate text
// (Write(c), a `signed-by` line and a `signature` line), or nullopt with `why`.
std::optional<std::string> Sign(const Certificate& c, const std::string& private_path,
                                 std::string* why);

// ---- the trust store ----

// Public keys that may sign, and revoked key ids. Directories hold `*.pub` (PEM public keys)
// and optionally `revoked-keys` (one key id per line; `#` starts a comment).
struct TrustStore {
  struct Key {
    std::string id;
    std::string file;
    std::string pem;  // the public key's PEM text
  };
  std::vector<Key> keys;
  std::vector<std::string> revoked;       // key ids
  std::vector<std::string> dirs;          // where keys were looked for (for messages)
  std::vector<std::string> problems;      // unreadable keys, malformed revocation lines
};

// Reads the public keys of `key_dirs` and the revocation lists of `key_dirs` and
// `revocation_dirs`. Missing directories are no error (they hold nothing).
TrustStore LoadTrustStore(const std::vector<std::string>& key_dirs,
                          const std::vector<std::string>& revocation_dirs);

// Which check a certificate failed on its way to granting trust (Check::kTrusted: none).
enum class Check {
  kTrusted,
  kUnsigned,
  kBadSignature,
  kUntrustedKey,
  kRevokedKey,
  kHashMismatch,
  kVerdictNotCertified,
};
// "unsigned", "bad signature", ... : the check's name in messages.
const char* CheckName(Check c);

// Checks a parsed certificate: signed, by a key of `store` that is not revoked, with a valid
// signature, for a plugin file whose SHA-256 is `actual_sha256`, with a verdict that grants
// trust. Returns the first check that fails (in the order of the enum) with `why` in words.
Check Verify(const Certificate& c, const TrustStore& store, const std::string& actual_sha256,
             std::string* why);

// ---- what else decides the numbers ----

// The shared libraries loaded in this process now (dl_iterate_phdr), except the executable,
// the vDSO and the dynamic loader, each with LibraryVersion(). Sorted by name, unique.
std::vector<Library> LoadedLibraries();
// A library's version: the name of the file its path resolves to when that differs from the
// loaded name (libopenblas.so.0 -> libopenblasp-r0.3.21.so, libstdc++.so.6 ->
// libstdc++.so.6.0.30); "glibc-<version>" for the C library's own objects; otherwise
// "sha256:<first 16 hex digits>" of the file.
std::string LibraryVersion(const std::string& path);
// The libraries of `recorded` loaded here in another version, one "name: recorded X, loaded Y"
// line each (empty: none differs). Libraries not loaded here, and libraries loaded here that
// the certificate does not record, change nothing.
std::vector<std::string> ChangedLibraries(const std::vector<Library>& recorded);
// The dynamic section of an ELF shared object (64-bit, this machine's byte order) open as `fd`:
// its DT_NEEDED names and its search path (DT_RUNPATH entries, then DT_RPATH's, unexpanded).
// False when it cannot be read; every offset is checked against the file.
struct DynamicSection {
  std::vector<std::string> needed;
  std::vector<std::string> search_path;
};
bool ReadDynamicSection(int fd, DynamicSection* out);
// "GenuineIntel family 6 model 143 (Intel(R) Xeon(R) Platinum 8480+)" from /proc/cpuinfo, or
// the machine name when it has no such fields.
std::string CpuDescription();

// SHA-256 (hex) of bytes, and of what is readable from `fd` from offset 0 (nullopt on error).
std::string Sha256Hex(std::string_view data);
std::optional<std::string> Sha256Fd(int fd);

}  // namespace deepx::cert
#endif  // DEEPX_CERTIFICATE_SRC_CERTIFICATE_H_
