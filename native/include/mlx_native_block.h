/* mlx_native_block.h: the one decoder of the dispatch block (layout in
 * mlx_native.h, above mlxn_encoder_dispatch), shared by every backend: the
 * emulator and cuda include it from C++, the metal backend imports it through
 * its C target CMlxNative. Header-only C99 that also compiles as C++.
 *
 *   mlxn_block blk;
 *   if (mlxn_block_decode(block, block_len, &blk) != MLXN_BLOCK_OK) {
 *     char text[MLXN_BLOCK_MESSAGE_CAP];
 *     mlxn_block_message(&blk, kernel_name_or_NULL, text, sizeof text);
 *     ...refuse with MLXN_ERR_INVALID_ARGUMENT and text
 *   }
 *
 * mlxn_block_decode checks everything the block alone decides: its length, the
 * binding count, the reserved field, zero sizes, threads per grid past 32 bits
 * on an axis, each record's kind and index, indices bound twice, inline data
 * outside the payload. What needs the backend's own objects (a live pipeline
 * or buffer of this device, a buffer's length, the device's limits) the
 * backend checks after it, and refuses through mlxn_block_fail, so that the
 * words of every refusal are written once, in mlxn_block_message.
 *
 * Success writes nothing but the decoded fields (no message is formatted):
 * decoding is one pass over the records. */
#ifndef MLX_NATIVE_BLOCK_H
#define MLX_NATIVE_BLOCK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mlx_native.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mlx_native_block.h reads the block's little-endian fields as host integers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* At most one record per [[buffer(i)]] index and one per [[threadgroup(i)]]
 * index: 2 * MLXN_MAX_BINDINGS. */
#define MLXN_BLOCK_MAX_RECORDS 62u
/* Enough for every message of mlxn_block_message. */
#define MLXN_BLOCK_MESSAGE_CAP 512u

/* Why a block is refused (mlxn_block.error). The block's own faults: */
#define MLXN_BLOCK_OK                   0
#define MLXN_BLOCK_E_NULL               1  /* block is NULL */
#define MLXN_BLOCK_E_SHORT              2  /* actual: block_len */
#define MLXN_BLOCK_E_COUNT              3  /* actual: n */
#define MLXN_BLOCK_E_LENGTH             4  /* actual: block_len, limit: 48 + 24 n + p */
#define MLXN_BLOCK_E_RESERVED           5  /* actual: the reserved field */
#define MLXN_BLOCK_E_GRID_ZERO          6  /* the grid is in the struct */
#define MLXN_BLOCK_E_THREADS_ZERO       7
#define MLXN_BLOCK_E_GRID_THREADS       8  /* at: axis, actual: grid * threads on it */
#define MLXN_BLOCK_E_KIND               9  /* at: record, actual: kind */
#define MLXN_BLOCK_E_INDEX              10 /* at: record */
#define MLXN_BLOCK_E_DUPLICATE          11 /* at: record, limit: the earlier record */
#define MLXN_BLOCK_E_PAYLOAD_RANGE      12 /* at: record */
#define MLXN_BLOCK_E_THREADGROUP_B      13 /* at: record, actual: b */
/* Found by the backend, refused through mlxn_block_fail: */
#define MLXN_BLOCK_E_PIPELINE           14 /* actual: the handle */
#define MLXN_BLOCK_E_BUFFER             15 /* at: record, actual: the handle */
#define MLXN_BLOCK_E_BUFFER_OFFSET      16 /* at: record, limit: the buffer's length */
#define MLXN_BLOCK_E_GRID_LIMIT         17 /* at: axis, limit: the device's maximum */
#define MLXN_BLOCK_E_THREADS_LIMIT      18 /* at: axis, limit: the device's maximum */
#define MLXN_BLOCK_E_THREADGROUP_SIZE   19 /* actual: threads per threadgroup, limit: the pipeline's maximum */
#define MLXN_BLOCK_E_THREADGROUP_MEMORY 20 /* actual: bytes bound, extra: static bytes, limit: per threadgroup */
#define MLXN_BLOCK_E_TENSOR_MAP_BACKEND 21 /* at: record (a backend without tensor maps) */
#define MLXN_BLOCK_E_TENSOR_MAP         22 /* at: record, extra: MLXN_TMAP_E_* | entry << 8, actual, limit */

