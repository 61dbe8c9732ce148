/*
 * mlx_native.h: the C ABI shared by every mlx-native backend
 * (metal: Swift over Metal; cuda: C++ over the CUDA driver API and NVRTC;
 * emu: Metal kernels executed on the CPU).
 *
 * This header is the only contract between the TypeScript layer (bun:ffi) and
 * a backend library. Rules that keep it usable from bun:ffi:
 *   - opaque handles only, passed as pointers;
 *   - plain C scalar types and pointers; no struct is passed by value;
 *   - every fallible call returns an mlxn_status and writes a NUL-terminated
 *     message (truncated to msg_cap bytes) into the caller's msg buffer;
 *     msg may be NULL when msg_cap is 0;
 *   - sizes and offsets are uint64_t.
 *
 * Threading: a device and the objects made from it may be used from one host
 * thread at a time. Command execution (after commit) runs asynchronously.
 */
#ifndef MLX_NATIVE_H
#define MLX_NATIVE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on every incompatible change; the loader refuses a mismatch. */
#define MLXN_ABI_VERSION 4u

/* ---- status codes (kinds mirror the Rust crate's MlxError) ---- */
typedef int32_t mlxn_status;
#define MLXN_OK                          0
#define MLXN_ERR_INVALID_ARGUMENT        1
#define MLXN_ERR_SHADER_COMPILATION      2
#define MLXN_ERR_KERNEL_NOT_FOUND        3
#define MLXN_ERR_DEVICE_NOT_FOUND        4
#define MLXN_ERR_COMMAND_BUFFER          5
#define MLXN_ERR_BUFFER_ALLOCATION       6
#define MLXN_ERR_UNSUPPORTED_DTYPE       7
#define MLXN_ERR_INTERNAL                8

/* ---- opaque handles ---- */
typedef struct mlxn_device   mlxn_device;
typedef struct mlxn_buffer   mlxn_buffer;
typedef struct mlxn_library  mlxn_library;
typedef struct mlxn_pipeline mlxn_pipeline;
typedef struct mlxn_encoder  mlxn_encoder;

/* ---- backend ---- */
uint32_t    mlxn_abi_version(void);
/* "metal", "cuda" or "emu"; a static string. */
const char* mlxn_backend_name(void);
/* Number of devices this backend can open (0 when none is present). */
uint32_t    mlxn_device_count(void);

/* ---- device ---- */
mlxn_status mlxn_device_open(uint32_t ordinal, mlxn_device** out,
                             char* msg, uint64_t msg_cap);
void        mlxn_device_close(mlxn_device* device);
/* Writes the NUL-terminated device name (truncated to cap); returns its length
 * in bytes without the NUL, so a cap above the result holds it whole. */
uint64_t    mlxn_device_name(mlxn_device* device, char* out, uint64_t cap);

#define MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP 0u
#define MLXN_LIMIT_MAX_THREADGROUP_MEMORY      1u  /* bytes */
#define MLXN_LIMIT_SIMD_WIDTH                  2u
#define MLXN_LIMIT_MAX_BUFFER_LENGTH           3u  /* bytes */
#define MLXN_LIMIT_SHARED_MEMORY               4u  /* 1: buffers are host-visible (host_ptr non-null) */
/* The GPU generation and size, for launch shapes that depend on them (the
 * dense family's Hopper tiles): cuda's compute capability as 10 * major +
 * minor (90 for an H100 or H200) and its streaming multiprocessors; 0 where
 * the backend has no such number (metal, emu). */
#define MLXN_LIMIT_COMPUTE_CAPABILITY          5u
#define MLXN_LIMIT_MULTIPROCESSORS             6u
/* Returns the limit, or 0 for an unknown key. */
uint64_t    mlxn_device_limit(mlxn_device* device, uint32_t key);

/* Backend options set at run time, as key/value strings. The emulator knows
 * "schedule" ("sequential" | "random"), "seed" (decimal) and "timeout_ms"
 * (decimal; a dispatch running longer fails; 0 for none). An unknown key or a
 * bad value is MLXN_ERR_INVALID_ARGUMENT. */
