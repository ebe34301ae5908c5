package org.deepx;

import java.util.function.Consumer;

/** Process-wide facts about the binding and the loaded host library. */
public final class Deepx {
  private Deepx() {}

  /**
   * The packed ABI version (major &lt;&lt; 16 | minor) of the headers this binding was built with:
   * DX_ABI_VERSION_PACKED of deepx/version.h, taken by CMake when the jar is built. The loaded
   * library's {@link #abiVersion()} must have the same major.
   */
  public static final int BINDING_ABI_VERSION = HeaderAbi.PACKED;

  /** The packed ABI version of the loaded host library ({@code dx_abi_version()}). */
  public static int abiVersion() {
    return DeepxLib.dx_abi_version();
  }

  /** "1.1" for a packed version. */
  public static String versionString(int packed) {
    return (packed >>> 16) + "." + (packed & 0xffff);
  }

  /** Whether the loaded host library offers dx_runtime_connect() (ABI 1.1). */
  public static boolean hasConnect() {
    return DeepxLib.connectFunction() != null;
  }

  /**
   * How many {@link Runtime}, {@link Tensor} and {@link Attrs} objects are open: made and
   * neither closed nor reclaimed. A program that closes what it makes returns to the same number.
   */
  public static long liveHandles() {
    return Handle.LIVE.get();
  }

  /**
   * Where leak reports go: the {@link System.Logger} "org.deepx" at WARNING by default, or the
   * given listener (null restores the default). A report is made when the garbage collector
   * finds a handle that was never closed; the handle is then destroyed.
   */
  public static void setLeakListener(Consumer<String> listener) {
    Handle.leakListener = listener;
  }
}
