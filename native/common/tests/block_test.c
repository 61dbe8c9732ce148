/* The dispatch-block decoder (native/include/mlx_native_block.h): every
 * refusal with its exact words, and what a valid block decodes to. Compiled
 * as C99 and as C++ by run.sh; prints "N checks, M failures". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../include/mlx_native_block.h"
#include "check.h"


/* A block under construction: header, records, payload. */
typedef struct {
  uint8_t data[4096];
  uint32_t n;
  uint32_t payload;
  uint8_t pay[1024];
} Block;

static void put32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }

static void begin(Block* b, uint64_t pipeline, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t tx, uint32_t ty,
                  uint32_t tz) {
  memset(b, 0, sizeof *b);
  put64(b->data + MLXN_BLOCK_PIPELINE, pipeline);
  put32(b->data + MLXN_BLOCK_GRID, gx);
  put32(b->data + MLXN_BLOCK_GRID + 4, gy);
  put32(b->data + MLXN_BLOCK_GRID + 8, gz);
  put32(b->data + MLXN_BLOCK_THREADS, tx);
  put32(b->data + MLXN_BLOCK_THREADS + 4, ty);
  put32(b->data + MLXN_BLOCK_THREADS + 8, tz);
}

static void record(Block* b, uint32_t kind, uint32_t index, uint64_t a, uint64_t bb) {
  uint8_t* r = b->data + MLXN_DISPATCH_HEADER_BYTES + MLXN_DISPATCH_BINDING_BYTES * b->n++;
  put32(r + MLXN_RECORD_KIND, kind);
  put32(r + MLXN_RECORD_INDEX, index);
  put64(r + MLXN_RECORD_A, a);
  put64(r + MLXN_RECORD_B, bb);
}

/* A BYTES record whose data is appended to the payload. */
static void bytes(Block* b, uint32_t index, const void* data, uint32_t len) {
  record(b, MLXN_BIND_BYTES, index, b->payload, len);
  memcpy(b->pay + b->payload, data, len);
  b->payload += len;
}

/* Writes count and payload; returns the block's length. */
static uint64_t end(Block* b) {
  const uint64_t at = MLXN_DISPATCH_HEADER_BYTES + (uint64_t)MLXN_DISPATCH_BINDING_BYTES * b->n;
  put32(b->data + MLXN_BLOCK_BINDING_COUNT, b->n);
  put32(b->data + MLXN_BLOCK_PAYLOAD_BYTES, b->payload);
  memcpy(b->data + at, b->pay, b->payload);
  return at + b->payload;
}

static mlxn_block blk;


/* Decodes and expects the refusal `code` with exactly the words `want`. */
static void refused(int line, const void* data, uint64_t len, int32_t code, const char* want) {
  char text[MLXN_BLOCK_MESSAGE_CAP];
  const int32_t got = mlxn_block_decode(data, len, &blk);
  mlxn_block_message(&blk, NULL, text, sizeof text);
  ++checks;
  if (got != code || blk.error != code || strcmp(text, want) != 0) {
    ++failures;
    printf("FAIL line %d: want %d \"%s\"\n               got %d \"%s\"\n", line, code, want, got, text);
  }
}
#define REFUSED(data, len, code, want) refused(__LINE__, data, len, code, want)

/* The words of a refusal the backend finds after decoding. */
static void words(int line, int32_t code, uint32_t at, uint64_t actual, uint64_t limit, uint64_t extra,
                  const char* want) {
  char text[MLXN_BLOCK_MESSAGE_CAP];
  CHECK(mlxn_block_fail(&blk, code, at, actual, limit, extra) == code, "fail returns its code");
  mlxn_block_message(&blk, NULL, text, sizeof text);
  ++checks;
  if (strcmp(text, want) != 0) {
    ++failures;
    printf("FAIL line %d: want \"%s\"\n               got  \"%s\"\n", line, want, text);
  }
}
#define WORDS(code, at, actual, limit, extra, want) words(__LINE__, code, at, actual, limit, extra, want)

/* A tensor-map descriptor: bf16 [rows, cols] row-major with row stride
 * `stride` bytes, boxes of box_rows x 64, 128-byte swizzle. */
