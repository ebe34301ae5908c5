import java.util.Arrays;
import org.deepx.DType;
import org.deepx.DeepxException;
import org.deepx.Runtime;
import org.deepx.Tensor;

/** Runs dx.add on deepx's CPU plugin from Java and prints the sum. */
public final class Add {
  public static void main(String[] args) {
    try (Runtime rt = Runtime.create()) { // remote: Runtime.connect("unix:/run/deepx/deepxd.sock")
      rt.loadPlugin("cpu");
      int dev = rt.findDevice("cpu");
      try (Tensor a = rt.tensor(dev, new float[] {1, 2, 3}, 3);
          Tensor sum = rt.tensor(dev, DType.F32, 3)) {
        rt.invoke("dx.add", new Tensor[] {a, a}, new Tensor[] {sum}, null);
        System.out.println("a + a = " + Arrays.toString(sum.readFloats())); // [2.0, 4.0, 6.0]
      }
    } catch (DeepxException e) { // e.status(), e.code(), e.call(), e.detail()
      System.err.println(e.getMessage()); // "Runtime.loadPlugin: NOT_FOUND: plugin 'cpu' ..."
      System.exit(1);
    }
  }
}