/* What a tensor map's descriptor breaks (mlxn_tmap_check), in error_extra's low byte. */
#define MLXN_TMAP_E_DTYPE     1  /* actual: dtype */
#define MLXN_TMAP_E_RANK      2  /* actual: rank */
#define MLXN_TMAP_E_DIM       3  /* entry k: actual dims[k] */
#define MLXN_TMAP_E_STRIDE    4  /* entry k: actual strides[k] */
#define MLXN_TMAP_E_BOX       5  /* entry k: actual box[k] */
#define MLXN_TMAP_E_BOX_BYTES 6  /* actual: box[0], limit: element bytes */
#define MLXN_TMAP_E_SWIZZLE   7  /* actual: swizzle */
#define MLXN_TMAP_E_SPAN      8  /* actual: box[0] bytes, limit: swizzle */
#define MLXN_TMAP_E_L2        9  /* actual: l2 promotion */
#define MLXN_TMAP_E_UNUSED    10 /* entry: byte offset in the descriptor, actual: its value */
#define MLXN_TMAP_E_ALIGN     11 /* actual: address of element 0 */
#define MLXN_TMAP_E_EXTENT    12 /* actual: end of the last element (bytes from the buffer's start), limit: buffer length */

/* One binding record, decoded. */
typedef struct mlxn_block_binding {
  uint32_t kind;        /* MLXN_BIND_* */
  uint32_t index;       /* [[buffer(index)]], or [[threadgroup(index)]] */
  uint64_t handle;      /* BUFFER, TENSOR_MAP: the buffer handle; else 0 */
  uint64_t offset;      /* BUFFER: byte offset into the buffer; BYTES, TENSOR_MAP: into the payload; else 0 */
  uint64_t length;      /* BYTES: the data's length; TENSOR_MAP: MLXN_TMAP_DESC_BYTES; THREADGROUP_MEMORY: the
                           length asked for; else 0 */
  const uint8_t* data;  /* BYTES: the data; TENSOR_MAP: the descriptor; inside the block; else NULL */
} mlxn_block_binding;

/* One dispatch block, decoded. The fields are valid up to what was decoded
 * when the decoder refused the block. */
typedef struct mlxn_block {
  uint64_t pipeline;           /* the pipeline handle */
  uint32_t grid[3];            /* threadgroups per grid */
  uint32_t threads[3];         /* threads per threadgroup */
  uint32_t binding_count;      /* n */
  uint32_t payload_bytes;      /* p */
  uint64_t block_len;
  uint32_t buffer_mask;        /* bit i: [[buffer(i)]] bound (BUFFER, BYTES or TENSOR_MAP) */
  uint32_t threadgroup_mask;   /* bit i: [[threadgroup(i)]] given a length */
  /* THREADGROUP_MEMORY lengths summed, each rounded up to 16 bytes as Metal
   * reserves them; saturates at UINT64_MAX. */
  uint64_t threadgroup_bytes;
  /* The refusal: MLXN_BLOCK_OK or MLXN_BLOCK_E_*, and what it concerns. */
  int32_t error;
  uint32_t error_at;           /* the record, or the axis (0 x, 1 y, 2 z) */
  uint64_t error_actual;
  uint64_t error_limit;
  uint64_t error_extra;
  mlxn_block_binding bindings[MLXN_BLOCK_MAX_RECORDS];
} mlxn_block;

