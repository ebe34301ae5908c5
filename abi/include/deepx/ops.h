/**
 * @file deepx/ops.h
 * @brief The standard op set (`dx.*`): names, arities and attribute schemas. What each op
 * computes is defined in docs/ops.md.
 *
 * For a standard op the host passes attributes to kernels in schema order, so a kernel reads
 * `call->attrs[DX_REDUCE_AXES]` instead of searching by name; a slot the caller left unset has
 * type ::DX_ATTR_NONE. Vendor ops (`vendor.name`) have no schema here: their kernels receive
 * attributes in the caller's order and find them with dx_call_find_attr().
 *
 * The table is append-only within a major version: ops are never removed or renumbered, and an
 * op's attribute slots are only ever appended.
 *
 * Threading: declarations only.
 * @since 1.0
 */
#ifndef DEEPX_OPS_H_
#define DEEPX_OPS_H_

/* The op table and the slot enums are generated from abi/ops.json, the one table of the standard
 * ops (names, arities, attribute slots, dtype and shape rules): edit the JSON, then build the
 * target ops-table-update. */
/* BEGIN GENERATED OP TABLE (cmake/gen_ops.py from abi/ops.json; do not edit) */
/**
 * @brief X(ID, "name", inputs, outputs, "attr,attr,...") for every standard op.
 *
 * `inputs` is the number of inputs (-1: variadic, at least one), counting optional inputs
 * (an optional input may be passed as a null tensor). `outputs` likewise.
 * @since 1.0
 */
#define DX_OP_TABLE(X)                                                       \
  /* elementwise unary */                                                    \
  X(ABS, "dx.abs", 1, 1, "")                                                 \
  X(NEG, "dx.neg", 1, 1, "")                                                 \
  X(SIGN, "dx.sign", 1, 1, "")                                               \
  X(RECIPROCAL, "dx.reciprocal", 1, 1, "")                                   \
  X(SQRT, "dx.sqrt", 1, 1, "")                                               \
  X(RSQRT, "dx.rsqrt", 1, 1, "")                                             \
  X(EXP, "dx.exp", 1, 1, "")                                                 \
  X(EXPM1, "dx.expm1", 1, 1, "")                                             \
  X(LOG, "dx.log", 1, 1, "")                                                 \
  X(LOG1P, "dx.log1p", 1, 1, "")                                             \
  X(SIN, "dx.sin", 1, 1, "")                                                 \
  X(COS, "dx.cos", 1, 1, "")                                                 \
  X(TAN, "dx.tan", 1, 1, "")                                                 \
  X(TANH, "dx.tanh", 1, 1, "")                                               \
  X(ERF, "dx.erf", 1, 1, "")                                                 \
  X(SIGMOID, "dx.sigmoid", 1, 1, "")                                         \
  X(RELU, "dx.relu", 1, 1, "")                                               \
  X(SILU, "dx.silu", 1, 1, "")                                               \
  X(GELU, "dx.gelu", 1, 1, "approximate")                                    \
  X(FLOOR, "dx.floor", 1, 1, "")                                             \
  X(CEIL, "dx.ceil", 1, 1, "")                                               \
  X(ROUND, "dx.round", 1, 1, "")                                             \
  X(CLAMP, "dx.clamp", 1, 1, "min,max")                                      \
  X(CAST, "dx.cast", 1, 1, "dtype")                                          \
  X(LOGICAL_NOT, "dx.logical_not", 1, 1, "")                                 \
  X(BITWISE_NOT, "dx.bitwise_not", 1, 1, "")                                 \
  /* elementwise binary and ternary */                                       \
  X(ADD, "dx.add", 2, 1, "")                                                 \
  X(SUB, "dx.sub", 2, 1, "")                                                 \
  X(MUL, "dx.mul", 2, 1, "")                                                 \
  X(DIV, "dx.div", 2, 1, "")                                                 \
  X(POW, "dx.pow", 2, 1, "")                                                 \
  X(MAXIMUM, "dx.maximum", 2, 1, "")                                         \
  X(MINIMUM, "dx.minimum", 2, 1, "")                                         \
  X(EQ, "dx.eq", 2, 1, "")                                                   \
  X(NE, "dx.ne", 2, 1, "")                                                   \
  X(LT, "dx.lt", 2, 1, "")                                                   \
  X(LE, "dx.le", 2, 1, "")                                                   \
  X(GT, "dx.gt", 2, 1, "")                                                   \
  X(GE, "dx.ge", 2, 1, "")                                                   \
  X(LOGICAL_AND, "dx.logical_and", 2, 1, "")                                 \
  X(LOGICAL_OR, "dx.logical_or", 2, 1, "")                                   \
  X(LOGICAL_XOR, "dx.logical_xor", 2, 1, "")                                 \
  X(WHERE, "dx.where", 3, 1, "")                                             \
  /* reductions */                                                           \
  X(SUM, "dx.sum", 1, 1, "axes,keepdims")                                    \
  X(MEAN, "dx.mean", 1, 1, "axes,keepdims")                                  \
  X(PROD, "dx.prod", 1, 1, "axes,keepdims")                                  \
  X(MAX, "dx.max", 1, 1, "axes,keepdims")                                    \
  X(MIN, "dx.min", 1, 1, "axes,keepdims")                                    \
  X(ARGMAX, "dx.argmax", 1, 1, "axis,keepdims")                              \
  X(ARGMIN, "dx.argmin", 1, 1, "axis,keepdims")                              \
  /* linear algebra and neural-network ops */                                \
  X(MATMUL, "dx.matmul", 2, 1, "transpose_a,transpose_b")                    \
  X(LINEAR, "dx.linear", 3, 1, "")                                           \
  X(SOFTMAX, "dx.softmax", 1, 1, "axis")                                     \
  X(LOG_SOFTMAX, "dx.log_softmax", 1, 1, "axis")                             \
  X(LAYER_NORM, "dx.layer_norm", 3, 3, "axis,eps")                           \
  X(RMS_NORM, "dx.rms_norm", 2, 1, "axis,eps")                               \
  X(BATCH_NORM, "dx.batch_norm", 5, 1, "training,momentum,eps")              \
  X(EMBEDDING, "dx.embedding", 2, 1, "")                                     \
  X(CROSS_ENTROPY, "dx.cross_entropy", 2, 1, "reduction,ignore_index")       \
  X(CONV2D, "dx.conv2d", 3, 1, "stride,padding,dilation,groups")             \
  X(MAX_POOL2D, "dx.max_pool2d", 1, 1, "kernel,stride,padding")              \
  X(AVG_POOL2D, "dx.avg_pool2d", 1, 1, "kernel,stride,padding")              \
  X(SCALED_DOT_PRODUCT_ATTENTION, "dx.scaled_dot_product_attention", 4, 1,   \
    "causal,scale")                                                          \
  /* shape and data movement */                                              \
  X(RESHAPE, "dx.reshape", 1, 1, "")                                         \
  X(TRANSPOSE, "dx.transpose", 1, 1, "perm")                                 \
  X(BROADCAST_TO, "dx.broadcast_to", 1, 1, "shape")                          \
  X(CONCAT, "dx.concat", -1, 1, "axis")                                      \
  X(SPLIT, "dx.split", 1, -1, "axis,sizes")                                  \
  X(SLICE, "dx.slice", 1, 1, "starts,stops,steps")                           \
  X(INDEX_SELECT, "dx.index_select", 2, 1, "axis")                           \
  X(GATHER, "dx.gather", 2, 1, "axis")                                       \
  X(SCATTER_ADD, "dx.scatter_add", 3, 1, "axis")                             \
  X(PAD, "dx.pad", 1, 1, "pads,value")                                       \
  X(TILE, "dx.tile", 1, 1, "repeats")                                        \
  X(COPY, "dx.copy", 1, 1, "")                                               \
  /* creation and random */                                                  \
  X(FILL, "dx.fill", 0, 1, "value")                                          \
  X(ARANGE, "dx.arange", 0, 1, "start,step")                                 \
  X(UNIFORM, "dx.uniform", 0, 1, "low,high,seed,offset")                     \
  X(NORMAL, "dx.normal", 0, 1, "mean,std,seed,offset")                       \
  X(DROPOUT, "dx.dropout", 1, 2, "p,seed,offset,training")

