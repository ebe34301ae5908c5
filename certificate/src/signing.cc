// Ed25519 keys, signatures and the trust store, through OpenSSL's libcrypto (certificate.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "certificate.h"

namespace deepx::cert {
namespace {

namespace fs = std::filesystem;

using PKey = std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)>;
using Bio = std::unique_ptr<BIO, int (*)(BIO*)>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)>;

bool ReadFile(const std::string& path, std::string* out, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Writes `data` to a new file (never replacing one) with `mode`.
bool WriteNew(const std::string& path, const std::string& data, mode_t mode, std::string* why) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    *why = "cannot create " + path + ": " + std::strerror(errno) +
           (errno == EEXIST ? " (a key is never overwritten: remove it or choose another name)" : "");
    return false;
  }
  ::fchmod(fd, mode);  // whatever the umask
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      *why = "cannot write " + path + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(path.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    *why = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

PKey PublicFromPem(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  PKey key(bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr, &EVP_PKEY_free);
  if (key && EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) key.reset();
  return key;
}

std::optional<std::string> IdOf(EVP_PKEY* key) {
  unsigned char raw[32];
  size_t len = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(key, raw, &len) != 1 || len != sizeof raw) return std::nullopt;
  return Sha256Hex(std::string_view(reinterpret_cast<const char*>(raw), len));
}

std::string Base64(const unsigned char* data, size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(n));
  out.resize(len > 0 ? static_cast<size_t>(len) : 0);
  return out;
}

// The 64 bytes of an Ed25519 signature in canonical base64, or false.
bool DecodeSignature(const std::string& b64, unsigned char out[64]) {
  if (b64.size() != 88) return false;
  unsigned char buf[66];
  if (EVP_DecodeBlock(buf, reinterpret_cast<const unsigned char*>(b64.data()), 88) != 66) return false;
  std::memcpy(out, buf, 64);
  return Base64(out, 64) == b64;  // canonical: one text per signature
}

std::string Short(const std::string& id) { return id.substr(0, 16); }

}  // namespace

std::string Sha256Hex(std::string_view data) {
  static const char kDigits[] = "0123456789abcdef";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr) != 1) return {};
  std::string hex(2 * size, '0');
  for (unsigned int i = 0; i < size; ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 0xF];
  }
  return hex;
}

std::optional<std::string> Sha256Fd(int fd) {
  static const char kDigits[] = "0123456789abcdef";
  MdCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return std::nullopt;
  std::vector<unsigned char> buffer(1 << 16);
  off_t offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, buffer.data(), buffer.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(n)) != 1) return std::nullopt;
    offset += n;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &size) != 1) return std::nullopt;
  std::string hex(2 * size, '0');
  for (unsigned int i = 0; i < size; ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 0xF];
  }
  return hex;
}

std::optional<std::string> GenerateKey(const std::string& private_path, const std::string& public_path,
                                       std::string* why) {
  EVP_PKEY* raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  PKey key(raw, &EVP_PKEY_free);
  if (!key) {
    *why = "libcrypto could not generate an Ed25519 key";
    return std::nullopt;
  }
  Bio priv(BIO_new(BIO_s_mem()), &BIO_free), pub(BIO_new(BIO_s_mem()), &BIO_free);
  if (!priv || !pub || PEM_write_bio_PrivateKey(priv.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_bio_PUBKEY(pub.get(), key.get()) != 1) {
    *why = "libcrypto could not encode the key as PEM";
    return std::nullopt;
  }
  std::optional<std::string> id = IdOf(key.get());
  if (!id) {
    *why = "libcrypto could not read the public key back";
    return std::nullopt;
  }
  if (!WriteNew(private_path, BioText(priv.get()), 0600, why)) return std::nullopt;
  if (!WriteNew(public_path, BioText(pub.get()), 0644, why)) {
    ::unlink(private_path.c_str());
    return std::nullopt;
  }
  return id;
}

std::optional<std::string> PublicKeyId(const std::string& public_pem_path, std::string* why) {
  std::string pem;
  if (!ReadFile(public_pem_path, &pem, why)) return std::nullopt;
  PKey key = PublicFromPem(pem);
  if (!key) {
    *why = public_pem_path + " is not an Ed25519 public key in PEM (as `deepx keygen` writes)";
    return std::nullopt;
  }
  auto id = IdOf(key.get());
  if (!id) *why = "cannot read the public key of " + public_pem_path;
  return id;
}

std::optional<std::string> Sign(const Certificate& c, const std::string& private_path, std::string* why) {
  struct stat st;
  if (::stat(private_path.c_str(), &st) != 0) {
    *why = "cannot read the signing key " + private_path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    *why = "the signing key " + private_path + " is readable by others (mode " + mode + "); chmod 600 it";
    return std::nullopt;
  }
  std::string pem;
  if (!ReadFile(private_path, &pem, why)) return std::nullopt;
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  PKey key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr, &EVP_PKEY_free);
  if (!key || EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) {
    *why = private_path + " is not an Ed25519 private key in PEM (as `deepx keygen` writes)";
    return std::nullopt;
  }
  std::optional<std::string> id = IdOf(key.get());
  if (!id) {
    *why = "cannot derive the public key of " + private_path;
    return std::nullopt;
  }
  std::string text = Write(c) + "signed-by " + *id + "\n";
  MdCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char sig[64];
  size_t sig_len = sizeof sig;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &sig_len, reinterpret_cast<const unsigned char*>(text.data()), text.size()) != 1 ||
      sig_len != sizeof sig) {
    *why = "libcrypto could not sign with " + private_path;
    return std::nullopt;
  }
  return text + "signature " + Base64(sig, sig_len) + "\n";
}

