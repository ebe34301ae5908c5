package org.deepx;

/** The dtypes deepx knows, with their packed {@code dx_dtype_t} values (DX_DTYPE_*). */
public enum DType {
  F64(0x00014002),
  F32(0x00012002),
  F16(0x00011002),
  BF16(0x00011004),
  I64(0x00014000),
  I32(0x00012000),
  I16(0x00011000),
  I8(0x00010800),
  U8(0x00010801),
  BOOL(0x00010806);

  private final int packed;

  DType(int packed) {
    this.packed = packed;
  }

  /** The packed value: code | bits &lt;&lt; 8 | lanes &lt;&lt; 16. */
  public int packed() {
    return packed;
  }

  /** Bytes per element. */
  public int size() {
    return ((packed >>> 8) & 0xff) * (packed >>> 16) / 8;
  }

  /** The host's short name ("f32"). */
  public String shortName() {
    return DeepxLib.dx_dtype_string(packed);
  }

  static DType of(int packed) {
    for (DType d : values()) {
      if (d.packed == packed) {
        return d;
      }
    }
    throw new DeepxException(Status.INVALID_ARGUMENT, "DType.of", "unknown dtype " + packed);
  }
}