mlxn_status mlxn_device_set_option(mlxn_device* device, const char* key,
                                   const char* value, char* msg, uint64_t msg_cap);

/* ---- buffers ----
 * Zero-filled on allocation. host_ptr is non-null where the memory is shared
 * with the CPU (metal, emu) and NULL where it is not (cuda). Releasing a
 * buffer (or a pipeline, or a library) that a recorded or running dispatch
 * binds invalidates its handle at once and frees it when the last such
 * dispatch has run, or has been dropped with its encoder: every backend
 * counts the references of its dispatches. */
mlxn_status mlxn_buffer_alloc(mlxn_device* device, uint64_t length, mlxn_buffer** out,
                              char* msg, uint64_t msg_cap);
void        mlxn_buffer_release(mlxn_buffer* buffer);
uint64_t    mlxn_buffer_length(mlxn_buffer* buffer);
void*       mlxn_buffer_host_ptr(mlxn_buffer* buffer);
mlxn_status mlxn_buffer_write(mlxn_buffer* buffer, uint64_t offset, const void* src,
                              uint64_t length, char* msg, uint64_t msg_cap);
mlxn_status mlxn_buffer_read(mlxn_buffer* buffer, uint64_t offset, void* dst,
                             uint64_t length, char* msg, uint64_t msg_cap);

/* ---- libraries (compiled from source at run time) ----
 * source: Metal Shading Language for metal and emu, CUDA C++ for cuda.
 * name: the file name that compile errors cite (e.g. "rms_norm.metal").
 * constants: function-constant values, a packed array of constants_count
 *   12-byte records { uint32 index; uint32 type (MLXN_CONST_*); uint32 bits },
 *   bits holding the value in its own type's bit pattern (bool: 0 or 1).
 *   Metal binds them to [[function_constant(index)]]; cuda defines
 *   MLXN_FC_<index> as the value before compiling.
 * A compile error is MLXN_ERR_SHADER_COMPILATION with the compiler's text,
 * citing the source's own file name and line. */
#define MLXN_CONST_BOOL 1u
#define MLXN_CONST_I32  2u
#define MLXN_CONST_U32  3u
#define MLXN_CONST_F32  4u
#define MLXN_CONST_F16  5u
#define MLXN_CONST_I16  6u
#define MLXN_CONST_U16  7u
mlxn_status mlxn_library_compile(mlxn_device* device, const char* source, uint64_t source_len,
                                 const char* name, const void* constants, uint32_t constants_count,
                                 mlxn_library** out, char* msg, uint64_t msg_cap);
void        mlxn_library_release(mlxn_library* library);
/* Writes the kernel entry names, '\n'-separated and NUL-terminated (truncated
 * to cap); returns their length in bytes without the NUL. */
uint64_t    mlxn_library_kernel_names(mlxn_library* library, char* out, uint64_t cap);

/* ---- compiling off the caller's thread ----
 * mlxn_library_compile_start checks its handles, copies its arguments and
 * returns at once; the compile itself (mlxn_library_compile's work, with the
 * same errors) runs on a thread of the library, which holds the device open
 * until it ends. mlxn_compile_job_done never blocks: 1 once the result is
 * ready, else 0 (also for a null job). mlxn_compile_job_finish waits for the
 * result if it is not ready, hands over the library (or returns the compile's
 * error and text) and releases the job; a null out or job is
 * MLXN_ERR_INVALID_ARGUMENT and releases nothing. Every started job must be
 * finished exactly once. */
typedef struct mlxn_compile_job mlxn_compile_job;
mlxn_status mlxn_library_compile_start(mlxn_device* device, const char* source, uint64_t source_len,
                                       const char* name, const void* constants, uint32_t constants_count,
                                       mlxn_compile_job** out, char* msg, uint64_t msg_cap);
