package org.deepx;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * How the tests get a runtime. The suite runs in one of two modes, chosen by the system property
 * deepx.test.mode (CTest runs both):
 *
 * <ul>
 *   <li>"inprocess" (default): {@link Runtime#create} plus the CPU plugin at
 *       deepx.test.cpuPlugin;
 *   <li>"remote": a deepxd started here (the binary at deepx.test.deepxd, run with --socket and
 *       --plugin for the same plugin)
 *       and {@link Runtime#connect}. Where the host library's dx_runtime_connect refuses or deepxd
 *       is not built, a line starting "SKIPPED:" says why (CTest then reports the test as skipped)
 *       and every test is aborted by an assumption.
 * </ul>
 *
 * The assertions are the same in both modes; the few that hold in one mode only say so.
 */
final class Fixture {
  private Fixture() {}

  static final String CPU_PLUGIN = System.getProperty("deepx.test.cpuPlugin", "");
  static final boolean REMOTE = "remote".equals(System.getProperty("deepx.test.mode"));
  static final String DEEPXD = System.getProperty("deepx.test.deepxd", "");
  private static final String ADDRESS;
  private static final String SKIP_REASON;

  static {
    if (CPU_PLUGIN.isEmpty()) {
      throw new IllegalStateException("deepx.test.cpuPlugin must name the CPU plugin's library");
    }
    String address = null;
    String skip = null;
    if (REMOTE) {
      List<String> missing = new ArrayList<>();
      if (!Deepx.hasConnect()) {
        missing.add("the host library (ABI " + Deepx.versionString(Deepx.abiVersion())
            + ") has no dx_runtime_connect");
      } else {
        try {
          Runtime.connect("unix:/nonexistent/deepxd.sock").close();
        } catch (DeepxException e) {
          if (e.status() == Status.UNSUPPORTED) {
            missing.add("the host library's dx_runtime_connect refuses: " + e.getMessage());
          }
        }
      }
      if (DEEPXD.isEmpty()) {
        missing.add("deepx.test.deepxd does not name deepxd");
      } else if (!Files.isExecutable(Path.of(DEEPXD))) {
        missing.add("deepxd is not built (no " + DEEPXD + ")");
      }
      if (missing.isEmpty()) {
        Daemon daemon = startDaemon();
        java.lang.Runtime.getRuntime().addShutdownHook(new Thread(daemon::stop));
        address = daemon.address;
      } else {
        StringBuilder b = new StringBuilder(
            "SKIPPED: the remote run of the Java binding's tests needs dx_runtime_connect and deepxd:");
        for (String m : missing) {
          b.append("\n  - ").append(m);
        }
        skip = b.toString();
        System.out.println(skip);
      }
    }
    ADDRESS = address;
    SKIP_REASON = skip;
  }

  /** A deepxd started by the tests, serving the CPU plugin on a socket of its own. */
  static final class Daemon {
    final Process process;
    final Path dir;
    final String address;

    private Daemon(Process process, Path dir, String address) {
      this.process = process;
      this.dir = dir;
      this.address = address;
    }

    /** Ends the daemon at once (SIGKILL), as a crash would. */
    void kill() throws InterruptedException {
      process.destroyForcibly();
      process.waitFor(5, TimeUnit.SECONDS);
    }

    /** Asks the daemon to stop (SIGTERM), then kills it after 5 s. */
    void stop() {
      process.destroy();
      try {
        if (!process.waitFor(5, TimeUnit.SECONDS)) {
          kill();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Starts deepxd --socket DIR/deepxd.sock --plugin CPU_PLUGIN and waits until it listens. */
  static Daemon startDaemon() {
    try {
      Path dir = Files.createTempDirectory("deepx-java-deepxd-");
      Path socket = dir.resolve("deepxd.sock");
      Path log = dir.resolve("deepxd.log"); // the daemon's JSON-lines log, shown if it fails
      Process process = new ProcessBuilder(
              DEEPXD, "--socket", socket.toString(), "--plugin", CPU_PLUGIN)
          .redirectErrorStream(true)
          .redirectOutput(log.toFile())
          .start();
      Daemon d = new Daemon(process, dir, "unix:" + socket);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
      while (true) {
        try (SocketChannel c = SocketChannel.open(StandardProtocolFamily.UNIX)) {
          c.connect(UnixDomainSocketAddress.of(socket));
          return d;
        } catch (IOException e) {
          if (System.nanoTime() > deadline || !process.isAlive()) {
            d.stop();
            throw new IllegalStateException(
                "deepxd did not listen at " + socket + "; its log:\n" + Files.readString(log), e);
          }
          Thread.sleep(20);
        }
      }
    } catch (IOException e) {
      throw new IllegalStateException("starting deepxd", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("starting deepxd", e);
    }
  }

  /**
   * A runtime with the CPU plugin: loaded here in-process, the daemon's in remote mode. The only
   * line that differs between the modes is the constructor.
   */
  static Runtime runtime() {
    if (REMOTE) {
      assumeTrue(SKIP_REASON == null, SKIP_REASON);
      return Runtime.connect(ADDRESS, new Runtime.ConnectOptions().clientName("deepx-java-test"));
    }
    Runtime rt = Runtime.create(new Runtime.Options().ignoreEnv(true));
    try {
      rt.loadPlugin(CPU_PLUGIN);
    } catch (RuntimeException e) {
      rt.close();
      throw e;
    }
    return rt;
  }
}
