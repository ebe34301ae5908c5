package org.deepx;

/**
 * The status codes of deepx/status.h, with their values. The table is pinned to the host
 * library's own ({@code dx_status_string()}) by the tests.
 */
public enum Status {
  OK(0),
  INVALID_ARGUMENT(1),
  OUT_OF_RANGE(2),
  NOT_FOUND(3),
  ALREADY_EXISTS(4),
  UNSUPPORTED(5),
  OUT_OF_MEMORY(6),
  VERSION_MISMATCH(7),
  FAILED_PRECONDITION(8),
  SHAPE_MISMATCH(9),
  DEVICE_ERROR(10),
  IO_ERROR(11),
  TIMEOUT(12),
  PLUGIN_ERROR(13),
  INTERNAL(14),
  ARITHMETIC_ERROR(15),
  PERMISSION_DENIED(16),
  UNKNOWN(17),
  CANCELLED(18),
  UNAVAILABLE(19),
  RESOURCE_EXHAUSTED(20),
  DATA_LOSS(21);

  private static final Status[] BY_CODE = values();
  private final int code;

  Status(int code) {
    this.code = code;
  }

  /** The code's value in C. */
  public int code() {
    return code;
  }

  /** The status of a code; {@link #UNKNOWN} for a code this binding does not know. */
  public static Status of(int code) {
    return code >= 0 && code < BY_CODE.length ? BY_CODE[code] : UNKNOWN;
  }

  /** The name, with the number for a code this binding does not know: "UNKNOWN(25)". */
  String label(int rawCode) {
    return this == UNKNOWN && rawCode != UNKNOWN.code ? "UNKNOWN(" + rawCode + ")" : name();
  }
}
