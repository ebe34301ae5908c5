package org.deepx;

/** A loaded plugin, as dx_plugin_info_t describes it. Strings are copies. */
public record Plugin(
    int index,
    String name,
    String vendor,
    String version,
    String buildId,
    String path,
    int abiVersion,
    long capabilities,
    int numKernels,
    int numMemorySpaces,
    int numTransports,
    int certification,
    String certificate,
    String certificationNote) {}
