/**
 * @file deepx/version.h
 * @brief ABI version macros of the deepx C ABI.
 *
 * The ABI is versioned MAJOR.MINOR. A minor release only appends struct fields, table slots and
 * enum values, so any minor loads on any host of the same major, in both directions. A major
 * release may change layouts; a host refuses a plugin of another major with a message naming both
 * versions. docs/versioning.md is the full policy: what 1.0 promises and how each later minor is
 * recorded.
 *
 * Threading: macros only; nothing here is called.
 * @since 1.0
 */
#ifndef DEEPX_VERSION_H_
#define DEEPX_VERSION_H_

/** Major version of the ABI these headers describe. Bumped only for layout-breaking changes.
    @since 1.0 */
#define DX_ABI_VERSION_MAJOR 1
/** Minor version of the ABI these headers describe. Bumped for every append-only addition.
    @since 1.0 */
#define DX_ABI_VERSION_MINOR 1

/** Packs a major and a minor version into one 32-bit value (major in the high 16 bits).
    @since 1.0 */
#define DX_MAKE_VERSION(major, minor) ((((unsigned)(major)) << 16) | ((unsigned)(minor) & 0xFFFFu))
/** Extracts the major version from a packed version made by DX_MAKE_VERSION(). @since 1.0 */
#define DX_VERSION_MAJOR(v) (((unsigned)(v)) >> 16)
/** Extracts the minor version from a packed version made by DX_MAKE_VERSION(). @since 1.0 */
#define DX_VERSION_MINOR(v) (((unsigned)(v)) & 0xFFFFu)

/** The packed ABI version these headers describe. @since 1.0 */
#define DX_ABI_VERSION DX_MAKE_VERSION(DX_ABI_VERSION_MAJOR, DX_ABI_VERSION_MINOR)
/** DX_ABI_VERSION as one plain integer, for binding generators that cannot evaluate macros
    (cgo, a Java generator): 0x00010000 is 1.0, 0x00010001 is 1.1. @since 1.0 */
#define DX_ABI_VERSION_PACKED 0x00010001

#endif /* DEEPX_VERSION_H_ */