static void tmap_desc(uint8_t* d, uint64_t offset, uint64_t cols, uint64_t rows, uint64_t stride, uint32_t box_rows) {
  memset(d, 0, MLXN_TMAP_DESC_BYTES);
  put64(d + MLXN_TMAP_OFFSET, offset);
  put32(d + MLXN_TMAP_DTYPE, MLXN_TMAP_DTYPE_BF16);
  put32(d + MLXN_TMAP_RANK, 2);
  put64(d + MLXN_TMAP_DIMS, cols);
  put64(d + MLXN_TMAP_DIMS + 8, rows);
  put64(d + MLXN_TMAP_STRIDES, stride);
  put32(d + MLXN_TMAP_BOX, 64);
  put32(d + MLXN_TMAP_BOX + 4, box_rows);
  put32(d + MLXN_TMAP_SWIZZLE, 128);
  put32(d + MLXN_TMAP_L2, 256);
}

/* A TENSOR_MAP record whose descriptor is appended to the payload (16-byte aligned). */
static void tensor_map(Block* b, uint32_t index, uint64_t handle, const uint8_t* desc) {
  b->payload = (b->payload + 15) & ~15u;
  record(b, MLXN_BIND_TENSOR_MAP, index, handle, b->payload);
  memcpy(b->pay + b->payload, desc, MLXN_TMAP_DESC_BYTES);
  b->payload += MLXN_TMAP_DESC_BYTES;
}

/* mlxn_tmap_check on a block holding only `desc` (buffer `len` bytes at
 * address `base`): MLXN_BLOCK_OK, or the refusal with exactly `want`. */
static void tmap_checked(int line, const uint8_t* desc, uint64_t len, uint64_t base, int32_t code, const char* want) {
  Block b;
  mlxn_tmap t;
  char text[MLXN_BLOCK_MESSAGE_CAP];
  uint64_t n;
  int32_t got;
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  tensor_map(&b, 3, 0x40, desc);
  n = end(&b);
  ++checks;
  if (mlxn_block_decode(b.data, n, &blk) != MLXN_BLOCK_OK) {
    ++failures;
    printf("FAIL line %d: decode refused %d\n", line, blk.error);
    return;
  }
  got = mlxn_tmap_check(&blk, 0, len, base, &t);
  mlxn_block_message(&blk, NULL, text, sizeof text);
  if (got != code || (code != MLXN_BLOCK_OK && strcmp(text, want) != 0)) {
    ++failures;
    printf("FAIL line %d: want %d \"%s\"\n               got %d \"%s\"\n", line, code, want, got, text);
  }
}
#define TMAP(desc, len, base, code, want) tmap_checked(__LINE__, desc, len, base, code, want)

