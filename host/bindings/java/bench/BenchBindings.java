import java.util.Arrays;
import java.util.Locale;
import org.deepx.DType;
import org.deepx.Op;
import org.deepx.Runtime;
import org.deepx.Tensor;

/**
 * The Java side of the bindings benchmark (issue 17, item 7; host/bindings/bench/run_bench.py runs
 * it beside the C, Python and Go programs): the calls of host/bindings/bench/bench_c.c made
 * through org.deepx as a Java program would make them, on tensors made once.
 *
 * <pre>
 * java -cp deepx-java.jar:deepx-java-bench.jar:jna.jar BenchBindings \
 *     PLUGIN TINY_MS ADD_CALLS ADD_ELEMS
 * </pre>
 *
 * Prints "tiny_ns x" (rt.invoke of dx.add on 1-element f32 tensors, the median of 5 batches of
 * about TINY_MS/5 ms, after a warm-up of at least 500 ms for the JIT) and "add_ms x" (rt.invoke
 * of dx.add on ADD_ELEMS f32 elements, the median of ADD_CALLS calls after a warm-up).
 */
public final class BenchBindings {
  private static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    return s[s.length / 2];
  }

  private static Tensor ones(Runtime rt, int dev, int n) {
    float[] data = new float[n];
    Arrays.fill(data, 1f);
    return rt.tensor(dev, data, n);
  }

  private static void loop(Runtime rt, Op add, Tensor a, Tensor b, Tensor y, long calls) {
    for (long i = 0; i < calls; i++) {
      rt.invoke(add, new Tensor[] {a, b}, new Tensor[] {y}, null);
    }
  }

  public static void main(String[] args) {
    if (args.length != 4) {
      System.err.println("usage: BenchBindings PLUGIN TINY_MS ADD_CALLS ADD_ELEMS");
      System.exit(2);
    }
    double tinyMs = Double.parseDouble(args[1]);
    int addCalls = Math.max(1, Integer.parseInt(args[2]));
    int addElems = Integer.parseInt(args[3]);
    try (Runtime rt = Runtime.create()) {
      rt.loadPlugin(args[0]);
      int dev = rt.findDevice("cpu");
      Op add = rt.op("dx.add");

      try (Tensor a = ones(rt, dev, 1);
          Tensor b = ones(rt, dev, 1);
          Tensor y = rt.tensor(dev, DType.F32, 1)) {
        // Warm-up until the JIT has compiled the path: at least 200k calls and 500 ms (on a
        // loaded machine the compiler threads wait for a core), then a batch of about TINY_MS/10
        // calibrated as the C program does.
        long warm = System.nanoTime();
        do {
          loop(rt, add, a, b, y, 200_000);
        } while (System.nanoTime() - warm < 500_000_000L);
        long batch = 1000;
        for (; ; ) {
          long t0 = System.nanoTime();
          loop(rt, add, a, b, y, batch);
          if ((System.nanoTime() - t0) / 1e6 >= tinyMs / 10 || batch > (1L << 28)) {
            break;
          }
          batch *= 2;
        }
        double[] tiny = new double[5];
        for (int r = 0; r < tiny.length; r++) {
          long t0 = System.nanoTime();
          loop(rt, add, a, b, y, batch);
          tiny[r] = (double) (System.nanoTime() - t0) / batch;
        }
        if (y.readFloats()[0] != 2f) {
          throw new AssertionError("1 + 1 gave " + y.readFloats()[0]);
        }
        System.out.printf(Locale.ROOT, "tiny_ns %.2f%n", median(tiny));
      }

      try (Tensor a = ones(rt, dev, addElems);
          Tensor b = ones(rt, dev, addElems);
          Tensor y = rt.tensor(dev, DType.F32, addElems)) {
        rt.invoke(add, new Tensor[] {a, b}, new Tensor[] {y}, null);
        double[] big = new double[addCalls];
        for (int r = 0; r < addCalls; r++) {
          long t0 = System.nanoTime();
          rt.invoke(add, new Tensor[] {a, b}, new Tensor[] {y}, null);
          big[r] = (System.nanoTime() - t0) / 1e6;
        }
        System.out.printf(Locale.ROOT, "add_ms %.4f%n", median(big));
      }
    }
  }
}
