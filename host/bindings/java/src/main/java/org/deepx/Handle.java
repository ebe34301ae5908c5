package org.deepx;

import com.sun.jna.Pointer;
import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import java.util.function.LongFunction;

/**
 * What {@link Runtime}, {@link Tensor} and {@link Attrs} share: the native handle, the guard
 * that makes {@link #close} wait for calls in flight, and a {@link Cleaner} registration that is
 * only a safety net: a handle the garbage collector finds unclosed is reported as a leak and then
 * destroyed.
 */
abstract class Handle implements AutoCloseable {
  static final Cleaner CLEANER = Cleaner.create();
  static final AtomicLong LIVE = new AtomicLong();
  private static final System.Logger LOG = System.getLogger("org.deepx");
  static volatile Consumer<String> leakListener;

  /** Runs once: at close, or when the owner became unreachable unclosed. Holds no owner. */
  private static final class State implements Runnable {
    final long handle;
    final Guard guard = new Guard();
    final String description;
    final LongFunction<Pointer> destroy;
    volatile boolean explicit;
    Pointer error;

    State(long handle, String description, LongFunction<Pointer> destroy) {
      this.handle = handle;
      this.description = description;
      this.destroy = destroy;
    }

    @Override
    public void run() {
      LIVE.decrementAndGet();
      if (explicit) {
        error = destroy.apply(handle);
        return;
      }
      guard.close();
      reportLeak("deepx: a " + description + " was never closed; the garbage collector released it");
      DeepxLib.dx_error_destroy(destroy.apply(handle));
    }
  }

  private final State state;
  private final Cleaner.Cleanable cleanable;
  private final String kind;

  Handle(long handle, String kind, String description, LongFunction<Pointer> destroy) {
    this.kind = kind;
    this.state = new State(handle, description, destroy);
    LIVE.incrementAndGet();
    this.cleanable = CLEANER.register(this, state);
  }

  static void reportLeak(String message) {
    Consumer<String> listener = leakListener;
    if (listener != null) {
      listener.accept(message);
    } else {
      LOG.log(System.Logger.Level.WARNING, message);
    }
  }

  /** Starts a call on the handle and returns it; throws FAILED_PRECONDITION when closed. */
  final long enter(String call) {
    if (!state.guard.acquire()) {
      throw DeepxException.closed(call, kind);
    }
    return state.handle;
  }

  /** Starts a call on the handle as one of several; false when closed. */
  final boolean tryEnter() {
    return state.guard.acquire();
  }

  final void leave() {
    state.guard.release();
  }

  /** The raw handle, for a call that already entered. */
  final long raw() {
    return state.handle;
  }

  /** Whether {@link #close} was called (or the handle was reclaimed). */
  public final boolean isClosed() {
    return state.guard.isClosed();
  }

  /**
   * Destroys the handle after the calls in flight on it return. Closing twice is a no-op.
   *
   * @throws DeepxException when the host refuses the destroy (it does not for a handle that this
   *     binding made and has not closed)
   */
  @Override
  public void close() {
    if (!state.guard.close()) {
      return;
    }
    state.explicit = true;
    cleanable.clean();
    Pointer error = state.error;
    state.error = null;
    DeepxLib.check(kind + ".close", error);
  }
}