TrustStore LoadTrustStore(const std::vector<std::string>& key_dirs, const std::vector<std::string>& revocation_dirs) {
  TrustStore store;
  auto revocations = [&](const std::string& dir) {
    const fs::path file = fs::path(dir) / "revoked-keys";
    std::error_code ec;
    if (!fs::exists(file, ec)) return;
    std::ifstream in(file);
    if (!in) {
      store.problems.push_back("cannot read " + file.string());
      return;
    }
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      line = line.substr(0, line.find('#'));
      std::istringstream words(line);
      std::string id, extra;
      if (!(words >> id)) continue;
      bool hex = id.size() == 64 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!hex || (words >> extra)) {
        store.problems.push_back(file.string() + ":" + std::to_string(number) + ": not a key id (64 hex digits)");
        continue;
      }
      store.revoked.push_back(id);
    }
  };
  for (const auto& dir : key_dirs) {
    if (dir.empty()) continue;
    store.dirs.push_back(dir);
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".pub") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string pem, why;
      if (!ReadFile(f.string(), &pem, &why)) {
        store.problems.push_back(why);
        continue;
      }
      PKey key = PublicFromPem(pem);
      std::optional<std::string> id = key ? IdOf(key.get()) : std::nullopt;
      if (!id) {
        store.problems.push_back(f.string() + " is not an Ed25519 public key (PEM)");
        continue;
      }
      store.keys.push_back({*id, f.string(), pem});
    }
    revocations(dir);
  }
  for (const auto& dir : revocation_dirs)
    if (!dir.empty() && std::find(key_dirs.begin(), key_dirs.end(), dir) == key_dirs.end()) revocations(dir);
  return store;
}

const char* CheckName(Check c) {
  switch (c) {
    case Check::kTrusted: return "trusted";
    case Check::kUnsigned: return "unsigned";
    case Check::kBadSignature: return "bad signature";
    case Check::kUntrustedKey: return "untrusted key";
    case Check::kRevokedKey: return "revoked key";
    case Check::kHashMismatch: return "hash mismatch";
    case Check::kVerdictNotCertified: return "verdict not certified";
  }
  return "?";
}

Check Verify(const Certificate& c, const TrustStore& store, const std::string& actual_sha256, std::string* why) {
  if (c.signature.empty()) {
    *why = "unsigned: the certificate carries no signature (sign it with `deepx certify --sign KEY`); "
           "an unsigned certificate is a report and grants no trust";
    return Check::kUnsigned;
  }
  if (std::find(store.revoked.begin(), store.revoked.end(), c.signed_by) != store.revoked.end()) {
    *why = "revoked key: it is signed by key " + Short(c.signed_by) + "..., which a revoked-keys list revokes";
    return Check::kRevokedKey;
  }
  const TrustStore::Key* key = nullptr;
  for (const auto& k : store.keys)
    if (k.id == c.signed_by) key = &k;
  if (key == nullptr) {
    std::string dirs;
    for (const auto& d : store.dirs) dirs += (dirs.empty() ? "" : ", ") + d;
    *why = "untrusted key: it is signed by key " + Short(c.signed_by) + "..., which is not in the trust store (" +
           (dirs.empty() ? std::string("no trust directory") : dirs) + "; DEEPX_TRUST_DIR overrides it)";
    return Check::kUntrustedKey;
  }
  PKey pkey = PublicFromPem(key->pem);
  unsigned char sig[64];
  MdCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!pkey || !DecodeSignature(c.signature, sig) || !ctx ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), sig, sizeof sig, reinterpret_cast<const unsigned char*>(c.signed_text.data()),
                       c.signed_text.size()) != 1) {
    *why = "bad signature: the signature by key " + Short(c.signed_by) + "... (" + key->file +
           ") does not match the certificate's text: it was edited after signing, or forged";
    return Check::kBadSignature;
  }
  if (c.sha256 != actual_sha256) {
    *why = "hash mismatch: the certificate was issued for another build of the plugin (SHA-256 " +
           c.sha256.substr(0, 12) + "..., the loaded code is " + actual_sha256.substr(0, 12) + "...); certify it again";
    return Check::kHashMismatch;
  }
  if (!VerdictGrantsTrust(c.verdict)) {
    *why = "verdict not certified: the certificate's verdict is '" + c.verdict + "', which grants no kernel";
    return Check::kVerdictNotCertified;
  }
  why->clear();
  return Check::kTrusted;
}

}  // namespace deepx::cert
