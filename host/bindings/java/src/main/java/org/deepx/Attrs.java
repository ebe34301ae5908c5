package org.deepx;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A reusable list of named, typed op attributes (dx_attrs_t), passed to {@link Runtime#invoke}.
 *
 * <p>Setters take the list exclusively and invoke takes it shared, so one list may be passed by
 * many threads while another changes it (host.h forbids a set concurrent with other uses; the
 * binding serialises them). Setters return this list, to chain.
 */
public final class Attrs extends Handle {
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();

  private Attrs(long handle) {
    super(handle, "attribute list", "Attrs", DeepxLib::dx_attrs_destroy);
  }

  /** An empty attribute list (dx_attrs_create()). */
  public static Attrs create() {
    long[] out = new long[1];
    DeepxLib.check("Attrs.create", DeepxLib.dx_attrs_create(out));
    return new Attrs(out[0]);
  }

  private interface Setter {
    com.sun.jna.Pointer set(long handle);
  }

  private Attrs set(String call, Setter setter) {
    long h = enter(call);
    lock.writeLock().lock();
    try {
      DeepxLib.check(call, setter.set(h));
      return this;
    } finally {
      lock.writeLock().unlock();
      leave();
    }
  }

  long enterShared(String call) {
    long h = enter(call);
    lock.readLock().lock();
    return h;
  }

  void leaveShared() {
    lock.readLock().unlock();
    leave();
  }

  public Attrs setInt(String name, long value) {
    return set("Attrs.setInt", h -> DeepxLib.dx_attrs_set_i64(h, name, value));
  }

  public Attrs setFloat(String name, double value) {
    return set("Attrs.setFloat", h -> DeepxLib.dx_attrs_set_f64(h, name, value));
  }

  public Attrs setBool(String name, boolean value) {
    return set("Attrs.setBool", h -> DeepxLib.dx_attrs_set_bool(h, name, value ? 1 : 0));
  }

  public Attrs setString(String name, String value) {
    byte[] bytes = value.getBytes(StandardCharsets.UTF_8);
    return set(
        "Attrs.setString", h -> DeepxLib.dx_attrs_set_string(h, name, bytes, bytes.length));
  }

  public Attrs setInts(String name, long... values) {
    return set(
        "Attrs.setInts", h -> DeepxLib.dx_attrs_set_i64_array(h, name, values, values.length));
  }

  public Attrs setFloats(String name, double... values) {
    return set(
        "Attrs.setFloats", h -> DeepxLib.dx_attrs_set_f64_array(h, name, values, values.length));
  }
}