int32_t     mlxn_compile_job_done(mlxn_compile_job* job);
mlxn_status mlxn_compile_job_finish(mlxn_compile_job* job, mlxn_library** out, char* msg, uint64_t msg_cap);

/* ---- pipelines ----
 * A kernel name absent from the library is MLXN_ERR_KERNEL_NOT_FOUND. */
mlxn_status mlxn_pipeline_create(mlxn_library* library, const char* kernel_name,
                                 mlxn_pipeline** out, char* msg, uint64_t msg_cap);
void        mlxn_pipeline_release(mlxn_pipeline* pipeline);
uint32_t    mlxn_pipeline_max_threads(mlxn_pipeline* pipeline);
/* Threadgroup memory the kernel declares statically, in bytes. */
uint64_t    mlxn_pipeline_static_threadgroup_memory(mlxn_pipeline* pipeline);

/* ---- encoders ----
 * An encoder records dispatches and barriers, then commit submits them
 * (non-blocking); wait blocks until done; status polls. After completion the
 * encoder records afresh. Dispatches of one encoder may overlap or run in any
 * order unless a barrier separates them (metal: a concurrent compute encoder;
 * the emulator's random schedule shuffles them); a barrier makes the writes of
 * every earlier dispatch visible to every later one, and orders them. */
#define MLXN_ENCODER_RECORDING 0
#define MLXN_ENCODER_PENDING   1
#define MLXN_ENCODER_COMPLETED 2
#define MLXN_ENCODER_ERROR     3
mlxn_status mlxn_encoder_create(mlxn_device* device, mlxn_encoder** out,
                                char* msg, uint64_t msg_cap);
void        mlxn_encoder_release(mlxn_encoder* encoder);

/* One dispatch = one packed block, all little-endian (byte offsets named):
 *   header (MLXN_DISPATCH_HEADER_BYTES = 48):
 *     u64 pipeline handle                         MLXN_BLOCK_PIPELINE
 *     u32 threadgroups per grid x, y, z           MLXN_BLOCK_GRID (+ 4 y, + 8 z)
 *     u32 threads per threadgroup x, y, z         MLXN_BLOCK_THREADS (+ 4 y, + 8 z)
 *     u32 binding count (n)                       MLXN_BLOCK_BINDING_COUNT
 *     u32 payload bytes (p)                       MLXN_BLOCK_PAYLOAD_BYTES
 *     u64 reserved (0)                            MLXN_BLOCK_RESERVED
 *   n binding records (MLXN_DISPATCH_BINDING_BYTES = 24 each):
 *     u32 kind (MLXN_BIND_*)                      MLXN_RECORD_KIND
 *     u32 index                                   MLXN_RECORD_INDEX
 *     u64 a                                       MLXN_RECORD_A
 *     u64 b                                       MLXN_RECORD_B
 *       BUFFER:            a = buffer handle, b = byte offset into it
 *       BYTES:             a = byte offset of the data in the payload, b = length
 *       THREADGROUP_MEMORY: a = length in bytes, b = 0
 *       TENSOR_MAP:        a = buffer handle, b = byte offset in the payload
 *                          of its descriptor (MLXN_TMAP_DESC_BYTES, below)
 *   payload (p bytes): inline data of BYTES bindings and the descriptors of
 *   TENSOR_MAP bindings, copied at dispatch.
 * block_len must equal 48 + 24 n + p. Each [[buffer(i)]] index (BUFFER, BYTES
 * and TENSOR_MAP share them) and each [[threadgroup(i)]] index is bound at
 * most once.
 * Bad handles, indices >= 31, offsets past the buffer, or a grid/threadgroup
 * with a zero or over-limit size are MLXN_ERR_INVALID_ARGUMENT and nothing is
 * recorded. Every backend decodes and checks the block with
 * mlx_native_block.h, so each refusal has the same words everywhere. */
