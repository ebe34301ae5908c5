package org.deepx;

import com.sun.jna.Function;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * A deepx tensor (dx_tensor_t), in this process or, for a remote runtime, in the daemon. The
 * dtype, shape and device are fixed at creation and stay readable after {@link #close}; every
 * other method fails with FAILED_PRECONDITION once the tensor is closed.
 *
 * <p>Methods may be called from many threads at once, and {@link #close} waits for the calls in
 * flight on the tensor. Concurrent writes to one tensor, or a write concurrent with a read, race
 * on its elements as they would in C. A tensor outlives its runtime: after {@link Runtime#close}
 * it still reads, writes, views and closes.
 *
 * <p>Data moves through {@link ByteBuffer}s in native byte order ({@link ByteOrder#nativeOrder}):
 * a direct buffer is handed to the host as is (one copy, the host's, between the tensor and the
 * buffer); {@link #buffer()} maps an in-process CPU tensor's memory itself, with no copy at all.
 */
public final class Tensor extends Handle {
  private final DType dtype;
  private final long[] shape;
  private final long numel;
  private final int device;

  Tensor(long handle, DType dtype, long[] shape, int device) {
    super(handle, "tensor", "Tensor(" + dtype.shortName() + " " + Arrays.toString(shape) + ")",
        DeepxLib::dx_tensor_destroy);
    this.dtype = dtype;
    this.shape = shape;
    long n = 1;
    for (long s : shape) {
      n *= s;
    }
    this.numel = n;
    this.device = device;
  }

  public DType dtype() {
    return dtype;
  }

  /** A copy of the shape. */
  public long[] shape() {
    return shape.clone();
  }

  /** The number of elements. */
  public long numel() {
    return numel;
  }

  /** The index of the device holding the tensor. */
  public int device() {
    return device;
  }

  /** numel() times the element size: the bytes read and write move. */
  public long byteSize() {
    return numel * dtype.size();
  }

  @Override
  public String toString() {
    return "Tensor(" + dtype.shortName() + " " + Arrays.toString(shape) + ")";
  }

  /**
   * Copies src's remaining bytes (exactly byteSize(), elements in row-major order, native byte
   * order) into the tensor (dx_tensor_write()). A direct buffer is passed to the host without a
   * copy; a heap buffer's array likewise. The position is not moved.
   */
  public void write(ByteBuffer src) {
    final String call = "Tensor.write";
    long h = enter(call);
    try {
      if (src.isDirect()) {
        DeepxLib.check(
            call, DeepxLib.dx_tensor_write(h, at(src), (long) src.remaining()));
      } else {
        byte[] bytes = new byte[src.remaining()];
        src.duplicate().get(bytes);
        DeepxLib.check(call, DeepxLib.dx_tensor_write(h, bytes, (long) bytes.length));
      }
    } finally {
      leave();
    }
  }

  /**
   * Copies the tensor's elements (row-major, native byte order) into dst's remaining bytes,
   * exactly byteSize() of them (dx_tensor_read()). The position is not moved.
   */
  public void read(ByteBuffer dst) {
    final String call = "Tensor.read";
    if (dst.isReadOnly()) {
      throw new DeepxException(Status.INVALID_ARGUMENT, call, "a read-only buffer");
    }
    long h = enter(call);
    try {
      if (dst.isDirect()) {
        DeepxLib.check(call, DeepxLib.dx_tensor_read(h, at(dst), (long) dst.remaining()));
      } else {
        byte[] bytes = new byte[dst.remaining()];
        DeepxLib.check(call, DeepxLib.dx_tensor_read(h, bytes, (long) bytes.length));
        dst.duplicate().put(bytes);
      }
    } finally {
      leave();
    }
  }

  private static Pointer at(ByteBuffer b) {
    return Native.getDirectBufferPointer(b).share(b.position());
  }

  /** Writes an f32 tensor's elements. */
  public void write(float[] data) {
    checkArray("Tensor.write", DType.F32, data.length);
    long h = enter("Tensor.write");
    try {
      DeepxLib.check("Tensor.write", DeepxLib.dx_tensor_write(h, data, 4L * data.length));
    } finally {
      leave();
    }
  }

  /** Writes an f64 tensor's elements. */
  public void write(double[] data) {
    checkArray("Tensor.write", DType.F64, data.length);
    long h = enter("Tensor.write");
    try {
      DeepxLib.check("Tensor.write", DeepxLib.dx_tensor_write(h, data, 8L * data.length));
    } finally {
      leave();
    }
  }

  /** Writes an i32 tensor's elements. */
  public void write(int[] data) {
    checkArray("Tensor.write", DType.I32, data.length);
    long h = enter("Tensor.write");
    try {
      DeepxLib.check("Tensor.write", DeepxLib.dx_tensor_write(h, data, 4L * data.length));
    } finally {
      leave();
    }
  }

  /** Writes an i64 tensor's elements. */
  public void write(long[] data) {
    checkArray("Tensor.write", DType.I64, data.length);
    long h = enter("Tensor.write");
    try {
      DeepxLib.check("Tensor.write", DeepxLib.dx_tensor_write(h, data, 8L * data.length));
    } finally {
      leave();
    }
  }

  /** An f32 tensor's elements. */
  public float[] readFloats() {
    checkArray("Tensor.readFloats", DType.F32, numel);
    float[] out = new float[(int) numel];
    long h = enter("Tensor.readFloats");
    try {
      DeepxLib.check("Tensor.readFloats", DeepxLib.dx_tensor_read(h, out, 4L * out.length));
      return out;
    } finally {
      leave();
    }
  }

  /** An f64 tensor's elements. */
  public double[] readDoubles() {
    checkArray("Tensor.readDoubles", DType.F64, numel);
    double[] out = new double[(int) numel];
    long h = enter("Tensor.readDoubles");
    try {
      DeepxLib.check("Tensor.readDoubles", DeepxLib.dx_tensor_read(h, out, 8L * out.length));
      return out;
    } finally {
      leave();
    }
  }

  /** An i32 tensor's elements. */
  public int[] readInts() {
    checkArray("Tensor.readInts", DType.I32, numel);
    int[] out = new int[(int) numel];
    long h = enter("Tensor.readInts");
    try {
      DeepxLib.check("Tensor.readInts", DeepxLib.dx_tensor_read(h, out, 4L * out.length));
      return out;
    } finally {
      leave();
    }
  }

  /** An i64 tensor's elements. */
  public long[] readLongs() {
    checkArray("Tensor.readLongs", DType.I64, numel);
    long[] out = new long[(int) numel];
    long h = enter("Tensor.readLongs");
    try {
      DeepxLib.check("Tensor.readLongs", DeepxLib.dx_tensor_read(h, out, 8L * out.length));
      return out;
    } finally {
      leave();
    }
  }

  private void checkArray(String call, DType want, long length) {
    if (dtype != want) {
      throw new DeepxException(
          Status.INVALID_ARGUMENT,
          call,
          "a " + want.shortName() + " array for a tensor of dtype " + dtype.shortName());
    }
    if (length != numel) {
      throw new DeepxException(
          Status.INVALID_ARGUMENT, call, length + " elements for a tensor of " + numel);
    }
  }

  /**
   * A view of this tensor's storage with another shape, strides (in elements; null for compact
   * row-major) and element offset (dx_tensor_view()). Close it like any tensor; the storage lives
   * until its last view is closed.
   */
  public Tensor view(long[] shape, long[] strides, long offset) {
    final String call = "Tensor.view";
    long h = enter(call);
    try {
      if (strides != null && strides.length != shape.length) {
        throw new DeepxException(
            Status.INVALID_ARGUMENT,
            call,
            strides.length + " strides for a shape of rank " + shape.length);
      }
      long[] out = new long[1];
      DeepxLib.check(
          call,
          DeepxLib.dx_tensor_view(
              h, shape.length == 0 ? null : shape, strides, shape.length, offset, out));
      return new Tensor(out[0], dtype, shape.clone(), device);
    } finally {
      leave();
    }
  }

  // Offsets in dx_dlpack_versioned_t (LP64): the DLTensor starts at 32.
  private static final int DELETER = 16;
  private static final int FLAGS = 24;
  private static final int DATA = 32;
  private static final int DEVICE_TYPE = 40;
  private static final int NDIM = 48;
  private static final int STRIDES = 64;
  private static final int BYTE_OFFSET = 72;
  private static final int KDL_CPU = 1;

  /**
   * The tensor's own memory as a direct {@link ByteBuffer} in native byte order, without a copy:
   * writes through the buffer are the tensor's elements, and the other way round.
   *
   * <p>The buffer holds a DLPack export of the storage (dx_tensor_to_dlpack()), so the memory
   * stays valid for as long as the buffer (or a slice of it) is reachable, even after the tensor
   * is closed; the export is released when the buffer is collected. Read-only tensors give a
   * read-only buffer.
   *
   * @throws DeepxException UNSUPPORTED for a tensor whose memory is not this process's host memory
   *     (a remote tensor, a GPU tensor) or is not compact row-major (a strided view)
   */
  public ByteBuffer buffer() {
    final String call = "Tensor.buffer";
    long h = enter(call);
    try {
      long[] out = new long[1];
      DeepxLib.check(call, DeepxLib.dx_tensor_to_dlpack(h, out));
      Pointer managed = new Pointer(out[0]);
      Pointer deleter = managed.getPointer(DELETER);
      Runnable release =
          () -> {
            if (deleter != null) {
              Function.getFunction(deleter).invoke(Void.class, new Object[] {managed});
            }
          };
      if (managed.getInt(DEVICE_TYPE) != KDL_CPU || !compact(managed)) {
        release.run();
        throw new DeepxException(
            Status.UNSUPPORTED,
            call,
            "only a compact tensor in host memory of this process can be mapped; copy with read()");
      }
      long size = byteSize();
      ByteBuffer buffer =
          managed.getPointer(DATA).share(managed.getLong(BYTE_OFFSET)).getByteBuffer(0, size);
      buffer.order(ByteOrder.nativeOrder());
      if ((managed.getLong(FLAGS) & 1L) != 0) {
        buffer = buffer.asReadOnlyBuffer().order(ByteOrder.nativeOrder());
      }
      CLEANER.register(buffer, release);
      return buffer;
    } finally {
      leave();
    }
  }

  private boolean compact(Pointer managed) {
    Pointer strides = managed.getPointer(STRIDES);
    if (strides == null) {
      return true;
    }
    int ndim = managed.getInt(NDIM);
    long expected = 1;
    for (int i = ndim - 1; i >= 0; i--) {
      if (shape[i] != 1 && strides.getLong(8L * i) != expected) {
        return false;
      }
      expected *= shape[i];
    }
    return true;
  }
}
