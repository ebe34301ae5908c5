// deepx::daemon::testing::DaemonProcess: starts a real deepxd on a socket in a fresh temporary
// directory, waits until it accepts connections, and stops it (SIGTERM) at the end.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace deepx::daemon::testing {

class DaemonProcess {
 public:
  /// A temporary directory is made; nothing runs yet.
  DaemonProcess();
  /// Sends SIGTERM if it still runs (then SIGKILL after 10 s) and removes the directory.
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  /// Writes |config_toml| to <dir>/deepxd.toml and starts `deepxd --config` on it (the socket
  /// path is <dir>/s unless the TOML names one) plus |extra_args|; waits until the socket
  /// accepts connections (up to |timeout_ms|). False (and a message in error()) otherwise.
  bool Start(const std::string& deepxd, const std::string& config_toml,
             const std::vector<std::string>& extra_args = {}, int timeout_ms = 20000);
  /// Sends |signum| and waits for the exit; returns the exit status, or -1 when it did not
  /// exit normally within |timeout_ms|.
  int Stop(int signum, int timeout_ms = 10000);
  /// Runs `deepxd args...` to completion: its exit status (or -1), with stdout and stderr in
  /// |out|.
  static int RunToCompletion(const std::string& deepxd, const std::vector<std::string>& args,
                             std::string* out, int timeout_ms = 20000);

  const std::string& dir() const { return dir_; }
  std::string socket() const { return dir_ + "/s"; }
  /// The daemon's standard error so far (its JSON-lines log).
  std::string log() const;
  const std::string& error() const { return error_; }
  pid_t pid() const { return pid_; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  std::string error_;
};

}  // namespace deepx::daemon::testing
