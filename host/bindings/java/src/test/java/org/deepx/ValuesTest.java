package org.deepx;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Random;
import org.junit.jupiter.api.Test;

class ValuesTest {
  @Test
  void addF32() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      Random rng = new Random(1);
      float[] a = new float[15];
      float[] b = new float[15];
      for (int i = 0; i < a.length; i++) {
        a[i] = rng.nextFloat() * 10 - 5;
        b[i] = rng.nextFloat() * 10 - 5;
      }
      Op add = rt.op("dx.add");
      try (Tensor ta = rt.tensor(dev, a, 3, 5);
          Tensor tb = rt.tensor(dev, b, 3, 5);
          Tensor out = rt.tensor(dev, DType.F32, 3, 5)) {
        rt.invoke(add, new Tensor[] {ta, tb}, new Tensor[] {out}, null);
        float[] got = out.readFloats();
        for (int i = 0; i < a.length; i++) {
          assertEquals(a[i] + b[i], got[i], 0.0f, "element " + i);
        }
        assertArrayEquals(new long[] {3, 5}, out.shape());
        assertEquals(15, out.numel());
        assertEquals(60, out.byteSize());
      }
    }
  }

  @Test
  void addI64ByName() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      long[] a = {1, -2, 3, 1L << 40};
      long[] b = {10, 20, -30, 5};
      try (Tensor ta = rt.tensor(dev, a, 4);
          Tensor tb = rt.tensor(dev, b, 4);
          Tensor out = rt.tensor(dev, DType.I64, 4)) {
        rt.invoke("dx.add", new Tensor[] {ta, tb}, new Tensor[] {out}, null);
        assertArrayEquals(new long[] {11, 18, -27, (1L << 40) + 5}, out.readLongs());
      }
    }
  }

  static double[] matmul(double[] a, double[] b, int m, int k, int n) {
    double[] y = new double[m * n];
    for (int i = 0; i < m; i++) {
      for (int j = 0; j < n; j++) {
        double s = 0;
        for (int p = 0; p < k; p++) {
          s += a[i * k + p] * b[p * n + j];
        }
        y[i * n + j] = s;
      }
    }
    return y;
  }

  @Test
  void matmulF64AndF32TransposeB() {
    final int m = 7;
    final int k = 13;
    final int n = 5;
    Random rng = new Random(2);
    double[] a = new double[m * k];
    double[] b = new double[k * n];
    for (int i = 0; i < a.length; i++) {
      a[i] = rng.nextDouble() * 2 - 1;
    }
    for (int i = 0; i < b.length; i++) {
      b[i] = rng.nextDouble() * 2 - 1;
    }
    double[] want = matmul(a, b, m, k, n);
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      try (Tensor ta = rt.tensor(dev, a, m, k);
          Tensor tb = rt.tensor(dev, b, k, n);
          Tensor ty = rt.tensor(dev, DType.F64, m, n)) {
        rt.invoke("dx.matmul", new Tensor[] {ta, tb}, new Tensor[] {ty}, null);
        assertArrayEquals(want, ty.readDoubles(), 1e-12);
      }
      // f32 with b given transposed (n x k) and the transpose_b attribute.
      float[] a32 = new float[m * k];
      float[] bt32 = new float[n * k];
      double[] aRounded = new double[m * k];
      double[] bRounded = new double[k * n];
      for (int i = 0; i < a.length; i++) {
        a32[i] = (float) a[i];
        aRounded[i] = a32[i];
      }
      for (int p = 0; p < k; p++) {
        for (int j = 0; j < n; j++) {
          bt32[j * k + p] = (float) b[p * n + j];
          bRounded[p * n + j] = bt32[j * k + p];
        }
      }
      double[] want32 = matmul(aRounded, bRounded, m, k, n);
      try (Tensor xa = rt.tensor(dev, a32, m, k);
          Tensor xb = rt.tensor(dev, bt32, n, k);
          Tensor xy = rt.tensor(dev, DType.F32, m, n);
          Attrs attrs = Attrs.create().setBool("transpose_b", true)) {
        rt.invoke(rt.op("dx.matmul"), new Tensor[] {xa, xb}, new Tensor[] {xy}, attrs);
        float[] got = xy.readFloats();
        for (int i = 0; i < want32.length; i++) {
          assertEquals(want32[i], got[i], 1e-5, "element " + i);
        }
      }
    }
  }

  @Test
  void sumWithAxes() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      try (Tensor x = rt.tensor(dev, new double[] {1, 2, 3, 4, 5, 6}, 2, 3);
          Tensor y = rt.tensor(dev, DType.F64, 2);
          Attrs attrs = Attrs.create().setInts("axes", 1)) {
        rt.invoke("dx.sum", new Tensor[] {x}, new Tensor[] {y}, attrs);
        assertArrayEquals(new double[] {6, 15}, y.readDoubles());
      }
    }
  }

  @Test
  void viewCopyAndBuffers() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      try (Tensor x = rt.tensor(dev, new float[] {1, 2, 3, 4, 5, 6}, 2, 3);
          Tensor v = x.view(new long[] {3, 2}, new long[] {1, 3}, 0);
          Tensor dst = rt.tensor(dev, DType.F32, 3, 2)) {
        float[] transposed = {1, 4, 2, 5, 3, 6};
        assertArrayEquals(transposed, v.readFloats());
        rt.copy(dst, v);
        assertArrayEquals(transposed, dst.readFloats());
        // A direct buffer goes to the host as is; its position is honoured and not moved.
        ByteBuffer direct = ByteBuffer.allocateDirect(4 + 24).order(ByteOrder.nativeOrder());
        direct.position(4);
        direct.slice().order(ByteOrder.nativeOrder()).asFloatBuffer()
            .put(new float[] {10, 20, 30, 40, 50, 60});
        x.write(direct);
        assertEquals(4, direct.position());
        assertArrayEquals(new float[] {10, 40, 20, 50, 30, 60}, v.readFloats());
        ByteBuffer back = ByteBuffer.allocateDirect(24).order(ByteOrder.nativeOrder());
        dst.read(back);
        assertEquals(4.0f, back.getFloat(4));
        // A heap buffer works too (through a copy).
        ByteBuffer heap = ByteBuffer.allocate(24).order(ByteOrder.nativeOrder());
        x.read(heap);
        assertEquals(60.0f, heap.getFloat(20));
        assertThrows(DeepxException.class, () -> x.read(heap.asReadOnlyBuffer()));
      }
    }
  }

  /**
   * In-process, buffer() is the tensor's memory: a write through it is what the op reads, and
   * the op's output appears in the output's buffer. Remote tensors live in the daemon, so the
   * same data is checked by value through read() and write() instead.
   */
  @Test
  @SuppressWarnings("try") // y is closed early on purpose: the buffer outlives it
  void zeroCopyBuffer() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      try (Tensor a = rt.tensor(dev, DType.F32, 4);
          Tensor y = rt.tensor(dev, DType.F32, 4)) {
        float[] values = {1.5f, -2, 3, 8};
        if (Fixture.REMOTE) {
          DeepxException e = assertThrows(DeepxException.class, a::buffer);
          assertEquals(Status.UNSUPPORTED, e.status());
          a.write(values);
        } else {
          FloatBuffer in = a.buffer().asFloatBuffer();
          in.put(values);
          assertArrayEquals(values, a.readFloats(), "a write through buffer() is the tensor's");
        }
        rt.invoke("dx.add", new Tensor[] {a, a}, new Tensor[] {y}, null);
        float[] doubled = {3, -4, 6, 16};
        if (Fixture.REMOTE) {
          assertArrayEquals(doubled, y.readFloats());
          return;
        }
        ByteBuffer out = y.buffer();
        FloatBuffer view = out.asFloatBuffer();
        for (int i = 0; i < 4; i++) {
          assertEquals(doubled[i], view.get(i), "the op's output seen through buffer()");
        }
        // The buffer keeps the storage alive after the tensor is closed.
        y.close();
        assertEquals(16.0f, out.asFloatBuffer().get(3));
        // A strided view cannot be mapped.
        try (Tensor t = a.view(new long[] {2}, new long[] {2}, 0)) {
          assertEquals(Status.UNSUPPORTED, assertThrows(DeepxException.class, t::buffer).status());
        }
      }
    }
  }

  @Test
  void listing() {
    try (Runtime rt = Fixture.runtime()) {
      assertEquals(Deepx.BINDING_ABI_VERSION >>> 16, Deepx.abiVersion() >>> 16, "ABI major");
      Plugin cpu = rt.plugins().stream().filter(p -> p.name().equals("cpu")).findFirst()
          .orElseThrow();
      assertTrue(cpu.numKernels() > 0 && cpu.numMemorySpaces() > 0, cpu.toString());
      int dev = rt.findDevice("cpu");
      Device d = rt.devices().get(dev);
      assertEquals("cpu", d.name());
      assertEquals(1, d.deviceType());
      // The wire protocol's PluginInfo and DeviceInfo carry no ABI version, path or alignment: a
      // remote runtime reports 0 and "" for them.
      if (!Fixture.REMOTE) {
        assertEquals(1, cpu.abiVersion() >>> 16);
        assertTrue(!cpu.path().isEmpty());
        assertTrue(d.alignment() > 0);
      }
      for (String name : new String[] {"dx.add", "dx.matmul", "dx.sum"}) {
        Op op = rt.op(name);
        assertEquals(name, rt.ops().get(op.id()).name());
      }
      assertEquals(Fixture.REMOTE, rt.isRemote());
    }
  }

  /** The binding's tables agree with the host library's. */
  @Test
  void statusAndDTypeTablesMatchTheHost() {
    for (Status s : Status.values()) {
      assertEquals(s.name(), DeepxLib.dx_status_string(s.code()), "status " + s.code());
    }
    assertEquals("UNKNOWN", DeepxLib.dx_status_string(Status.values().length));
    for (DType d : DType.values()) {
      assertEquals(d.name().toLowerCase(java.util.Locale.ROOT), d.shortName());
    }
    assertEquals(4, DType.F32.size());
    assertEquals(2, DType.BF16.size());
    assertEquals(1, DType.BOOL.size());
  }
}
