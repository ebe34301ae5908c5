// DaemonProcess (process.h).
#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace deepx::daemon::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool CanConnect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

pid_t Spawn(const std::string& exe, const std::vector<std::string>& args, const std::string& out,
            const std::string& err) {
  std::vector<std::string> argv_s{exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  // A test killed by its timeout must not leave a daemon behind (it would also hold CTest's
  // output pipe open).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  ::dup2(o, 1);
  ::dup2(e, 2);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
  std::_Exit(127);
}

int WaitExit(pid_t pid, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) return -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

DaemonProcess::DaemonProcess() {
  // Short: a unix socket path has at most 107 bytes.
  char tmpl[] = "/tmp/deepxd-test-XXXXXX";
  if (::mkdtemp(tmpl)) dir_ = tmpl;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0 && Stop(SIGTERM) == -1 && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

bool DaemonProcess::Start(const std::string& deepxd, const std::string& config_toml,
                          const std::vector<std::string>& extra_args, int timeout_ms) {
  std::string cfg = dir_ + "/deepxd.toml";
  std::ofstream(cfg) << config_toml;
  std::vector<std::string> args{"--config", cfg};
  if (config_toml.find("socket") == std::string::npos) {
    args.push_back("--socket");
    args.push_back(socket());
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = Spawn(deepxd, args, dir_ + "/stdout", dir_ + "/stderr");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "deepxd exited at start: " + log();
      return false;
    }
    if (ReadFile(dir_ + "/stdout").find("ready") != std::string::npos && CanConnect(socket()))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  error_ = "deepxd did not become ready: " + log();
  return false;
}

int DaemonProcess::Stop(int signum, int timeout_ms) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signum);
  int rc = WaitExit(pid_, timeout_ms);
  if (rc == -2) return -1;  // still running
  pid_ = -1;
  return rc;
}

std::string DaemonProcess::log() const { return ReadFile(dir_ + "/stderr"); }

int DaemonProcess::RunToCompletion(const std::string& deepxd, const std::vector<std::string>& args,
                                   std::string* out, int timeout_ms) {
  char tmpl[] = "/tmp/deepxd-run-XXXXXX";
  if (!::mkdtemp(tmpl)) return -1;
  std::string dir = tmpl;
  pid_t pid = Spawn(deepxd, args, dir + "/out", dir + "/out");
  int rc = WaitExit(pid, timeout_ms);
  if (rc == -2) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    rc = -1;
  }
  if (out) *out = ReadFile(dir + "/out");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}

}  // namespace deepx::daemon::testing
