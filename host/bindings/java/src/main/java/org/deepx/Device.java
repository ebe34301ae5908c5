package org.deepx;

/** A device (memory space), as dx_device_info_t describes it. */
public record Device(
    int index,
    String name,
    int deviceType,
    int deviceId,
    int kind,
    int pluginIndex,
    long capacity,
    long alignment) {}
