package org.deepx;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

class ErrorsTest {
  /** Runs body, which must throw a DeepxException of the given status, and returns it. */
  static DeepxException expect(Status status, Executable body) {
    DeepxException e = assertThrows(DeepxException.class, body);
    assertEquals(status, e.status(), e.getMessage());
    assertEquals(status.code(), e.code());
    assertFalse(e.detail().isEmpty());
    assertTrue(e.getMessage().contains(status.name()), e.getMessage());
    return e;
  }

  @Test
  void statusOfUnknownCode() {
    DeepxException e = new DeepxException(1000, "X.y", "newer");
    assertEquals(Status.UNKNOWN, e.status());
    assertEquals(1000, e.code());
    assertEquals("X.y: UNKNOWN(1000): newer", e.getMessage());
  }

  @Test
  void unknownOp() {
    try (Runtime rt = Fixture.runtime()) {
      DeepxException e = expect(Status.NOT_FOUND, () -> rt.op("example.no_such_op"));
      assertEquals("Runtime.op", e.call());
      int dev = rt.findDevice("cpu");
      try (Tensor x = rt.tensor(dev, DType.F32, 2)) {
        Tensor[] xs = {x};
        expect(Status.NOT_FOUND, () -> rt.invoke("example.no_such_op", xs, xs, null));
        expect(Status.NOT_FOUND, () -> rt.invoke(new Op(1 << 30, "bogus"), xs, xs, null));
      }
      expect(Status.NOT_FOUND, () -> rt.findDevice("no-such-device"));
      // Strings cross as UTF-8 both ways, whatever the JVM's default charset.
      DeepxException u = expect(Status.NOT_FOUND, () -> rt.findDevice("gerät-ü"));
      assertTrue(u.detail().contains("'gerät-ü'"), u.detail());
    }
  }