/** @brief Schema slots of dx.sum, dx.mean, dx.prod, dx.max and dx.min. @since 1.0 */
enum { DX_REDUCE_AXES = 0, /**< i64 array; empty or unset = all axes. */
       DX_REDUCE_KEEPDIMS = 1 /**< bool; unset = false. */ };
/** @brief Schema slots of dx.argmax and dx.argmin. @since 1.0 */
enum { DX_ARGREDUCE_AXIS = 0, /**< i64; unset = over the flattened tensor. */
       DX_ARGREDUCE_KEEPDIMS = 1 /**< bool; unset = false. */ };
/** @brief Schema slots of dx.matmul. @since 1.0 */
enum { DX_MATMUL_TRANSPOSE_A = 0, /**< bool; unset = false. */
       DX_MATMUL_TRANSPOSE_B = 1 /**< bool; unset = false. */ };
/** @brief Schema slot of dx.softmax and dx.log_softmax. @since 1.0 */
enum { DX_SOFTMAX_AXIS = 0 /**< i64, negative counts from the end; unset = -1. */ };
/** @brief Schema slot of dx.transpose. @since 1.0 */
enum { DX_TRANSPOSE_PERM = 0 /**< i64 array; unset = reverse the axes. */ };
/** @brief Schema slot of dx.fill. @since 1.0 */
enum { DX_FILL_VALUE = 0 /**< f64 (or i64 for exact integers); unset = 0. */ };
/** @brief Schema slots of dx.clamp. @since 1.0 */
enum { DX_CLAMP_MIN = 0, /**< f64 or i64; unset = no lower bound. */
       DX_CLAMP_MAX = 1 /**< f64 or i64; unset = no upper bound. */ };
/* END GENERATED OP TABLE */

#endif /* DEEPX_OPS_H_ */
