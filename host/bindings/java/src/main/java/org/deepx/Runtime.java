package org.deepx;

import com.sun.jna.Function;
import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * A deepx runtime: in-process ({@link #create}) or connected to a deepxd daemon ({@link
 * #connect}); every other method is the same for both.
 *
 * <p>All methods may be called from many threads at once, {@link #loadPlugin} included. {@link
 * #close} waits for the calls in flight and makes later calls fail with FAILED_PRECONDITION
 * (host.h forbids dx_runtime_destroy() to overlap other calls on the runtime; the binding keeps
 * the rule). Tensors of a closed runtime stay usable until they are closed themselves.
 */
public final class Runtime extends Handle {
  private final boolean remote;

  private Runtime(long handle, boolean remote) {
    super(handle, "runtime", remote ? "remote Runtime" : "Runtime", DeepxLib::dx_runtime_destroy);
    this.remote = remote;
  }

  /** Options of {@link #create(Options)} (dx_runtime_options_t). */
  public static final class Options {
    String pluginPath;
    String certificatePath;
    long flags;

    /** Colon-separated directories searched for plugins named by name. */
    public Options pluginPath(String path) {
      this.pluginPath = path;
      return this;
    }

    /** Colon-separated directories searched for plugin certificates. */
    public Options certificatePath(String path) {
      this.certificatePath = path;
      return this;
    }

    /** Ignore DEEPX_PLUGIN_PATH and DEEPX_REQUIRE_CERTIFIED (DX_RUNTIME_FLAG_IGNORE_ENV). */
    public Options ignoreEnv(boolean on) {
      flags = on ? flags | 1L : flags & ~1L;
      return this;
    }

    /** Run only certified kernels (DX_RUNTIME_FLAG_REQUIRE_CERTIFIED). */
    public Options requireCertified(boolean on) {
      flags = on ? flags | 2L : flags & ~2L;
      return this;
    }
  }

  /** Options of {@link #connect(String, ConnectOptions)} (dx_connect_options_t). */
  public static final class ConnectOptions {
    int connectTimeoutMs;
    int requestTimeoutMs;
    String clientName;

    /** How long connecting may take; 0 for the host's default (5 s). */
    public ConnectOptions connectTimeoutMillis(int ms) {
      this.connectTimeoutMs = ms;
      return this;
    }

    /** How long each call waits for its reply; 0 for the host's default (60 s). */
    public ConnectOptions requestTimeoutMillis(int ms) {
      this.requestTimeoutMs = ms;
      return this;
    }

    /** A name for the daemon's logs. */
    public ConnectOptions clientName(String name) {
      this.clientName = name;
      return this;
    }
  }

  /** An in-process runtime with no plugins loaded (dx_runtime_create()). */
  public static Runtime create() {
    return create(new Options());
  }

  /** An in-process runtime with no plugins loaded (dx_runtime_create()). */
  public static Runtime create(Options options) {
    checkAbi("Runtime.create");
    DeepxLib.RuntimeOptionsStruct o = new DeepxLib.RuntimeOptionsStruct();
    Memory pluginPath = DeepxLib.cString(options.pluginPath);
    Memory certificatePath = DeepxLib.cString(options.certificatePath);
    o.flags = options.flags;
    o.plugin_path = pluginPath;
    o.certificate_path = certificatePath;
    long[] out = new long[1];
    DeepxLib.check("Runtime.create", DeepxLib.dx_runtime_create(o, out));
    return new Runtime(out[0], false);
  }

  /** A runtime whose calls go to the deepxd daemon at address ("unix:PATH" or a path). */
  public static Runtime connect(String address) {
    return connect(address, new ConnectOptions());
  }

  /**
   * A runtime whose calls go to the deepxd daemon at address (dx_runtime_connect()). Loading
   * plugins and device statistics are refused with UNSUPPORTED; calls whose daemon went away
   * fail with UNAVAILABLE.
   *
   * @throws DeepxException UNSUPPORTED when the loaded host library has no dx_runtime_connect
   */
  public static Runtime connect(String address, ConnectOptions options) {
    final String call = "Runtime.connect";
    checkAbi(call);
    Function connect = DeepxLib.connectFunction();
    if (connect == null) {
      throw new DeepxException(
          Status.UNSUPPORTED,
          call,
          "the loaded host library (ABI "
              + Deepx.versionString(Deepx.abiVersion())
              + ") has no dx_runtime_connect (added in ABI 1.1)");
    }
    DeepxLib.ConnectOptionsStruct o = new DeepxLib.ConnectOptionsStruct();
    Memory name = DeepxLib.cString(options.clientName);
    o.connect_timeout_ms = options.connectTimeoutMs;
    o.request_timeout_ms = options.requestTimeoutMs;
    o.client_name = name;
    Memory addr = DeepxLib.cString(address);
    Memory out = new Memory(8);
    out.setLong(0, 0);
    Pointer error = (Pointer) connect.invoke(Pointer.class, new Object[] {addr, o, out});
    DeepxLib.check(call, error);
    return new Runtime(out.getLong(0), true);
  }

  /**
   * Refuses a host library of another ABI major than the headers the binding was built with: the
   * layouts of the structs it fills would differ.
   */
  private static void checkAbi(String call) {
    int lib = Deepx.abiVersion();
    if (lib >>> 16 != Deepx.BINDING_ABI_VERSION >>> 16) {
      throw new DeepxException(
          Status.VERSION_MISMATCH,
          call,
          "the host library has ABI " + Deepx.versionString(lib)
              + ", this binding was built with the headers of ABI "
              + Deepx.versionString(Deepx.BINDING_ABI_VERSION));
    }
  }

  /** Whether the runtime was made by {@link #connect}. */
  public boolean isRemote() {
    return remote;
  }

  /** Loads a plugin by path (containing '/') or by name ("cpu") (dx_runtime_load_plugin()). */
  public Plugin loadPlugin(String nameOrPath) {
    final String call = "Runtime.loadPlugin";
    long h = enter(call);
    try {
      int[] index = new int[1];
      DeepxLib.check(call, DeepxLib.dx_runtime_load_plugin(h, nameOrPath, index));
      return plugin(call, h, index[0]);
    } finally {
      leave();
    }
  }

  /**
   * Loads every plugin of the search path (dx_runtime_load_search_path()); returns how many
   * loaded (those that failed are logged by the host with their reason).
   */
  public int loadSearchPath() {
    final String call = "Runtime.loadSearchPath";
    long h = enter(call);
    try {
      int[] loaded = new int[1];
      DeepxLib.check(call, DeepxLib.dx_runtime_load_search_path(h, loaded, null));
      return loaded[0];
    } finally {
      leave();
    }
  }

  /** The loaded plugins, in load order. */
  public List<Plugin> plugins() {
    final String call = "Runtime.plugins";
    long h = enter(call);
    try {
      int[] n = new int[1];
      DeepxLib.check(call, DeepxLib.dx_runtime_plugin_count(h, n));
      List<Plugin> out = new ArrayList<>(n[0]);
      for (int i = 0; i < n[0]; i++) {
        out.add(plugin(call, h, i));
      }
      return out;
    } finally {
      leave();
    }
  }

  private static Plugin plugin(String call, long h, int index) {
    DeepxLib.PluginInfoStruct p = new DeepxLib.PluginInfoStruct();
    DeepxLib.check(call, DeepxLib.dx_runtime_plugin_info(h, index, p));
    return new Plugin(
        index,
        DeepxLib.string(p.name),
        DeepxLib.string(p.vendor),
        DeepxLib.string(p.version),
        DeepxLib.string(p.build_id),
        DeepxLib.string(p.path),
        p.abi_version,
        p.capabilities,
        p.num_kernels,
        p.num_memory_spaces,
        p.num_transports,
        p.certification,
        DeepxLib.string(p.certificate),
        DeepxLib.string(p.certification_note));
  }

  /** The devices (memory spaces) of every loaded plugin. */
  public List<Device> devices() {
    final String call = "Runtime.devices";
    long h = enter(call);
    try {
      int[] n = new int[1];
      DeepxLib.check(call, DeepxLib.dx_runtime_device_count(h, n));
      List<Device> out = new ArrayList<>(n[0]);
      for (int i = 0; i < n[0]; i++) {
        DeepxLib.DeviceInfoStruct d = new DeepxLib.DeviceInfoStruct();
        DeepxLib.check(call, DeepxLib.dx_runtime_device_info(h, i, d));
        out.add(
            new Device(
                i,
                DeepxLib.string(d.name),
                d.device_type,
                d.device_id,
                d.kind,
                d.plugin_index,
                d.capacity,
                d.alignment));
      }
      return out;
    } finally {
      leave();
    }
  }

  /** The index of the device named name ("cpu"); NOT_FOUND when there is none. */
  public int findDevice(String name) {
    final String call = "Runtime.findDevice";
    long h = enter(call);
    try {
      int[] index = new int[1];
      DeepxLib.check(call, DeepxLib.dx_runtime_find_device(h, name, index));
      return index[0];
    } finally {
      leave();
    }
  }

  /** Device index's allocation statistics; UNSUPPORTED on a remote runtime. */
  public MemoryStats deviceStats(int index) {
    final String call = "Runtime.deviceStats";
    long h = enter(call);
    try {
      DeepxLib.MemoryStatsStruct s = new DeepxLib.MemoryStatsStruct();
      DeepxLib.check(call, DeepxLib.dx_runtime_device_stats(h, index, s));
      return new MemoryStats(
          s.in_use_bytes,
          s.peak_in_use_bytes,
          s.reserved_bytes,
          s.peak_reserved_bytes,
          s.live_allocations);
    } finally {
      leave();
    }
  }

  /** Looks an op up by name (dx_runtime_op_lookup()); NOT_FOUND when no plugin implements it. */
  public Op op(String name) {
    final String call = "Runtime.op";
    long h = enter(call);
    try {
      int[] id = new int[1];
      DeepxLib.check(call, DeepxLib.dx_runtime_op_lookup(h, name, id));
      return new Op(id[0], name);
    } finally {
      leave();
    }
  }

  /** The interned ops, by id. */
  public List<Op> ops() {
    final String call = "Runtime.ops";
    long h = enter(call);
    try {
      int[] n = new int[1];
      DeepxLib.check(call, DeepxLib.dx_runtime_op_count(h, n));
      List<Op> out = new ArrayList<>(n[0]);
      long[] name = new long[1];
      for (int i = 0; i < n[0]; i++) {
        DeepxLib.check(call, DeepxLib.dx_runtime_op_name(h, i, name));
        out.add(new Op(i, DeepxLib.string(new Pointer(name[0]))));
      }
      return out;
    } finally {
      leave();
    }
  }

  /**
   * Allocates a compact row-major tensor on device; contents uninitialised (dx_tensor_create()).
   */
  public Tensor tensor(int device, DType dtype, long... shape) {
    final String call = "Runtime.tensor";
    long h = enter(call);
    try {
      long[] out = new long[1];
      DeepxLib.check(
          call,
          DeepxLib.dx_tensor_create(
              h, device, dtype.packed(), shape.length == 0 ? null : shape, shape.length, out));
      return new Tensor(out[0], dtype, shape.clone(), device);
    } finally {
      leave();
    }
  }

  /** A new f32 tensor of the given shape holding data. */
  public Tensor tensor(int device, float[] data, long... shape) {
    Tensor t = tensor(device, DType.F32, shape);
    return writeOrClose(t, () -> t.write(data));
  }

  /** A new f64 tensor of the given shape holding data. */
  public Tensor tensor(int device, double[] data, long... shape) {
    Tensor t = tensor(device, DType.F64, shape);
    return writeOrClose(t, () -> t.write(data));
  }

  /** A new i64 tensor of the given shape holding data. */
  public Tensor tensor(int device, long[] data, long... shape) {
    Tensor t = tensor(device, DType.I64, shape);
    return writeOrClose(t, () -> t.write(data));
  }

  private static Tensor writeOrClose(Tensor t, java.lang.Runnable write) {
    try {
      write.run();
      return t;
    } catch (RuntimeException e) {
      t.close();
      throw e;
    }
  }

  /** Copies src's elements into dst: same dtype and shape, any devices (dx_tensor_copy()). */
  public void copy(Tensor dst, Tensor src) {
    final String call = "Runtime.copy";
    long h = enter(call);
    try {
      if (!dst.tryEnter()) {
        throw DeepxException.closed(call, "destination tensor");
      }
      try {
        if (!src.tryEnter()) {
          throw DeepxException.closed(call, "source tensor");
        }
        try {
          DeepxLib.check(call, DeepxLib.dx_tensor_copy(h, dst.raw(), src.raw()));
        } finally {
          src.leave();
        }
      } finally {
        dst.leave();
      }
    } finally {
      leave();
    }
  }

  /**
   * Runs op synchronously (dx_invoke()). Outputs are allocated by the caller with the op's output
   * shapes; a null input passes an absent optional input; attrs may be null.
   *
   * @throws DeepxException NOT_FOUND for an unknown op id, SHAPE_MISMATCH for tensors that do not
   *     fit, UNSUPPORTED when no kernel serves the dtypes, FAILED_PRECONDITION for a closed
   *     runtime, tensor or attribute list, or the kernel's error
   */
  public void invoke(Op op, Tensor[] inputs, Tensor[] outputs, Attrs attrs) {
    invoke("Runtime.invoke", op.id(), inputs, outputs, attrs);
  }

  /** Resolves the op by name, then invokes it as {@link #invoke(Op, Tensor[], Tensor[], Attrs)}. */
  public void invoke(String opName, Tensor[] inputs, Tensor[] outputs, Attrs attrs) {
    invoke("Runtime.invoke", op(opName).id(), inputs, outputs, attrs);
  }

  private void invoke(String call, int op, Tensor[] inputs, Tensor[] outputs, Attrs attrs) {
    if (inputs.length > 64 || outputs.length > 64) {
      throw new DeepxException(
          Status.OUT_OF_RANGE, call, "more than 64 inputs or outputs");
    }
    long h = enter(call);
    try {
      int in = enterAll(call, "input", inputs);
      try {
        int out = enterAll(call, "output", outputs);
        try {
          long a = 0;
          if (attrs != null) {
            a = attrs.enterShared(call);
          }
          try {
            HandleArrays arrays = HANDLE_ARRAYS.get();
            arrays.fill(arrays.in, inputs);
            arrays.fill(arrays.out, outputs);
            DeepxLib.check(
                call,
                DeepxLib.dx_invoke(
                    h, op, arrays.inAddress, inputs.length, arrays.outAddress, outputs.length, a));
          } finally {
            if (attrs != null) {
              attrs.leaveShared();
            }
          }
        } finally {
          leaveAll(outputs, out);
        }
      } finally {
        leaveAll(inputs, in);
      }
    } finally {
      leave();
    }
  }

  private static int enterAll(String call, String role, Tensor[] ts) {
    for (int i = 0; i < ts.length; i++) {
      if (ts[i] != null && !ts[i].tryEnter()) {
        leaveAll(ts, i);
        throw DeepxException.closed(call, role + " tensor " + i);
      }
    }
    return ts.length;
  }

  private static void leaveAll(Tensor[] ts, int n) {
    for (int i = 0; i < n; i++) {
      if (ts[i] != null) {
        ts[i].leave();
      }
    }
  }

  /**
   * The handle arrays of dx_invoke() for one thread: two direct buffers of 64 entries, written
   * through ByteBuffer (no native call) and passed by address, so a call allocates and copies
   * nothing. Only the owning thread uses them, for the duration of its call; the thread-local map
   * keeps them alive as long as the thread.
   */
  private static final class HandleArrays {
    final ByteBuffer in = newArray();
    final ByteBuffer out = newArray();
    final long inAddress = Pointer.nativeValue(Native.getDirectBufferPointer(in));
    final long outAddress = Pointer.nativeValue(Native.getDirectBufferPointer(out));

    private static ByteBuffer newArray() {
      return ByteBuffer.allocateDirect(64 * Long.BYTES).order(ByteOrder.nativeOrder());
    }

    void fill(ByteBuffer array, Tensor[] ts) {
      for (int i = 0; i < ts.length; i++) {
        array.putLong(i * Long.BYTES, ts[i] == null ? 0 : ts[i].raw());
      }
    }
  }

  private static final ThreadLocal<HandleArrays> HANDLE_ARRAYS =
      ThreadLocal.withInitial(HandleArrays::new);
}
