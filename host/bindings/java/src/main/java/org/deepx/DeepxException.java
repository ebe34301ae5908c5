package org.deepx;

/**
 * A failed deepx call: the {@link Status} of deepx/status.h, the numeric code as the host
 * reported it (kept even when this binding does not know it), the binding method that failed and
 * the message ({@code dx_error_message()}, or the binding's own for a failure caught before any
 * native call, such as a closed handle).
 */
public class DeepxException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int code;
  private final String call;
  private final String detail;

  public DeepxException(int code, String call, String message) {
    super(call + ": " + Status.of(code).label(code) + ": " + message);
    this.code = code;
    this.call = call;
    this.detail = message;
  }

  DeepxException(Status status, String call, String message) {
    this(status.code(), call, message);
  }

  /** The status; {@link Status#UNKNOWN} for a code newer than this binding. */
  public Status status() {
    return Status.of(code);
  }

  /** The numeric status code as the host reported it. */
  public int code() {
    return code;
  }

  /** The binding method that failed, e.g. {@code Runtime.invoke}. */
  public String call() {
    return call;
  }

  /** The message alone, without the method and status. */
  public String detail() {
    return detail;
  }

  static DeepxException closed(String call, String what) {
    return new DeepxException(Status.FAILED_PRECONDITION, call, "the " + what + " is closed");
  }
}