static void tensor_maps(void) {
  Block b;
  uint64_t len;
  uint8_t d[MLXN_TMAP_DESC_BYTES], e[MLXN_TMAP_DESC_BYTES];
  mlxn_tmap t;
  const char* at = "dispatch: binding 0 (tensor map [[buffer(3)]]): ";
  char want[MLXN_BLOCK_MESSAGE_CAP];
#define AT(text) (snprintf(want, sizeof want, "%s%s", at, text), want)

  /* Decoded: the handle, the descriptor inside the payload; the index is a [[buffer(i)]] one. */
  tmap_desc(d, 256, 128, 1000, 256, 64);
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 0, 0x10, 0);
  tensor_map(&b, 3, 0x40, d);
  len = end(&b);
  CHECK(mlxn_block_decode(b.data, len, &blk) == MLXN_BLOCK_OK, "tensor map decodes: %d", blk.error);
  CHECK(blk.buffer_mask == 0x9u && blk.bindings[1].kind == MLXN_BIND_TENSOR_MAP && blk.bindings[1].handle == 0x40 &&
            blk.bindings[1].length == MLXN_TMAP_DESC_BYTES && blk.bindings[1].offset == 0 &&
            blk.bindings[1].data == b.data + len - MLXN_TMAP_DESC_BYTES,
        "tensor map record");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 3, 0x10, 0);
  tensor_map(&b, 3, 0x40, d);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_DUPLICATE,
          "dispatch: binding 1 (tensor map [[buffer(3)]]): [[buffer(3)]] must be bound once (binding 0 binds it too)");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  tensor_map(&b, 3, 0x40, d);
  len = end(&b);
  put64(b.data + 48 + MLXN_RECORD_B, 16); /* the descriptor's last 16 bytes past the payload */
  REFUSED(b.data, len, MLXN_BLOCK_E_PAYLOAD_RANGE,
          "dispatch: binding 0 (tensor map [[buffer(3)]]): offset + length must be at most the payload's 128 bytes "
          "(got 16 + 128)");
  put64(b.data + 48 + MLXN_RECORD_B, UINT64_MAX - 64);
  REFUSED(b.data, len, MLXN_BLOCK_E_PAYLOAD_RANGE,
          "dispatch: binding 0 (tensor map [[buffer(3)]]): offset + length must be at most the payload's 128 bytes "
          "(got 18446744073709551551 + 128)");

  /* The descriptor's rules (mlxn_tmap_check): 1000 rows of 256 bytes from byte 256 end at 256256. */
  TMAP(d, 256256, 0x1000, MLXN_BLOCK_OK, "");
  CHECK(mlxn_tmap_check(&blk, 0, 256256, 0x1000, &t) == MLXN_BLOCK_OK && t.rank == 2 && t.dims[1] == 1000 &&
            t.strides[0] == 256 && t.box[1] == 64 && t.element_bytes == 2 && t.swizzle == 128 && t.l2 == 256,
        "decoded descriptor");
  TMAP(d, 256255, 0x1000, MLXN_BLOCK_E_TENSOR_MAP,
       AT("the elements the dims and strides reach must end within the buffer's 256255 bytes (got an end at byte "
          "256256)"));
  TMAP(d, 256256, 0x1008, MLXN_BLOCK_E_TENSOR_MAP,
       AT("the buffer's address plus offset must be a multiple of 16 (got 0x1108)"));
  memcpy(e, d, sizeof e);
  put32(e + MLXN_TMAP_DTYPE, 7);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP,
       AT("dtype must be 1 (u8), 2 (u16), 3 (u32), 4 (f16), 5 (bf16) or 6 (f32) (got 7)"));
  memcpy(e, d, sizeof e);
  put32(e + MLXN_TMAP_RANK, 6);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("rank must be 1 to 5 (got 6)"));
  put32(e + MLXN_TMAP_RANK, 0);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("rank must be 1 to 5 (got 0)"));
  memcpy(e, d, sizeof e);
  put64(e + MLXN_TMAP_DIMS + 8, 0);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("dims[1] must be 1 to 2^32 (got 0)"));
  put64(e + MLXN_TMAP_DIMS + 8, ((uint64_t)1 << 32) + 1);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("dims[1] must be 1 to 2^32 (got 4294967297)"));
  memcpy(e, d, sizeof e);
  put64(e + MLXN_TMAP_STRIDES, 264);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("strides[0] must be a multiple of 16 below 2^40 bytes (got 264)"));
  memcpy(e, d, sizeof e);
  put32(e + MLXN_TMAP_BOX + 4, 257);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("box[1] must be 1 to 256 (got 257)"));
  memcpy(e, d, sizeof e);
  put32(e + MLXN_TMAP_BOX, 12);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("box[0] must span a multiple of 16 bytes (got 12 elements of 2 bytes)"));
  put32(e + MLXN_TMAP_BOX, 128);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("box[0] must span at most the swizzle's 128 bytes (got 256 bytes)"));
  put32(e + MLXN_TMAP_SWIZZLE, 0);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_OK, "");
  put32(e + MLXN_TMAP_SWIZZLE, 16);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("swizzle must be 0, 32, 64 or 128 (got 16)"));
  memcpy(e, d, sizeof e);
  put32(e + MLXN_TMAP_L2, 32);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP, AT("l2 promotion must be 0, 64, 128 or 256 (got 32)"));
  memcpy(e, d, sizeof e);
  put64(e + MLXN_TMAP_DIMS + 16, 1); /* a third dim past rank 2 */
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP,
       AT("descriptor byte 32 (past the rank, or reserved) must hold 0 (got 1)"));
  memcpy(e, d, sizeof e);
  put64(e + MLXN_TMAP_STRIDES + 8, 16);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP,
       AT("descriptor byte 64 (past the rank, or reserved) must hold 0 (got 16)"));
  memcpy(e, d, sizeof e);
  put32(e + MLXN_TMAP_RESERVED + 8, 3);
  TMAP(e, 1 << 20, 0, MLXN_BLOCK_E_TENSOR_MAP,
       AT("descriptor byte 124 (past the rank, or reserved) must hold 0 (got 3)"));
  /* Reaches past 2^64: saturated, never wrapped into the buffer. */
  memcpy(e, d, sizeof e);
  put64(e + MLXN_TMAP_DIMS + 8, (uint64_t)1 << 32);
  put64(e + MLXN_TMAP_STRIDES, ((uint64_t)1 << 40) - 16);
  put32(e + MLXN_TMAP_RANK, 3);
  put64(e + MLXN_TMAP_DIMS + 16, (uint64_t)1 << 32);
  put64(e + MLXN_TMAP_STRIDES + 8, ((uint64_t)1 << 40) - 16);
  put32(e + MLXN_TMAP_BOX + 8, 1);
  TMAP(e, UINT64_MAX - 1, 0, MLXN_BLOCK_E_TENSOR_MAP,
       AT("the elements the dims and strides reach must end within the buffer's 18446744073709551614 bytes (got an "
          "end at byte 18446744073709551615)"));
  /* A backend without tensor maps. */
  WORDS(MLXN_BLOCK_E_TENSOR_MAP_BACKEND, 0, 0, 0, 0,
        "dispatch: binding 0 (tensor map [[buffer(3)]]): the binding must be a buffer or bytes: this backend has no "
        "tensor maps (CUDA's, on compute capability 9.0 and later)");
