package org.deepx;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Counts the calls in flight on one handle and lets close wait for them: host.h forbids
 * destroying a handle while another thread uses it, and this is how the binding keeps that rule
 * for Java threads. Acquiring is one compare-and-set; one call may acquire twice (the same tensor
 * as input and output).
 */
final class Guard {
  private static final long CLOSED = 1L << 62;
  private final AtomicLong state = new AtomicLong(); // calls in flight, plus CLOSED once closing
  private volatile CountDownLatch drained;

  /** Registers a call in flight; false when the handle is closed or closing. */
  boolean acquire() {
    for (; ; ) {
      long s = state.get();
      if ((s & CLOSED) != 0) {
        return false;
      }
      if (state.compareAndSet(s, s + 1)) {
        return true;
      }
    }
  }

  void release() {
    if (state.decrementAndGet() == CLOSED) {
      drained.countDown(); // the last call in flight of a closing handle
    }
  }

  /**
   * Marks the handle closed (later acquires fail) and waits for the calls in flight; false when
   * it was closed already.
   */
  synchronized boolean close() {
    if ((state.get() & CLOSED) != 0) {
      return false;
    }
    drained = new CountDownLatch(1);
    long before = state.getAndAdd(CLOSED);
    if (before != 0) {
      boolean interrupted = false;
      for (; ; ) {
        try {
          drained.await();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
    return true;
  }

  boolean isClosed() {
    return (state.get() & CLOSED) != 0;
  }
}
