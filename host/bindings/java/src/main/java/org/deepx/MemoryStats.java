package org.deepx;

/** A device's allocation statistics (dx_memory_stats_t). */
public record MemoryStats(
    long inUseBytes,
    long peakInUseBytes,
    long reservedBytes,
    long peakReservedBytes,
    long liveAllocations) {}