static inline uint32_t mlxn_block_u32_(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline uint64_t mlxn_block_u64_(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Records a refusal in blk and returns its code. */
static inline int32_t mlxn_block_fail(mlxn_block* blk, int32_t error, uint32_t at, uint64_t actual,
                                      uint64_t limit, uint64_t extra) {
  blk->error = error;
  blk->error_at = at;
  blk->error_actual = actual;
  blk->error_limit = limit;
  blk->error_extra = extra;
  return error;
}

/* Binding i of a decoded block (for callers that cannot index a C array, Swift). */
static inline const mlxn_block_binding* mlxn_block_binding_at(const mlxn_block* blk, uint32_t i) {
  return &blk->bindings[i];
}

/* Decodes and checks block (block_len bytes) into blk; returns MLXN_BLOCK_OK
 * or the refusal, which blk->error holds too. */
static inline int32_t mlxn_block_decode(const void* block, uint64_t block_len, mlxn_block* blk) {
  const uint8_t* p = (const uint8_t*)block;
  const uint8_t* rec;
  const uint8_t* data;
  uint32_t n, payload, i, g0, g1, g2, t0, t1, t2;
  uint64_t want, reserved, tg = 0, per_axis[3];
  uint32_t buffers = 0, threadgroups = 0;
  blk->error = MLXN_BLOCK_OK;
  blk->pipeline = 0;
  blk->block_len = block_len;
  blk->binding_count = 0;
  blk->payload_bytes = 0;
  if (p == NULL) return mlxn_block_fail(blk, MLXN_BLOCK_E_NULL, 0, 0, 0, 0);
  if (block_len < MLXN_DISPATCH_HEADER_BYTES) return mlxn_block_fail(blk, MLXN_BLOCK_E_SHORT, 0, block_len, 0, 0);
  blk->pipeline = mlxn_block_u64_(p + MLXN_BLOCK_PIPELINE);
  blk->grid[0] = g0 = mlxn_block_u32_(p + MLXN_BLOCK_GRID);
  blk->grid[1] = g1 = mlxn_block_u32_(p + MLXN_BLOCK_GRID + 4);
  blk->grid[2] = g2 = mlxn_block_u32_(p + MLXN_BLOCK_GRID + 8);
  blk->threads[0] = t0 = mlxn_block_u32_(p + MLXN_BLOCK_THREADS);
  blk->threads[1] = t1 = mlxn_block_u32_(p + MLXN_BLOCK_THREADS + 4);
  blk->threads[2] = t2 = mlxn_block_u32_(p + MLXN_BLOCK_THREADS + 8);
  blk->binding_count = n = mlxn_block_u32_(p + MLXN_BLOCK_BINDING_COUNT);
  blk->payload_bytes = payload = mlxn_block_u32_(p + MLXN_BLOCK_PAYLOAD_BYTES);
  if (n > MLXN_BLOCK_MAX_RECORDS) return mlxn_block_fail(blk, MLXN_BLOCK_E_COUNT, 0, n, 0, 0);
  /* n and p are 32-bit: the sum cannot overflow 64 bits. */
  want = MLXN_DISPATCH_HEADER_BYTES + (uint64_t)MLXN_DISPATCH_BINDING_BYTES * n + payload;
  if (block_len != want) return mlxn_block_fail(blk, MLXN_BLOCK_E_LENGTH, 0, block_len, want, 0);
  reserved = mlxn_block_u64_(p + MLXN_BLOCK_RESERVED);
  if (reserved != 0) return mlxn_block_fail(blk, MLXN_BLOCK_E_RESERVED, 0, reserved, 0, 0);
  /* Bitwise |, not ||: one test on the common path. */
  if ((g0 == 0) | (g1 == 0) | (g2 == 0)) return mlxn_block_fail(blk, MLXN_BLOCK_E_GRID_ZERO, 0, 0, 0, 0);
  if ((t0 == 0) | (t1 == 0) | (t2 == 0)) return mlxn_block_fail(blk, MLXN_BLOCK_E_THREADS_ZERO, 0, 0, 0, 0);
  /* thread_position_in_grid is a uint3 (Metal), blockIdx * blockDim an
   * unsigned int (CUDA): the threads per grid on each axis must fit in 32 bits. */
  per_axis[0] = (uint64_t)g0 * t0;
  per_axis[1] = (uint64_t)g1 * t1;
  per_axis[2] = (uint64_t)g2 * t2;
  if ((per_axis[0] | per_axis[1] | per_axis[2]) > UINT32_MAX) {
    const uint32_t d = per_axis[0] > UINT32_MAX ? 0 : per_axis[1] > UINT32_MAX ? 1 : 2;
    return mlxn_block_fail(blk, MLXN_BLOCK_E_GRID_THREADS, d, per_axis[d], UINT32_MAX, 0);
  }
  rec = p + MLXN_DISPATCH_HEADER_BYTES;
  data = rec + (uint64_t)MLXN_DISPATCH_BINDING_BYTES * n;
  for (i = 0; i < n; ++i, rec += MLXN_DISPATCH_BINDING_BYTES) {
    mlxn_block_binding* b = &blk->bindings[i];
    const uint32_t kind = mlxn_block_u32_(rec + MLXN_RECORD_KIND);
    const uint32_t index = mlxn_block_u32_(rec + MLXN_RECORD_INDEX);
    const uint64_t a = mlxn_block_u64_(rec + MLXN_RECORD_A);
    const uint64_t bb = mlxn_block_u64_(rec + MLXN_RECORD_B);
    uint32_t bit;
    b->kind = kind;
    b->index = index;
    if (kind - 1u > MLXN_BIND_TENSOR_MAP - 1u) return mlxn_block_fail(blk, MLXN_BLOCK_E_KIND, i, kind, 0, 0);
    if (index >= MLXN_MAX_BINDINGS) return mlxn_block_fail(blk, MLXN_BLOCK_E_INDEX, i, index, 0, 0);
    bit = 1u << index;
    if (kind == MLXN_BIND_BUFFER) {
      b->handle = a;
      b->offset = bb;
      b->length = 0;
      b->data = NULL;
      if (buffers & bit) return mlxn_block_fail(blk, MLXN_BLOCK_E_DUPLICATE, i, index, 0, 0);
      buffers |= bit;
    } else if (kind == MLXN_BIND_BYTES) {
      b->handle = 0;
      b->offset = a;
      b->length = bb;
      b->data = NULL;
      if (buffers & bit) return mlxn_block_fail(blk, MLXN_BLOCK_E_DUPLICATE, i, index, 0, 0);
      buffers |= bit;
      if (a > payload || bb > payload - a) return mlxn_block_fail(blk, MLXN_BLOCK_E_PAYLOAD_RANGE, i, 0, 0, 0);
      b->data = data + a;
    } else if (kind == MLXN_BIND_TENSOR_MAP) {
      b->handle = a;
      b->offset = bb;
      b->length = MLXN_TMAP_DESC_BYTES;
      b->data = NULL;
      if (buffers & bit) return mlxn_block_fail(blk, MLXN_BLOCK_E_DUPLICATE, i, index, 0, 0);
      buffers |= bit;
      if (bb > payload || MLXN_TMAP_DESC_BYTES > payload - bb)
        return mlxn_block_fail(blk, MLXN_BLOCK_E_PAYLOAD_RANGE, i, 0, 0, 0);
      b->data = data + bb;
    } else {
      b->handle = 0;
      b->offset = 0;
      b->length = a;
      b->data = NULL;
      if (threadgroups & bit) return mlxn_block_fail(blk, MLXN_BLOCK_E_DUPLICATE, i, index, 0, 0);
      threadgroups |= bit;
      if (bb != 0) return mlxn_block_fail(blk, MLXN_BLOCK_E_THREADGROUP_B, i, bb, 0, 0);
      /* Rounded up to 16 and summed, saturating rather than wrapping. */
      if (a > UINT64_MAX - 15 || tg > UINT64_MAX - ((a + 15) & ~(uint64_t)15))
        tg = UINT64_MAX;
      else
        tg += (a + 15) & ~(uint64_t)15;
    }
  }
  blk->buffer_mask = buffers;
  blk->threadgroup_mask = threadgroups;
  blk->threadgroup_bytes = tg;
  return MLXN_BLOCK_OK;
}

/* Bytes of an element of a tensor map's dtype; 0 for an unknown dtype. */
static inline uint32_t mlxn_tmap_element_bytes(uint32_t dtype) {
  switch (dtype) {
    case MLXN_TMAP_DTYPE_U8: return 1;
    case MLXN_TMAP_DTYPE_U16: case MLXN_TMAP_DTYPE_F16: case MLXN_TMAP_DTYPE_BF16: return 2;
    case MLXN_TMAP_DTYPE_U32: case MLXN_TMAP_DTYPE_F32: return 4;
    default: return 0;
  }
}

/* A tensor map's descriptor (mlx_native.h, MLXN_BIND_TENSOR_MAP), decoded. */
typedef struct mlxn_tmap {
  uint64_t offset;
  uint32_t dtype, rank, element_bytes, swizzle, l2;
  uint64_t dims[MLXN_TMAP_MAX_RANK];
  uint64_t strides[MLXN_TMAP_MAX_RANK - 1];
  uint32_t box[MLXN_TMAP_MAX_RANK];
} mlxn_tmap;

/* Decodes and checks record `record`'s descriptor (blk->bindings[record],
 * a TENSOR_MAP binding of a decoded block) against its buffer: its length
 * and the device address of its first byte (`base`, for the alignment
 * rule). Every rule of the descriptor, in O(rank): the bytes the dims and
 * strides reach lie inside the buffer. Returns MLXN_BLOCK_OK, or the refusal
 * (MLXN_BLOCK_E_TENSOR_MAP, recorded in blk). */
static inline int32_t mlxn_tmap_check(mlxn_block* blk, uint32_t record, uint64_t buffer_len, uint64_t base, mlxn_tmap* t) {
  const uint8_t* d = blk->bindings[record].data;
  uint32_t k;
  uint64_t end, reach;
#define MLXN_TMAP_FAIL_(code, entry, actual, limit) \
  return mlxn_block_fail(blk, MLXN_BLOCK_E_TENSOR_MAP, record, (actual), (limit), (uint64_t)(code) | ((uint64_t)(entry) << 8))
  t->offset = mlxn_block_u64_(d + MLXN_TMAP_OFFSET);
  t->dtype = mlxn_block_u32_(d + MLXN_TMAP_DTYPE);
  t->rank = mlxn_block_u32_(d + MLXN_TMAP_RANK);
  t->swizzle = mlxn_block_u32_(d + MLXN_TMAP_SWIZZLE);
  t->l2 = mlxn_block_u32_(d + MLXN_TMAP_L2);
  t->element_bytes = mlxn_tmap_element_bytes(t->dtype);
  if (t->element_bytes == 0) MLXN_TMAP_FAIL_(MLXN_TMAP_E_DTYPE, 0, t->dtype, 0);
  if (t->rank - 1u >= MLXN_TMAP_MAX_RANK) MLXN_TMAP_FAIL_(MLXN_TMAP_E_RANK, 0, t->rank, 0);
  for (k = 0; k < MLXN_TMAP_MAX_RANK; ++k) {
    const uint64_t dim = mlxn_block_u64_(d + MLXN_TMAP_DIMS + 8 * k);
    const uint32_t box = mlxn_block_u32_(d + MLXN_TMAP_BOX + 4 * k);
    t->dims[k] = dim;
    t->box[k] = box;
    if (k >= t->rank) {
      if (dim != 0) MLXN_TMAP_FAIL_(MLXN_TMAP_E_UNUSED, MLXN_TMAP_DIMS + 8 * k, dim, 0);
      if (box != 0) MLXN_TMAP_FAIL_(MLXN_TMAP_E_UNUSED, MLXN_TMAP_BOX + 4 * k, box, 0);
      continue;
    }
    if (dim - 1u >= ((uint64_t)1 << 32)) MLXN_TMAP_FAIL_(MLXN_TMAP_E_DIM, k, dim, 0);
    if (box - 1u >= 256u) MLXN_TMAP_FAIL_(MLXN_TMAP_E_BOX, k, box, 0);
  }
  for (k = 0; k + 1 < MLXN_TMAP_MAX_RANK; ++k) {
    const uint64_t stride = mlxn_block_u64_(d + MLXN_TMAP_STRIDES + 8 * k);
    t->strides[k] = stride;
    if (k + 1 >= t->rank) {
      if (stride != 0) MLXN_TMAP_FAIL_(MLXN_TMAP_E_UNUSED, MLXN_TMAP_STRIDES + 8 * k, stride, 0);
    } else if (stride % 16 != 0 || stride >= ((uint64_t)1 << 40)) {
      MLXN_TMAP_FAIL_(MLXN_TMAP_E_STRIDE, k, stride, 0);
    }
  }
  for (k = 0; k < 12; k += 4) {
    const uint32_t r = mlxn_block_u32_(d + MLXN_TMAP_RESERVED + k);
    if (r != 0) MLXN_TMAP_FAIL_(MLXN_TMAP_E_UNUSED, MLXN_TMAP_RESERVED + k, r, 0);
  }
  if (((uint64_t)t->box[0] * t->element_bytes) % 16 != 0)
    MLXN_TMAP_FAIL_(MLXN_TMAP_E_BOX_BYTES, 0, t->box[0], t->element_bytes);
  if (t->swizzle != 0 && t->swizzle != 32 && t->swizzle != 64 && t->swizzle != 128)
    MLXN_TMAP_FAIL_(MLXN_TMAP_E_SWIZZLE, 0, t->swizzle, 0);
  if (t->swizzle != 0 && (uint64_t)t->box[0] * t->element_bytes > t->swizzle)
    MLXN_TMAP_FAIL_(MLXN_TMAP_E_SPAN, 0, (uint64_t)t->box[0] * t->element_bytes, t->swizzle);
  if (t->l2 != 0 && t->l2 != 64 && t->l2 != 128 && t->l2 != 256) MLXN_TMAP_FAIL_(MLXN_TMAP_E_L2, 0, t->l2, 0);
  /* The end of the last element, offset + dims[0] e + sum (dims[k] - 1)
   * strides[k - 1], saturating at UINT64_MAX. */
  end = t->offset + t->dims[0] * t->element_bytes; /* below 2^64: dims[0] e < 2^35 */
  if (end < t->offset) end = UINT64_MAX;
  for (k = 1; k < t->rank; ++k) {
    const uint64_t n = t->dims[k] - 1, st = t->strides[k - 1];
    reach = n != 0 && st > UINT64_MAX / n ? UINT64_MAX : n * st;
    end = reach > UINT64_MAX - end ? UINT64_MAX : end + reach;
  }
  if (end > buffer_len) MLXN_TMAP_FAIL_(MLXN_TMAP_E_EXTENT, 0, end, buffer_len);
  if ((base + t->offset) % 16 != 0) MLXN_TMAP_FAIL_(MLXN_TMAP_E_ALIGN, 0, base + t->offset, 0);
#undef MLXN_TMAP_FAIL_
  return MLXN_BLOCK_OK;
}

/* "buffer [[buffer(3)]]", "bytes [[buffer(4)]]", "tensor map [[buffer(5)]]", "threadgroup memory [[threadgroup(0)]]". */
static inline const char* mlxn_block_kind_name_(uint32_t kind) {
  return kind == MLXN_BIND_BUFFER ? "buffer"
         : kind == MLXN_BIND_BYTES ? "bytes"
         : kind == MLXN_BIND_TENSOR_MAP ? "tensor map"
                                        : "threadgroup memory";
}

/* Writes the words of blk's refusal into out (at most cap bytes, NUL
 * terminated); returns out. Every message starts "dispatch: ", then
 * "kernel '<kernel>': " where the backend knows the pipeline (kernel non-NULL:
 * the header's handle is one of its live pipelines), and says what must hold
 * and what the block has. */
static inline char* mlxn_block_message(const mlxn_block* blk, const char* kernel, char* out, size_t cap) {
  typedef unsigned long long ull;
  static const char axes[] = "xyz";
  const uint32_t at = blk->error_at;
  const ull actual = blk->error_actual, limit = blk->error_limit, extra = blk->error_extra;
  const int32_t e = blk->error;
  /* The record a refusal concerns, named for the messages that have one. */
  const int about_record = e == MLXN_BLOCK_E_INDEX || e == MLXN_BLOCK_E_DUPLICATE || e == MLXN_BLOCK_E_PAYLOAD_RANGE ||
                           e == MLXN_BLOCK_E_THREADGROUP_B || e == MLXN_BLOCK_E_BUFFER ||
                           e == MLXN_BLOCK_E_BUFFER_OFFSET || e == MLXN_BLOCK_E_TENSOR_MAP_BACKEND ||
                           e == MLXN_BLOCK_E_TENSOR_MAP;
  const mlxn_block_binding* b = &blk->bindings[about_record && at < MLXN_BLOCK_MAX_RECORDS ? at : 0];
  const char* tg = about_record && b->kind == MLXN_BIND_THREADGROUP_MEMORY ? "threadgroup" : "buffer";
  char where[96], head[160];
  if (cap == 0) return out;
  if (kernel != NULL)
    snprintf(head, sizeof head, "dispatch: kernel '%.128s': ", kernel);
  else
    snprintf(head, sizeof head, "dispatch: ");
  where[0] = 0;
  if (e == MLXN_BLOCK_E_INDEX)
    snprintf(where, sizeof where, "binding %u (%s)", (unsigned)at, mlxn_block_kind_name_(b->kind));
  else if (about_record)
    snprintf(where, sizeof where, "binding %u (%s [[%s(%u)]])", (unsigned)at, mlxn_block_kind_name_(b->kind), tg,
             (unsigned)b->index);
  switch (e) {
    case MLXN_BLOCK_OK:
      snprintf(out, cap, "%sthe block is valid", head);
      break;
    case MLXN_BLOCK_E_NULL:
      snprintf(out, cap, "%sblock must be non-NULL", head);
      break;
    case MLXN_BLOCK_E_SHORT:
      snprintf(out, cap, "%sblock_len must be at least %u, the header's size (got %llu)", head,
               (unsigned)MLXN_DISPATCH_HEADER_BYTES, (ull)blk->block_len);
      break;
    case MLXN_BLOCK_E_COUNT:
      snprintf(out, cap,
               "%sbinding count must be at most %u, one per [[buffer(i)]] and [[threadgroup(i)]] index (got %llu)",
               head, (unsigned)MLXN_BLOCK_MAX_RECORDS, actual);
      break;
    case MLXN_BLOCK_E_LENGTH:
      snprintf(out, cap, "%sblock_len must be %u + %u * %u bindings + %u payload bytes = %llu (got %llu)", head,
               (unsigned)MLXN_DISPATCH_HEADER_BYTES, (unsigned)MLXN_DISPATCH_BINDING_BYTES,
               (unsigned)blk->binding_count, (unsigned)blk->payload_bytes, limit, actual);
      break;
    case MLXN_BLOCK_E_RESERVED:
      snprintf(out, cap, "%sthe header's reserved field (byte %u) must be 0 (got %llu)", head,
               (unsigned)MLXN_BLOCK_RESERVED, actual);
      break;
    case MLXN_BLOCK_E_GRID_ZERO:
      snprintf(out, cap, "%sthreadgroups per grid must be positive on every axis (got %ux%ux%u)", head,
               (unsigned)blk->grid[0], (unsigned)blk->grid[1], (unsigned)blk->grid[2]);
      break;
    case MLXN_BLOCK_E_THREADS_ZERO:
      snprintf(out, cap, "%sthreads per threadgroup must be positive on every axis (got %ux%ux%u)", head,
               (unsigned)blk->threads[0], (unsigned)blk->threads[1], (unsigned)blk->threads[2]);
      break;
    case MLXN_BLOCK_E_GRID_THREADS:
      snprintf(out, cap,
               "%sthreads per grid on axis %c must be at most %llu, 32 bits (got %u threadgroups x %u threads = %llu)",
               head, axes[at % 3], limit, (unsigned)blk->grid[at % 3], (unsigned)blk->threads[at % 3], actual);
      break;
    case MLXN_BLOCK_E_KIND:
      snprintf(out, cap,
               "%sbinding %u: kind must be %u (buffer), %u (bytes), %u (threadgroup memory) or %u (tensor map) (got %llu)",
               head, (unsigned)at, (unsigned)MLXN_BIND_BUFFER, (unsigned)MLXN_BIND_BYTES,
               (unsigned)MLXN_BIND_THREADGROUP_MEMORY, (unsigned)MLXN_BIND_TENSOR_MAP, actual);
      break;
    case MLXN_BLOCK_E_INDEX:
      snprintf(out, cap, "%s%s: index must be below %u (got %llu)", head, where, (unsigned)MLXN_MAX_BINDINGS,
               actual);
      break;
    case MLXN_BLOCK_E_DUPLICATE: {
      /* The earlier record of the same index space. */
      uint32_t j = 0;
      const int tgk = b->kind == MLXN_BIND_THREADGROUP_MEMORY;
      for (; j < at; ++j) {
        const mlxn_block_binding* o = &blk->bindings[j];
        if (o->index == b->index && (o->kind == MLXN_BIND_THREADGROUP_MEMORY) == tgk) break;
      }
      snprintf(out, cap, "%s%s: [[%s(%u)]] must be bound once (binding %u binds it too)", head, where, tg,
               (unsigned)b->index, (unsigned)j);
      break;
    }
    case MLXN_BLOCK_E_PAYLOAD_RANGE:
      snprintf(out, cap, "%s%s: offset + length must be at most the payload's %u bytes (got %llu + %llu)", head,
               where, (unsigned)blk->payload_bytes, (ull)b->offset, (ull)b->length);
      break;
    case MLXN_BLOCK_E_THREADGROUP_B:
      snprintf(out, cap, "%s%s: the record's b must be 0 (got %llu)", head, where, actual);
      break;
    case MLXN_BLOCK_E_PIPELINE:
      snprintf(out, cap, "%sthe pipeline handle must be a live pipeline of the encoder's device (got 0x%llx)", head,
               actual);
      break;
    case MLXN_BLOCK_E_BUFFER:
      snprintf(out, cap, "%s%s: the handle must be a live buffer of the encoder's device (got 0x%llx)", head,
               where, actual);
      break;
    case MLXN_BLOCK_E_BUFFER_OFFSET:
      snprintf(out, cap, "%s%s: offset must be at most the buffer's length, %llu bytes (got %llu)", head, where,
               limit, (ull)b->offset);
      break;
    case MLXN_BLOCK_E_GRID_LIMIT:
      snprintf(out, cap, "%sthreadgroups per grid on axis %c must be at most %llu on this device (got %u)", head,
               axes[at % 3], limit, (unsigned)blk->grid[at % 3]);
      break;
    case MLXN_BLOCK_E_THREADS_LIMIT:
      snprintf(out, cap, "%sthreads per threadgroup on axis %c must be at most %llu on this device (got %u)", head,
               axes[at % 3], limit, (unsigned)blk->threads[at % 3]);
      break;
    case MLXN_BLOCK_E_THREADGROUP_SIZE:
      snprintf(out, cap, "%sthreads per threadgroup must be at most %llu for this pipeline (got %ux%ux%u = %llu)", head,
               limit, (unsigned)blk->threads[0], (unsigned)blk->threads[1], (unsigned)blk->threads[2], actual);
      break;
    case MLXN_BLOCK_E_THREADGROUP_MEMORY:
      snprintf(out, cap,
               "%sthreadgroup memory must be at most %llu bytes per threadgroup (got %llu bytes bound + %llu bytes static)",
               head, limit, actual, extra);
      break;
    case MLXN_BLOCK_E_TENSOR_MAP_BACKEND:
      snprintf(out, cap,
               "%s%s: the binding must be a buffer or bytes: this backend has no tensor maps (CUDA's, on compute "
               "capability 9.0 and later)",
               head, where);
      break;
    case MLXN_BLOCK_E_TENSOR_MAP: {
      const unsigned k = (unsigned)(extra >> 8);
      switch ((int)(extra & 0xff)) {
        case MLXN_TMAP_E_DTYPE:
          snprintf(out, cap, "%s%s: dtype must be 1 (u8), 2 (u16), 3 (u32), 4 (f16), 5 (bf16) or 6 (f32) (got %llu)",
                   head, where, actual);
          break;
        case MLXN_TMAP_E_RANK:
          snprintf(out, cap, "%s%s: rank must be 1 to %u (got %llu)", head, where, (unsigned)MLXN_TMAP_MAX_RANK, actual);
          break;
        case MLXN_TMAP_E_DIM:
          snprintf(out, cap, "%s%s: dims[%u] must be 1 to 2^32 (got %llu)", head, where, k, actual);
          break;
        case MLXN_TMAP_E_STRIDE:
          snprintf(out, cap, "%s%s: strides[%u] must be a multiple of 16 below 2^40 bytes (got %llu)", head, where, k,
                   actual);
          break;
        case MLXN_TMAP_E_BOX:
          snprintf(out, cap, "%s%s: box[%u] must be 1 to 256 (got %llu)", head, where, k, actual);
          break;
        case MLXN_TMAP_E_BOX_BYTES:
          snprintf(out, cap, "%s%s: box[0] must span a multiple of 16 bytes (got %llu elements of %llu bytes)", head,
                   where, actual, limit);
          break;
        case MLXN_TMAP_E_SWIZZLE:
          snprintf(out, cap, "%s%s: swizzle must be 0, 32, 64 or 128 (got %llu)", head, where, actual);
          break;
        case MLXN_TMAP_E_SPAN:
          snprintf(out, cap, "%s%s: box[0] must span at most the swizzle's %llu bytes (got %llu bytes)", head, where,
                   limit, actual);
          break;
        case MLXN_TMAP_E_L2:
          snprintf(out, cap, "%s%s: l2 promotion must be 0, 64, 128 or 256 (got %llu)", head, where, actual);
          break;
        case MLXN_TMAP_E_UNUSED:
          snprintf(out, cap, "%s%s: descriptor byte %u (past the rank, or reserved) must hold 0 (got %llu)", head, where,
                   k, actual);
          break;
        case MLXN_TMAP_E_ALIGN:
          snprintf(out, cap, "%s%s: the buffer's address plus offset must be a multiple of 16 (got 0x%llx)", head, where,
                   actual);
          break;
        default: /* MLXN_TMAP_E_EXTENT */
          snprintf(out, cap,
                   "%s%s: the elements the dims and strides reach must end within the buffer's %llu bytes (got an end "
                   "at byte %llu)",
                   head, where, limit, actual);
          break;
      }
      break;
    }
    default:
      snprintf(out, cap, "%srefused (code %d)", head, (int)blk->error);
      break;
  }
  return out;
}

#ifdef __cplusplus
}
#endif
#endif /* MLX_NATIVE_BLOCK_H */