#define MLXN_BIND_BUFFER             1u
#define MLXN_BIND_BYTES              2u
#define MLXN_BIND_THREADGROUP_MEMORY 3u
/* A tensor map over a buffer (CUDA's TMA on compute capability 9.0 and later;
 * the other backends refuse the binding): the kernel's parameter at the
 * index is a pointer to a 64-byte aligned CUtensorMap that the backend encodes
 * at dispatch from the buffer's address and the descriptor, and keeps with
 * the recorded work (the buffer is held as a BUFFER binding's is). The
 * descriptor, MLXN_TMAP_DESC_BYTES little-endian bytes:
 *     u64 offset            MLXN_TMAP_OFFSET   byte offset in the buffer of element (0, ..., 0), 16-byte aligned
 *     u32 dtype             MLXN_TMAP_DTYPE    MLXN_TMAP_DTYPE_*
 *     u32 rank              MLXN_TMAP_RANK     1 to 5
 *     u64 dims[5]           MLXN_TMAP_DIMS     elements along each dimension, innermost first, 1 to 2^32
 *     u64 strides[4]        MLXN_TMAP_STRIDES  bytes from one index to the next of dimensions 1 .. rank - 1,
 *                                              multiples of 16 below 2^40
 *     u32 box[5]            MLXN_TMAP_BOX      elements one copy moves along each dimension, 1 to 256;
 *                                              box[0] elements a multiple of 16 bytes
 *     u32 swizzle           MLXN_TMAP_SWIZZLE  0, 32, 64 or 128: the shared-memory swizzle span in bytes
 *                                              (box[0] elements at most that many bytes)
 *     u32 l2 promotion      MLXN_TMAP_L2       0, 64, 128 or 256: the L2 fetch size in bytes
 *     12 bytes reserved (0)
 * Entries past `rank` are 0. Every element the dims and strides reach lies
 * inside the buffer (the copies read or write only there; a box's elements
 * past the dims read as zeros and are not written). */
#define MLXN_BIND_TENSOR_MAP         4u
#define MLXN_TMAP_DESC_BYTES         128u
#define MLXN_TMAP_MAX_RANK           5u
#define MLXN_TMAP_OFFSET             0u
#define MLXN_TMAP_DTYPE              8u
#define MLXN_TMAP_RANK               12u
#define MLXN_TMAP_DIMS               16u
#define MLXN_TMAP_STRIDES            56u
#define MLXN_TMAP_BOX                88u
#define MLXN_TMAP_SWIZZLE            108u
#define MLXN_TMAP_L2                 112u
#define MLXN_TMAP_RESERVED           116u
#define MLXN_TMAP_DTYPE_U8           1u
#define MLXN_TMAP_DTYPE_U16          2u
#define MLXN_TMAP_DTYPE_U32          3u
#define MLXN_TMAP_DTYPE_F16          4u
#define MLXN_TMAP_DTYPE_BF16         5u
#define MLXN_TMAP_DTYPE_F32          6u
#define MLXN_DISPATCH_HEADER_BYTES   48u
#define MLXN_DISPATCH_BINDING_BYTES  24u
#define MLXN_MAX_BINDINGS            31u
#define MLXN_BLOCK_PIPELINE          0u
#define MLXN_BLOCK_GRID              8u
#define MLXN_BLOCK_THREADS           20u
#define MLXN_BLOCK_BINDING_COUNT     32u
#define MLXN_BLOCK_PAYLOAD_BYTES     36u
#define MLXN_BLOCK_RESERVED          40u
#define MLXN_RECORD_KIND             0u
#define MLXN_RECORD_INDEX            4u
#define MLXN_RECORD_A                8u
#define MLXN_RECORD_B                16u
mlxn_status mlxn_encoder_dispatch(mlxn_encoder* encoder, const void* block, uint64_t block_len,
                                  char* msg, uint64_t msg_cap);
