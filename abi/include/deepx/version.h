/**
 * @file deepx/version.h
 * @brief ABI version macros of the deepx C ABI.
 *
 * The ABI is versioned MAJOR.MINOR. A minor release only appends struct fields, table slots and
 * enum values, so any minor loads on any host of the same major, in both directions. A major
 * release may change layouts; a host refuses a plugin of another major with a message naming both
 * versions. See abi/README.md ("Versioning") for the full policy.
 *
 * Threading: macros only; nothing here is called.
 */
#ifndef DEEPX_VERSION_H_
#define DEEPX_VERSION_H_

/** Major version of the ABI these headers describe. Bumped only for layout-breaking changes. */
#define DX_ABI_VERSION_MAJOR 1
/** Minor version of the ABI these headers describe. Bumped for every append-only addition. */
#define DX_ABI_VERSION_MINOR 0

/** Packs a major and a minor version into one 32-bit value (major in the high 16 bits). */
#define DX_MAKE_VERSION(major, minor) ((((unsigned)(major)) << 16) | ((unsigned)(minor) & 0xFFFFu))
/** Extracts the major version from a packed version made by DX_MAKE_VERSION(). */
#define DX_VERSION_MAJOR(v) (((unsigned)(v)) >> 16)
/** Extracts the minor version from a packed version made by DX_MAKE_VERSION(). */
#define DX_VERSION_MINOR(v) (((unsigned)(v)) & 0xFFFFu)

/** The packed ABI version these headers describe. */
#define DX_ABI_VERSION DX_MAKE_VERSION(DX_ABI_VERSION_MAJOR, DX_ABI_VERSION_MINOR)

#endif /* DEEPX_VERSION_H_ */