#undef AT
}

int main(void) {
  static Block b;
  const float scale = 1.5f;
  const uint8_t six[6] = {1, 2, 3, 4, 5, 6};
  uint64_t len;
  uint32_t i;

  /* ---- a valid block decodes to its fields ---- */
  begin(&b, 0xABCDEF0123ull, 4, 2, 1, 64, 2, 1);
  record(&b, MLXN_BIND_BUFFER, 0, 0x1000, 16);
  bytes(&b, 1, &scale, 4);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 0, 100, 0);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 2, 32, 0);
  bytes(&b, 30, six, 6);
  record(&b, MLXN_BIND_BYTES, 3, 0, 0); /* empty inline data is allowed */
  len = end(&b);
  CHECK(mlxn_block_decode(b.data, len, &blk) == MLXN_BLOCK_OK, "valid block refused: %d", blk.error);
  CHECK(blk.error == MLXN_BLOCK_OK, "error %d", blk.error);
  CHECK(blk.pipeline == 0xABCDEF0123ull, "pipeline %llx", (unsigned long long)blk.pipeline);
  CHECK(blk.grid[0] == 4 && blk.grid[1] == 2 && blk.grid[2] == 1, "grid");
  CHECK(blk.threads[0] == 64 && blk.threads[1] == 2 && blk.threads[2] == 1, "threads");
  CHECK(blk.binding_count == 6 && blk.payload_bytes == 10 && blk.block_len == len, "counts");
  CHECK(blk.buffer_mask == ((1u << 0) | (1u << 1) | (1u << 3) | (1u << 30)), "buffer mask %x", blk.buffer_mask);
  CHECK(blk.threadgroup_mask == ((1u << 0) | (1u << 2)), "threadgroup mask %x", blk.threadgroup_mask);
  CHECK(blk.threadgroup_bytes == 112 + 32, "threadgroup bytes %llu", (unsigned long long)blk.threadgroup_bytes);
  CHECK(blk.bindings[0].kind == MLXN_BIND_BUFFER && blk.bindings[0].index == 0 && blk.bindings[0].handle == 0x1000 &&
            blk.bindings[0].offset == 16 && blk.bindings[0].length == 0 && blk.bindings[0].data == NULL,
        "buffer binding");
  CHECK(blk.bindings[1].kind == MLXN_BIND_BYTES && blk.bindings[1].index == 1 && blk.bindings[1].offset == 0 &&
            blk.bindings[1].length == 4 && blk.bindings[1].data == b.data + 48 + 24 * 6 &&
            memcmp(blk.bindings[1].data, &scale, 4) == 0,
        "bytes binding");
  CHECK(blk.bindings[2].kind == MLXN_BIND_THREADGROUP_MEMORY && blk.bindings[2].index == 0 &&
            blk.bindings[2].length == 100 && blk.bindings[2].handle == 0 && blk.bindings[2].data == NULL,
        "threadgroup binding");
  CHECK(memcmp(blk.bindings[4].data, six, 6) == 0 && blk.bindings[4].offset == 4, "second bytes binding");
  CHECK(blk.bindings[5].length == 0 && blk.bindings[5].data == b.data + 48 + 24 * 6, "empty bytes");
  CHECK(mlxn_block_binding_at(&blk, 4) == &blk.bindings[4], "binding_at");

  /* The most records a block can hold: every index of both spaces once. */
  begin(&b, 1, 1, 1, 1, 1, 1, 1);
  for (i = 0; i < MLXN_MAX_BINDINGS; ++i) record(&b, MLXN_BIND_BUFFER, i, 0x10 + i, 0);
  for (i = 0; i < MLXN_MAX_BINDINGS; ++i) record(&b, MLXN_BIND_THREADGROUP_MEMORY, i, 1, 0);
  len = end(&b);
  CHECK(mlxn_block_decode(b.data, len, &blk) == MLXN_BLOCK_OK && blk.binding_count == MLXN_BLOCK_MAX_RECORDS &&
            blk.buffer_mask == 0x7FFFFFFFu && blk.threadgroup_mask == 0x7FFFFFFFu && blk.threadgroup_bytes == 31 * 16,
        "62 records: %d", blk.error);
  /* Threads per grid of exactly 2^32 - 1 on an axis. */
  begin(&b, 1, 65535, 1, 1, 65537, 1, 1);
  len = end(&b);
  CHECK(mlxn_block_decode(b.data, len, &blk) == MLXN_BLOCK_OK, "65535 x 65537 threads: %d", blk.error);
  /* Threadgroup lengths that would wrap a 64-bit sum saturate. */
  begin(&b, 1, 1, 1, 1, 1, 1, 1);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 0, UINT64_MAX - 3, 0);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 1, 64, 0);
  len = end(&b);
  CHECK(mlxn_block_decode(b.data, len, &blk) == MLXN_BLOCK_OK && blk.threadgroup_bytes == UINT64_MAX,
        "saturating sum %llu", (unsigned long long)blk.threadgroup_bytes);
  begin(&b, 1, 1, 1, 1, 1, 1, 1);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 0, UINT64_MAX / 2, 0);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 1, UINT64_MAX / 2 + 100, 0);
  len = end(&b);
  CHECK(mlxn_block_decode(b.data, len, &blk) == MLXN_BLOCK_OK && blk.threadgroup_bytes == UINT64_MAX,
        "saturating sum of two %llu", (unsigned long long)blk.threadgroup_bytes);

  /* ---- the block's own faults ---- */
  REFUSED(NULL, 48, MLXN_BLOCK_E_NULL, "dispatch: block must be non-NULL");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 0, 0x10, 0);
  len = end(&b);
  REFUSED(b.data, 40, MLXN_BLOCK_E_SHORT, "dispatch: block_len must be at least 48, the header's size (got 40)");
  REFUSED(b.data, 0, MLXN_BLOCK_E_SHORT, "dispatch: block_len must be at least 48, the header's size (got 0)");
  REFUSED(b.data, len + 1, MLXN_BLOCK_E_LENGTH,
          "dispatch: block_len must be 48 + 24 * 1 bindings + 0 payload bytes = 72 (got 73)");
  REFUSED(b.data, len - 1, MLXN_BLOCK_E_LENGTH,
          "dispatch: block_len must be 48 + 24 * 1 bindings + 0 payload bytes = 72 (got 71)");
  put32(b.data + MLXN_BLOCK_BINDING_COUNT, 63);
  REFUSED(b.data, len, MLXN_BLOCK_E_COUNT,
          "dispatch: binding count must be at most 62, one per [[buffer(i)]] and [[threadgroup(i)]] index (got 63)");
  put32(b.data + MLXN_BLOCK_BINDING_COUNT, UINT32_MAX);
  REFUSED(b.data, len, MLXN_BLOCK_E_COUNT,
          "dispatch: binding count must be at most 62, one per [[buffer(i)]] and [[threadgroup(i)]] index "
          "(got 4294967295)");
  /* Counts that would overflow 32-bit arithmetic still give the exact sum. */
  put32(b.data + MLXN_BLOCK_BINDING_COUNT, 62);
  put32(b.data + MLXN_BLOCK_PAYLOAD_BYTES, UINT32_MAX);
  REFUSED(b.data, len, MLXN_BLOCK_E_LENGTH,
          "dispatch: block_len must be 48 + 24 * 62 bindings + 4294967295 payload bytes = 4294968831 (got 72)");
  len = end(&b);
  put64(b.data + MLXN_BLOCK_RESERVED, 1);
  REFUSED(b.data, len, MLXN_BLOCK_E_RESERVED, "dispatch: the header's reserved field (byte 40) must be 0 (got 1)");
  put64(b.data + MLXN_BLOCK_RESERVED, 1ull << 63);
  REFUSED(b.data, len, MLXN_BLOCK_E_RESERVED,
          "dispatch: the header's reserved field (byte 40) must be 0 (got 9223372036854775808)");

  begin(&b, 1, 2, 0, 1, 32, 1, 1);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_GRID_ZERO,
          "dispatch: threadgroups per grid must be positive on every axis (got 2x0x1)");
  begin(&b, 1, 2, 1, 1, 32, 1, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_THREADS_ZERO,
          "dispatch: threads per threadgroup must be positive on every axis (got 32x1x0)");
  begin(&b, 1, 1, 70000, 1, 1, 65536, 1);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_GRID_THREADS,
          "dispatch: threads per grid on axis y must be at most 4294967295, 32 bits (got 70000 threadgroups x "
          "65536 threads = 4587520000)");
  begin(&b, 1, 1, 1, UINT32_MAX, 1, 1, UINT32_MAX);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_GRID_THREADS,
          "dispatch: threads per grid on axis z must be at most 4294967295, 32 bits (got 4294967295 threadgroups "
          "x 4294967295 threads = 18446744065119617025)");

  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 0, 0x10, 0);
  record(&b, 9, 1, 0, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_KIND,
          "dispatch: binding 1: kind must be 1 (buffer), 2 (bytes), 3 (threadgroup memory) or 4 (tensor map) (got 9)");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, 0, 0, 0, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_KIND,
          "dispatch: binding 0: kind must be 1 (buffer), 2 (bytes), 3 (threadgroup memory) or 4 (tensor map) (got 0)");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, 5, 0, 0, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_KIND,
          "dispatch: binding 0: kind must be 1 (buffer), 2 (bytes), 3 (threadgroup memory) or 4 (tensor map) (got 5)");

  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 31, 0x10, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_INDEX, "dispatch: binding 0 (buffer): index must be below 31 (got 31)");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  bytes(&b, 0, &scale, 4);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, UINT32_MAX, 16, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_INDEX,
          "dispatch: binding 1 (threadgroup memory): index must be below 31 (got 4294967295)");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BYTES, 40, 0, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_INDEX, "dispatch: binding 0 (bytes): index must be below 31 (got 40)");

  /* Buffers and bytes share the [[buffer(i)]] indices; threadgroup memory has its own. */
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 0, 0x10, 0);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 1, 16, 0);
  record(&b, MLXN_BIND_BUFFER, 1, 0x10, 0);
  record(&b, MLXN_BIND_BUFFER, 0, 0x20, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_DUPLICATE,
          "dispatch: binding 3 (buffer [[buffer(0)]]): [[buffer(0)]] must be bound once (binding 0 binds it too)");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 2, 0x10, 0);
  bytes(&b, 2, &scale, 4);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_DUPLICATE,
          "dispatch: binding 1 (bytes [[buffer(2)]]): [[buffer(2)]] must be bound once (binding 0 binds it too)");
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_BUFFER, 5, 0x10, 0);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 5, 16, 0);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 5, 32, 0);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_DUPLICATE,
          "dispatch: binding 2 (threadgroup memory [[threadgroup(5)]]): [[threadgroup(5)]] must be bound once "
          "(binding 1 binds it too)");

  /* Inline data must lie inside the payload, without wrapping. */
  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  bytes(&b, 0, &scale, 4);
  len = end(&b);
  put64(b.data + 48 + MLXN_RECORD_A, 1);
  REFUSED(b.data, len, MLXN_BLOCK_E_PAYLOAD_RANGE,
          "dispatch: binding 0 (bytes [[buffer(0)]]): offset + length must be at most the payload's 4 bytes (got 1 "
          "+ 4)");
  put64(b.data + 48 + MLXN_RECORD_A, 5);
  put64(b.data + 48 + MLXN_RECORD_B, 0);
  REFUSED(b.data, len, MLXN_BLOCK_E_PAYLOAD_RANGE,
          "dispatch: binding 0 (bytes [[buffer(0)]]): offset + length must be at most the payload's 4 bytes (got 5 "
          "+ 0)");
  put64(b.data + 48 + MLXN_RECORD_A, 2);
  put64(b.data + 48 + MLXN_RECORD_B, UINT64_MAX - 1); /* 2 + (2^64 - 2) wraps to 0 */
  REFUSED(b.data, len, MLXN_BLOCK_E_PAYLOAD_RANGE,
          "dispatch: binding 0 (bytes [[buffer(0)]]): offset + length must be at most the payload's 4 bytes (got 2 "
          "+ 18446744073709551614)");

  begin(&b, 1, 1, 1, 1, 32, 1, 1);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 0, 16, 1);
  len = end(&b);
  REFUSED(b.data, len, MLXN_BLOCK_E_THREADGROUP_B,
          "dispatch: binding 0 (threadgroup memory [[threadgroup(0)]]): the record's b must be 0 (got 1)");

  /* ---- tensor maps: a buffer handle and a descriptor in the payload ---- */
  tensor_maps();

  /* ---- the words of the refusals a backend finds after decoding ---- */
  begin(&b, 0x1234, 8, 1, 1, 32, 4, 2);
  record(&b, MLXN_BIND_BUFFER, 0, 0x5678, 404);
  record(&b, MLXN_BIND_THREADGROUP_MEMORY, 0, 16, 0);
  len = end(&b);
  CHECK(mlxn_block_decode(b.data, len, &blk) == MLXN_BLOCK_OK, "decode: %d", blk.error);
  WORDS(MLXN_BLOCK_E_PIPELINE, 0, 0x1234, 0, 0,
        "dispatch: the pipeline handle must be a live pipeline of the encoder's device (got 0x1234)");
  WORDS(MLXN_BLOCK_E_BUFFER, 0, 0x5678, 0, 0,
        "dispatch: binding 0 (buffer [[buffer(0)]]): the handle must be a live buffer of the encoder's device (got "
        "0x5678)");
  WORDS(MLXN_BLOCK_E_BUFFER_OFFSET, 0, 404, 400, 0,
        "dispatch: binding 0 (buffer [[buffer(0)]]): offset must be at most the buffer's length, 400 bytes (got 404)");
  WORDS(MLXN_BLOCK_E_GRID_LIMIT, 0, 8, 4, 0,
        "dispatch: threadgroups per grid on axis x must be at most 4 on this device (got 8)");
  WORDS(MLXN_BLOCK_E_THREADS_LIMIT, 2, 2, 1, 0,
        "dispatch: threads per threadgroup on axis z must be at most 1 on this device (got 2)");
  WORDS(MLXN_BLOCK_E_THREADGROUP_SIZE, 0, 256, 128, 0,
        "dispatch: threads per threadgroup must be at most 128 for this pipeline (got 32x4x2 = 256)");
  WORDS(MLXN_BLOCK_E_THREADGROUP_MEMORY, 0, 40960, 32768, 1024,
        "dispatch: threadgroup memory must be at most 32768 bytes per threadgroup (got 40960 bytes bound + 1024 bytes "
        "static)");

  /* Where the backend knows the kernel, the words name it. */
  {
    char text[MLXN_BLOCK_MESSAGE_CAP];
    char longname[300];
    mlxn_block_fail(&blk, MLXN_BLOCK_E_BUFFER_OFFSET, 0, 404, 400, 0);
    CHECK(strcmp(mlxn_block_message(&blk, "add_delta", text, sizeof text),
                 "dispatch: kernel 'add_delta': binding 0 (buffer [[buffer(0)]]): offset must be at most the buffer's "
                 "length, 400 bytes (got 404)") == 0,
          "with a kernel: %s", text);
    memset(longname, 'k', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    mlxn_block_message(&blk, longname, text, sizeof text);
    CHECK(strlen(text) < sizeof text && strstr(text, "(got 404)") != NULL, "a long kernel name is cut: %s", text);
  }

  /* A short buffer truncates the words, NUL-terminated. */
  {
    char small[12];
    memset(small, 'x', sizeof small);
    mlxn_block_fail(&blk, MLXN_BLOCK_E_NULL, 0, 0, 0, 0);
    mlxn_block_message(&blk, NULL, small, sizeof small);
    CHECK(strcmp(small, "dispatch: b") == 0, "truncated: %s", small);
    small[0] = 'x';
    mlxn_block_message(&blk, NULL, small, 0);
    CHECK(small[0] == 'x', "cap 0 writes nothing");
  }

  return check_summary();
}