mlxn_status mlxn_encoder_barrier(mlxn_encoder* encoder, char* msg, uint64_t msg_cap);
mlxn_status mlxn_encoder_commit(mlxn_encoder* encoder, char* msg, uint64_t msg_cap);
/* Starts the dispatches recorded since the encoder's last flush or commit
 * while the recording goes on: the device may run them while the host records
 * the rest, and the commit that ends the recording submits what is left. The
 * encoder stays recording; what it has flushed runs in recorded order, each
 * flush after the one before and the commit after them all, as one commit
 * (mlxn_encoder_wait waits for all of it, an execution error anywhere in it
 * is the commit's, _gpu_time_ns spans the first flush's first launch to the
 * commit's end). A flush changes no order: barriers order the dispatches as
 * in the same recording without it (cuda also runs whatever follows a flush
 * after everything flushed). Flushed work holds its buffers and pipelines as
 * committed work does; an encoder released before its commit waits for what
 * it has started and runs none of the rest. cuda launches the flushed
 * dispatches at once; metal and the emulator start the whole recording at its
 * commit (a flush checks its encoder and returns). Flushing nothing is OK.
 * Refused with MLXN_ERR_INVALID_ARGUMENT, naming the function, the argument,
 * the expected and the actual value: a null or replayable encoder (its
 * recording is captured whole at its first commit), an encoder whose last
 * commit still runs. */
mlxn_status mlxn_encoder_flush(mlxn_encoder* encoder, char* msg, uint64_t msg_cap);
/* Blocks until the committed work ends; an execution error (bad access, a
 * barrier not reached by every thread, a device fault) is
 * MLXN_ERR_COMMAND_BUFFER with its text. Waiting with nothing committed is OK. */
mlxn_status mlxn_encoder_wait(mlxn_encoder* encoder, char* msg, uint64_t msg_cap);
/* MLXN_ENCODER_*; never blocks. */
int32_t     mlxn_encoder_status(mlxn_encoder* encoder);
/* Device time of the last completed commit, in nanoseconds (0 if none). */
uint64_t    mlxn_encoder_gpu_time_ns(mlxn_encoder* encoder);

/* ---- record once, replay many ----
 * A replayable encoder records like any other until its first commit, which
 * runs the recording and keeps it: the same launches, barriers and buffers
 * can then be committed again by mlxn_encoder_replay, as often as wanted,
 * with no dispatch block decoded again. The recording holds its buffers and
 * pipelines (the references of mlxn_buffer_release's rule) until the encoder
 * is released, so nothing bound to it is freed while it may still run.
 * After the first commit a replayable encoder refuses dispatch, barrier and
 * commit; mlxn_encoder_wait, _status and _gpu_time_ns report the last commit
 * or replay. Backends replay natively: cuda captures the launches into a CUDA
 * graph at the first replay and launches the graph from then on (plain
 * launches where capture fails), metal re-encodes the kept dispatches into a
 * new command buffer, the emulator runs them again (the random schedule
 * shuffles each stretch between barriers anew on every run).
 *
 * mlxn_encoder_patch_bytes replaces the inline data of one recorded BYTES
 * binding (dispatch_index counts the encoder's recorded dispatches from 0,
 * binding_index is its [[buffer(i)]] index) for the replays that follow; the
 * length must be the recorded one. Nothing else of a recording can change,
 * so a launch's grid, buffers and barriers stay what the first commit ran.
 * Refused, with MLXN_ERR_INVALID_ARGUMENT naming the function, the argument,
 * the expected and the actual value, in O(1): an encoder not made
 * replayable, a replay before the first commit, a replay or a patch while a
 * commit or replay runs, a dispatch index past the recording, a binding index
 * that is not a BYTES binding of that dispatch, another length, null data. */
mlxn_status mlxn_encoder_create_replayable(mlxn_device* device, mlxn_encoder** out,
                                           char* msg, uint64_t msg_cap);
mlxn_status mlxn_encoder_replay(mlxn_encoder* encoder, char* msg, uint64_t msg_cap);
mlxn_status mlxn_encoder_patch_bytes(mlxn_encoder* encoder, uint64_t dispatch_index,
                                     uint32_t binding_index, const void* data, uint64_t len,
                                     char* msg, uint64_t msg_cap);

#ifdef __cplusplus
}
#endif
#endif /* MLX_NATIVE_H */
