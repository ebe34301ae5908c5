package org.deepx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class LeakTest {
  /**
   * A stress loop of every kind of handle, failing calls included; afterwards the binding's count
   * of open handles and, in-process, the CPU device's live allocations and bytes are back where
   * they started.
   */
  @Test
  void noLeakInStressLoop() {
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      Op add = rt.op("dx.add");
      MemoryStats before = Fixture.REMOTE ? null : rt.deviceStats(dev);
      long handles = Deepx.liveHandles();
      float[] data = new float[1000];
      for (int i = 0; i < 3000; i++) {
        Tensor x = rt.tensor(dev, data, 10, 100);
        try (Tensor y = rt.tensor(dev, DType.F32, 10, 100);
            Tensor v = x.view(new long[] {100, 10}, new long[] {1, 100}, 0);
            Attrs a = Attrs.create().setBool("unused", true)) {
          rt.invoke(add, new Tensor[] {x, x}, new Tensor[] {y}, null);
          assertThrows(DeepxException.class,
              () -> rt.invoke(add, new Tensor[] {x, v}, new Tensor[] {y}, null));
          assertThrows(DeepxException.class, () -> rt.op("example.no_such_op"));
          x.close();
          x.close();
          assertThrows(DeepxException.class, x::readFloats);
          assertTrue(!a.isClosed() && !v.isClosed());
        }
      }
      assertEquals(handles, Deepx.liveHandles(), "open handles before and after the loop");
      if (!Fixture.REMOTE) {
        MemoryStats after = rt.deviceStats(dev);
        assertEquals(before.liveAllocations(), after.liveAllocations(), after.toString());
        assertEquals(before.inUseBytes(), after.inUseBytes(), after.toString());
        assertTrue(after.peakInUseBytes() > 0);
      }
    }
  }

  /** The Cleaner is a safety net: a tensor dropped unclosed is reported and released. */
  @Test
  void cleanerReportsLeak() throws Exception {
    BlockingQueue<String> reports = new LinkedBlockingQueue<>();
    Deepx.setLeakListener(reports::add);
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      long handles = Deepx.liveHandles();
      dropTensor(rt, dev);
      String report = null;
      for (int i = 0; i < 200 && report == null; i++) {
        System.gc();
        report = reports.poll(50, TimeUnit.MILLISECONDS);
      }
      assertNotNull(report, "no leak report within 10 s of dropping a tensor");
      assertTrue(report.contains("Tensor(f64 [7, 3]) was never closed"), report);
      assertEquals(handles, Deepx.liveHandles(), "open handles after the Cleaner ran");
    } finally {
      Deepx.setLeakListener(null);
    }
  }

  private static void dropTensor(Runtime rt, int dev) {
    rt.tensor(dev, DType.F64, 7, 3); // never closed
  }
}