  @Test
  void wrongDTypeAndShape() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      Op add = rt.op("dx.add");
      try (Tensor a = rt.tensor(dev, DType.F32, 2, 3);
          Tensor b64 = rt.tensor(dev, DType.F64, 2, 3);
          Tensor b32 = rt.tensor(dev, DType.F32, 3, 2);
          Tensor out = rt.tensor(dev, DType.F32, 2, 3);
          Attrs bogus = Attrs.create().setString("bogus", "x")) {
        Tensor[] outs = {out};
        // Mixed dtypes reach kernel matching, which lists the kernels there are.
        DeepxException e =
            expect(Status.UNSUPPORTED, () -> rt.invoke(add, new Tensor[] {a, b64}, outs, null));
        assertTrue(e.detail().contains("(f32, f32) -> (f32)"), e.detail());
        expect(Status.SHAPE_MISMATCH, () -> rt.invoke(add, new Tensor[] {a, b32}, outs, null));
        expect(Status.INVALID_ARGUMENT, () -> rt.invoke(add, new Tensor[] {a}, outs, null));
        expect(Status.INVALID_ARGUMENT, () -> rt.invoke(add, new Tensor[] {a, a}, outs, bogus));
        // The binding's own checks of Java arrays, before any native call.
        expect(Status.INVALID_ARGUMENT, () -> a.write(new double[6]));
        expect(Status.INVALID_ARGUMENT, () -> a.write(new float[5]));
        expect(Status.INVALID_ARGUMENT, a::readLongs);
        // The host's checks of byte counts.
        expect(Status.INVALID_ARGUMENT, () -> a.write(java.nio.ByteBuffer.allocateDirect(8)));
        expect(Status.INVALID_ARGUMENT, () -> a.read(java.nio.ByteBuffer.allocateDirect(100)));
        expect(Status.INVALID_ARGUMENT, () -> rt.tensor(dev, DType.F32, -1));
        expect(Status.OUT_OF_RANGE, () -> rt.tensor(1000, DType.F32, 2));
        expect(Status.OUT_OF_RANGE, () -> a.view(new long[] {4, 3}, null, 0));
      }
    }
  }

  @Test
  void loadPluginErrors() {
    try (Runtime rt = Fixture.runtime()) {
      if (Fixture.REMOTE) {
        expect(Status.UNSUPPORTED, () -> rt.loadPlugin(Fixture.CPU_PLUGIN));
        expect(Status.UNSUPPORTED, () -> rt.deviceStats(0));
        return;
      }
      expect(Status.ALREADY_EXISTS, () -> rt.loadPlugin(Fixture.CPU_PLUGIN));
      expect(Status.NOT_FOUND, () -> rt.loadPlugin("/nonexistent/libdeepx-plugin-none.so"));
    }
  }

  @Test
  void connectRefusals() {
    DeepxException e = assertThrows(
        DeepxException.class, () -> Runtime.connect("unix:/nonexistent/deepxd.sock"));
    if (!Fixture.REMOTE && e.status() == Status.UNSUPPORTED) {
      // In-process runs also go where the host library has no remote client yet; the refusal
      // must say so.
      System.out.println("this host library has no remote client: " + e.getMessage());
      return;
    }
    assertEquals(Status.UNAVAILABLE, e.status(), e.getMessage());
    expect(Status.UNSUPPORTED, () -> Runtime.connect("tcp:127.0.0.1:1"));
    expect(Status.INVALID_ARGUMENT, () -> Runtime.connect(""));
  }

  @Test
  void useAfterClose() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      Tensor x = rt.tensor(dev, new float[] {1, 2}, 2);
      try (Tensor y = rt.tensor(dev, DType.F32, 2)) {
        x.close();
        assertTrue(x.isClosed());
        assertDoesNotThrow(x::close, "close is idempotent");
        expect(Status.FAILED_PRECONDITION, x::readFloats);
        expect(Status.FAILED_PRECONDITION, () -> x.write(new float[2]));
        expect(Status.FAILED_PRECONDITION, () -> x.view(new long[] {2}, null, 0));
        expect(Status.FAILED_PRECONDITION, x::buffer);
        DeepxException e = expect(Status.FAILED_PRECONDITION,
            () -> rt.invoke("dx.add", new Tensor[] {y, x}, new Tensor[] {y}, null));
        assertTrue(e.detail().contains("input tensor 1"), e.detail());
        expect(Status.FAILED_PRECONDITION, () -> rt.copy(y, x));
        assertArrayEquals(new long[] {2}, x.shape(), "the shape stays readable");

        Attrs attrs = Attrs.create();
        attrs.close();
        attrs.close();
        expect(Status.FAILED_PRECONDITION, () -> attrs.setInt("n", 1));
        expect(Status.FAILED_PRECONDITION,
            () -> rt.invoke("dx.add", new Tensor[] {y, y}, new Tensor[] {y}, attrs));
      }
    }
  }

  /**
   * host.h: dx_runtime_destroy() invalidates the runtime handle at once; its tensors stay fully
   * usable, and the plugins shut down when the last of them is destroyed.
   */
  @Test
  void runtimeClosedWhileTensorsLive() {
    Runtime rt = Fixture.runtime();
    int dev = rt.findDevice("cpu");
    Op add = rt.op("dx.add");
    try (Tensor x = rt.tensor(dev, new float[] {1, 2, 3}, 3);
        Tensor y = rt.tensor(dev, DType.F32, 3)) {
      rt.close();
      rt.close();
      expect(Status.FAILED_PRECONDITION, () -> rt.tensor(dev, DType.F32, 3));
      expect(Status.FAILED_PRECONDITION,
          () -> rt.invoke(add, new Tensor[] {x, x}, new Tensor[] {y}, null));
      expect(Status.FAILED_PRECONDITION, rt::ops);
      expect(Status.FAILED_PRECONDITION, rt::plugins);
      y.write(new float[] {7, 8, 9});
      assertArrayEquals(new float[] {1, 2, 3}, x.readFloats());
      try (Tensor v = y.view(new long[] {1}, null, 2)) {
        assertArrayEquals(new float[] {9}, v.readFloats());
      }
    }
  }

  /**
   * A daemon that dies while calls are in flight: each call completes or fails with UNAVAILABLE,
   * later calls fail with it at once, and closing the handles still succeeds. Remote mode only
   * (it starts a daemon of its own, so that the suite's stays up).
   */
  @Test
  void daemonDiesMidCall() throws Exception {
    if (!Fixture.REMOTE) {
      return; // in-process there is no daemon to lose; the remote run covers this
    }
    Fixture.runtime().close(); // skips (by assumption) where the remote run cannot happen
    Fixture.Daemon d = Fixture.startDaemon();
    try {
      Runtime rt = Runtime.connect(d.address);
      int dev = rt.findDevice("cpu");
      final int n = 512;
      Tensor a = rt.tensor(dev, new float[n * n], n, n);
      Tensor y = rt.tensor(dev, DType.F32, n, n);
      Op mm = rt.op("dx.matmul");
      java.util.concurrent.ExecutorService pool =
          java.util.concurrent.Executors.newFixedThreadPool(4);
      java.util.List<java.util.concurrent.Future<?>> calls = new java.util.ArrayList<>();
      for (int i = 0; i < 4; i++) {
        calls.add(pool.submit(() -> {
          for (int j = 0; j < 50; j++) {
            rt.invoke(mm, new Tensor[] {a, a}, new Tensor[] {y}, null);
          }
          return null;
        }));
      }
      Thread.sleep(50);
      d.kill();
      for (java.util.concurrent.Future<?> call : calls) {
        try {
          call.get(60, java.util.concurrent.TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
          DeepxException de = (DeepxException) e.getCause();
          assertEquals(Status.UNAVAILABLE, de.status(), de.getMessage());
        }
      }
      pool.shutdown();
      expect(Status.UNAVAILABLE, a::readFloats);
      expect(Status.UNAVAILABLE, () -> rt.invoke(mm, new Tensor[] {a, a}, new Tensor[] {y}, null));
      a.close();
      y.close();
      rt.close();
    } finally {
      d.stop();
    }
  }
}
