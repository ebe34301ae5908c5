package org.deepx;

import com.sun.jna.Function;
import com.sun.jna.Library;
import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;
import com.sun.jna.Structure;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The functions of deepx/host.h, bound by JNA direct mapping ({@link Native#register}): each
 * {@code native} method below is the C function of the same name. Handles cross as {@code long}
 * (they are opaque 64-bit values, never dereferenced); out-parameters are one-element primitive
 * arrays; every fallible function returns the {@code dx_error_t*}, null on success, which
 * {@link #check} turns into a {@link DeepxException} after freeing it.
 */
final class DeepxLib {
  private DeepxLib() {}

  static final NativeLibrary LIBRARY =
      NativeLibrary.getInstance(
          "deepx_host", Map.of(Library.OPTION_STRING_ENCODING, StandardCharsets.UTF_8.name()));

  static {
    Native.register(DeepxLib.class, LIBRARY);
  }

  // Versions, names and errors.
  static native int dx_abi_version();

  static native String dx_status_string(int code);

  static native String dx_dtype_string(int dtype);

  static native int dx_error_code(Pointer error);

  static native Pointer dx_error_message(Pointer error, long[] outLength);

  static native void dx_error_destroy(Pointer error);

  // Runtime and plugins.
  static native Pointer dx_runtime_create(RuntimeOptionsStruct options, long[] outRuntime);

  static native Pointer dx_runtime_destroy(long runtime);

  static native Pointer dx_runtime_load_plugin(long runtime, String nameOrPath, int[] outIndex);

  static native Pointer dx_runtime_load_search_path(long runtime, int[] loaded, int[] failed);

  static native Pointer dx_runtime_plugin_count(long runtime, int[] out);

  static native Pointer dx_runtime_plugin_info(long runtime, int index, PluginInfoStruct out);

  static native Pointer dx_runtime_device_count(long runtime, int[] out);

  static native Pointer dx_runtime_device_info(long runtime, int index, DeviceInfoStruct out);

  static native Pointer dx_runtime_device_stats(long runtime, int index, MemoryStatsStruct out);

  static native Pointer dx_runtime_find_device(long runtime, String name, int[] out);

  static native Pointer dx_runtime_op_count(long runtime, int[] out);

  static native Pointer dx_runtime_op_name(long runtime, int id, long[] outName);

  static native Pointer dx_runtime_op_lookup(long runtime, String name, int[] outId);

  // Tensors.
  static native Pointer dx_tensor_create(
      long runtime, int device, int dtype, long[] shape, int ndim, long[] out);

  static native Pointer dx_tensor_view(
      long base, long[] shape, long[] strides, int ndim, long elemOffset, long[] out);

  static native Pointer dx_tensor_destroy(long tensor);

  static native Pointer dx_tensor_write(long tensor, Pointer data, long size);

  static native Pointer dx_tensor_write(long tensor, byte[] data, long size);

  static native Pointer dx_tensor_write(long tensor, float[] data, long size);

  static native Pointer dx_tensor_write(long tensor, double[] data, long size);

  static native Pointer dx_tensor_write(long tensor, int[] data, long size);

  static native Pointer dx_tensor_write(long tensor, long[] data, long size);

  static native Pointer dx_tensor_read(long tensor, Pointer data, long size);

  static native Pointer dx_tensor_read(long tensor, byte[] data, long size);

  static native Pointer dx_tensor_read(long tensor, float[] data, long size);

  static native Pointer dx_tensor_read(long tensor, double[] data, long size);

  static native Pointer dx_tensor_read(long tensor, int[] data, long size);

  static native Pointer dx_tensor_read(long tensor, long[] data, long size);

  static native Pointer dx_tensor_copy(long runtime, long dst, long src);

  static native Pointer dx_tensor_to_dlpack(long tensor, long[] outManaged);

  // Attributes.
  static native Pointer dx_attrs_create(long[] out);

  static native Pointer dx_attrs_destroy(long attrs);

  static native Pointer dx_attrs_set_i64(long attrs, String name, long value);

  static native Pointer dx_attrs_set_f64(long attrs, String name, double value);

  static native Pointer dx_attrs_set_bool(long attrs, String name, int value);

  static native Pointer dx_attrs_set_string(long attrs, String name, byte[] value, long length);

  static native Pointer dx_attrs_set_i64_array(long attrs, String name, long[] values, long n);

  static native Pointer dx_attrs_set_f64_array(long attrs, String name, double[] values, long n);

  // Invocation: the handle arrays are passed by address (pointer-sized entries on LP64, in
  // native memory the caller owns: Runtime's per-thread direct buffers). A long[] argument would
  // be copied into native memory and back by JNA on every call; a LongBuffer costs more still.
  static native Pointer dx_invoke(
      long runtime, int op, long inputs, int numInputs, long outputs, int numOutputs, long attrs);

  /**
   * dx_runtime_connect() (ABI 1.1), looked up when first used so that the binding loads with a
   * 1.0 library too; null when the library lacks it.
   */
  static Function connectFunction() {
    try {
      return LIBRARY.getFunction("dx_runtime_connect");
    } catch (UnsatisfiedLinkError e) {
      return null;
    }
  }

  /** Throws the error a deepx call returned, after freeing it; does nothing for null. */
  static void check(String call, Pointer error) {
    if (error == null) {
      return;
    }
    int code;
    String message;
    try {
      long[] length = new long[1];
      Pointer text = dx_error_message(error, length);
      message = new String(text.getByteArray(0, (int) length[0]), StandardCharsets.UTF_8);
      code = dx_error_code(error);
    } finally {
      dx_error_destroy(error);
    }
    throw new DeepxException(code, call, message);
  }

  /** A NUL-terminated UTF-8 copy of s in native memory, or null for null. */
  static Memory cString(String s) {
    if (s == null) {
      return null;
    }
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    Memory m = new Memory(bytes.length + 1);
    m.write(0, bytes, 0, bytes.length);
    m.setByte(bytes.length, (byte) 0);
    return m;
  }

  static String string(Pointer p) {
    return p == null ? "" : p.getString(0, StandardCharsets.UTF_8.name());
  }

  /** dx_runtime_options_t (DX_RUNTIME_OPTIONS_SIZE_1_0 = 56 bytes). */
  @Structure.FieldOrder({
    "struct_size", "flags", "plugin_path", "certificate_path", "log", "log_user_data", "next"
  })
  public static final class RuntimeOptionsStruct extends Structure {
    public long struct_size = 56;
    public long flags;
    public Pointer plugin_path;
    public Pointer certificate_path;
    public Pointer log;
    public Pointer log_user_data;
    public Pointer next;
  }

  /** dx_connect_options_t (DX_CONNECT_OPTIONS_SIZE_1_1 = 32 bytes). */
  @Structure.FieldOrder({
    "struct_size", "connect_timeout_ms", "request_timeout_ms", "client_name", "next"
  })
  public static final class ConnectOptionsStruct extends Structure {
    public long struct_size = 32;
    public int connect_timeout_ms;
    public int request_timeout_ms;
    public Pointer client_name;
    public Pointer next;
  }

  /** dx_plugin_info_t (DX_PLUGIN_INFO_SIZE_1_0 = 96 bytes). */
  @Structure.FieldOrder({
    "struct_size", "name", "vendor", "version", "build_id", "path", "abi_version", "reserved",
    "capabilities", "num_kernels", "num_memory_spaces", "num_transports", "certification",
    "certificate", "certification_note"
  })
  public static final class PluginInfoStruct extends Structure {
    public long struct_size = 96;
    public Pointer name;
    public Pointer vendor;
    public Pointer version;
    public Pointer build_id;
    public Pointer path;
    public int abi_version;
    public int reserved;
    public long capabilities;
    public int num_kernels;
    public int num_memory_spaces;
    public int num_transports;
    public int certification;
    public Pointer certificate;
    public Pointer certification_note;
  }

  /** dx_device_info_t (DX_DEVICE_INFO_SIZE_1_0 = 48 bytes). */
  @Structure.FieldOrder({
    "struct_size", "name", "device_type", "device_id", "kind", "plugin_index", "capacity",
    "alignment"
  })
  public static final class DeviceInfoStruct extends Structure {
    public long struct_size = 48;
    public Pointer name;
    public int device_type;
    public int device_id;
    public int kind;
    public int plugin_index;
    public long capacity;
    public long alignment;
  }

  /** dx_memory_stats_t (DX_MEMORY_STATS_SIZE_1_0 = 48 bytes). */
  @Structure.FieldOrder({
    "struct_size", "in_use_bytes", "peak_in_use_bytes", "reserved_bytes", "peak_reserved_bytes",
    "live_allocations"
  })
  public static final class MemoryStatsStruct extends Structure {
    public long struct_size = 48;
    public long in_use_bytes;
    public long peak_in_use_bytes;
    public long reserved_bytes;
    public long peak_reserved_bytes;
    public long live_allocations;
  }
}
