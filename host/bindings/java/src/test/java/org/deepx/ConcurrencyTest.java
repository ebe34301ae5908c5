package org.deepx;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

class ConcurrencyTest {
  /**
   * Many threads on one runtime: adders make their own tensors and check Java's sum while sharing
   * one input; summers share one attribute list that another thread keeps setting.
   */
  @Test
  void manyThreads() throws Exception {
    final int n = 64;
    final int adders = 12;
    final int summers = 4;
    final int iterations = 40;
    try (Runtime rt = Fixture.runtime()) {
      int dev = rt.findDevice("cpu");
      float[] shared = new float[n];
      for (int i = 0; i < n; i++) {
        shared[i] = i;
      }
      Op add = rt.op("dx.add");
      Op sum = rt.op("dx.sum");
      ExecutorService pool = Executors.newFixedThreadPool(adders + summers + 1);
      try (Tensor sa = rt.tensor(dev, shared, n);
          Tensor rows = rt.tensor(dev, new double[] {1, 2, 3, 4}, 2, 2);
          Attrs attrs = Attrs.create().setInts("axes", 1)) {
        List<Future<?>> jobs = new ArrayList<>();
        for (int w = 0; w < adders; w++) {
          final int worker = w;
          jobs.add(pool.submit(() -> {
            float[] mine = new float[n];
            for (int it = 0; it < iterations; it++) {
              java.util.Arrays.fill(mine, worker * 1000 + it);
              try (Tensor x = rt.tensor(dev, mine, n);
                  Tensor y = rt.tensor(dev, DType.F32, n)) {
                rt.invoke(add, new Tensor[] {sa, x}, new Tensor[] {y}, null);
                float[] got = y.readFloats();
                for (int i = 0; i < n; i++) {
                  assertEquals(shared[i] + mine[i], got[i], "adder " + worker);
                }
              }
              if (it % 10 == 0) {
                rt.ops();
                rt.devices();
              }
            }
            return null;
          }));
        }
        for (int w = 0; w < summers; w++) {
          jobs.add(pool.submit(() -> {
            try (Tensor y = rt.tensor(dev, DType.F64, 2)) {
              for (int it = 0; it < iterations; it++) {
                rt.invoke(sum, new Tensor[] {rows}, new Tensor[] {y}, attrs);
                assertArrayEquals(new double[] {3, 7}, y.readDoubles());
              }
            }
            return null;
          }));
        }
        AtomicBoolean stop = new AtomicBoolean();
        Future<?> setter = pool.submit(() -> {
          while (!stop.get()) {
            attrs.setInts("axes", 1).setBool("keepdims", false);
          }
          return null;
        });
        for (Future<?> job : jobs) {
          job.get(120, TimeUnit.SECONDS); // rethrows a worker's assertion
        }
        stop.set(true);
        setter.get(10, TimeUnit.SECONDS);
      } finally {
        pool.shutdownNow();
      }
    }
  }

  /**
   * close racing with calls on the same tensor and runtime: each call completes or is refused
   * with FAILED_PRECONDITION, nothing crashes (close waits for the calls in flight). Each worker
   * calls until it is refused once, so the race is exercised however fast the machine.
   */
  @Test
  void closeRacesWithUse() throws Exception {
    final int workers = 12;
    Runtime rt = Fixture.runtime();
    int dev = rt.findDevice("cpu");
    Tensor x = rt.tensor(dev, new float[1024], 1024);
    Op add = rt.op("dx.add");
    AtomicInteger ok = new AtomicInteger();
    AtomicInteger refused = new AtomicInteger();
    ConcurrentLinkedQueue<Throwable> bad = new ConcurrentLinkedQueue<>();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    List<Thread> threads = new ArrayList<>();
    for (int g = 0; g < workers; g++) {
      final int kind = g % 2;
      Thread t = new Thread(() -> {
        while (System.nanoTime() < deadline) {
          try {
            if (kind == 0) {
              x.readFloats();
            } else {
              try (Tensor y = rt.tensor(dev, DType.F32, 1024)) {
                rt.invoke(add, new Tensor[] {x, x}, new Tensor[] {y}, null);
              }
            }
            ok.incrementAndGet();
          } catch (DeepxException e) {
            if (e.status() == Status.FAILED_PRECONDITION) {
              refused.incrementAndGet();
              return;
            }
            bad.add(e);
          } catch (Throwable e) {
            bad.add(e);
            return;
          }
        }
      });
      t.start();
      threads.add(t);
    }
    while (ok.get() < 100 && System.nanoTime() < deadline) { // the workers are in full swing
      Thread.sleep(1);
    }
    x.close();
    rt.close();
    for (Thread t : threads) {
      t.join(60_000);
    }
    assertTrue(bad.isEmpty(), () -> "unexpected: " + bad.peek());
    assertTrue(refused.get() == workers && ok.get() >= 100,
        ok.get() + " completed, " + refused.get() + " refused: every worker must be refused once");
  }
}
