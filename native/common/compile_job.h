// The compile job of mlxn_library_compile_start / _done / _finish
// (native/include/mlx_native.h), shared by native/emu and native/cuda: each
// backend says how to keep its device alive and hands this file the rest,
// which calls the backend's own mlxn_library_compile on a thread of its own.
// Header-only.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <system_error>
#include <thread>

#include "../include/mlx_native.h"
#include "messages.h"

struct mlxn_compile_job {
  std::thread worker;
  std::atomic<bool> done{false};
  mlxn_status status = MLXN_OK;
  std::string message;
  mlxn_library* library = nullptr;
};

namespace mlxn::common {

// A compile error's text reaches the job whole up to this many bytes (the
// backends write messages into a caller's buffer of a given capacity).
inline constexpr size_t kCompileMessageCap = size_t(1) << 20;

// Record i of mlxn_library_compile's constants: 12-byte records
// { uint32 index; uint32 type; uint32 bits } at any alignment.
struct ConstantRecord {
  uint32_t index, type, bits;
};
inline ConstantRecord constant_record(const void* constants, uint32_t i) {
  ConstantRecord r;
  const unsigned char* p = static_cast<const unsigned char*>(constants) + size_t(i) * 12;
  std::memcpy(&r.index, p, 4);
  std::memcpy(&r.type, p + 4, 4);
  std::memcpy(&r.bits, p + 8, 4);
  return r;
}

// "" when `file`, the name mlxn_library_compile gives a library (written
// into the generated source's #line and cited in diagnostics), has no
// control characters; else the refusal.
inline std::string library_name_refusal(const std::string& file) {
  for (unsigned char c : file)
    if (c < 0x20 || c == 0x7f)
      return "mlxn_library_compile: name must be a file name without control characters (got byte " +
             std::to_string(unsigned(c)) + ")";
  return "";
}

// Copies the arguments of mlxn_library_compile and runs it on a new thread;
// `release` runs there after it, whatever the outcome (it drops what the
// caller took to keep the device alive). The arguments are checked by
// mlxn_library_compile itself, so a bad one is the job's error at finish.
// Fails, without running `release`, only when no thread can be started.
inline mlxn_status start_compile_job(mlxn_device* device, const char* source, uint64_t source_len,
                                     const char* name, const void* constants, uint32_t constants_count,
                                     std::function<void()> release, mlxn_compile_job** out,
                                     std::string* error) {
  auto* job = new mlxn_compile_job;
  std::string src = source ? std::string(source, source_len) : std::string();
  std::string file = name ? std::string(name) : std::string();  // null and "" both mean the default name
  std::string consts = constants ? std::string(static_cast<const char*>(constants), size_t(constants_count) * 12)
                                 : std::string();
  const bool null_source = source == nullptr && source_len > 0;
  const bool null_constants = constants == nullptr && constants_count > 0;
  try {
    job->worker = std::thread([job, device, src = std::move(src), file = std::move(file),
                               consts = std::move(consts), null_source, null_constants, constants_count,
                               release = std::move(release)] {
      std::string msg(kCompileMessageCap, '\0');
      job->status = mlxn_library_compile(device, null_source ? nullptr : src.data(), null_source ? 1 : src.size(),
                                         file.c_str(), null_constants ? nullptr : consts.data(),
                                         constants_count, &job->library, msg.data(), msg.size());
      msg.resize(std::char_traits<char>::length(msg.data()));
      job->message = std::move(msg);
      release();
      job->done.store(true, std::memory_order_release);
    });
  } catch (const std::system_error& e) {
    delete job;
    *error = std::string("mlxn_library_compile_start: cannot start a thread: ") + e.what();
    return MLXN_ERR_INTERNAL;
  }
  *out = job;
  return MLXN_OK;
}

inline int32_t compile_job_done(mlxn_compile_job* job) {
  return job != nullptr && job->done.load(std::memory_order_acquire) ? 1 : 0;
}

// Waits for the job, hands over its library and message, and frees it.
inline mlxn_status finish_compile_job(mlxn_compile_job* job, mlxn_library** out, std::string* message) {
  job->worker.join();
  const mlxn_status status = job->status;
  *out = job->library;
  *message = std::move(job->message);
  delete job;
  return status;
}

// mlxn_library_compile_start of a backend: `hold` takes a reference on the
// device for the job and `release` drops it (on the job's thread when the
// compile ends, or here when no thread starts).
template <typename Hold>
inline mlxn_status library_compile_start(mlxn_device* device, const char* source, uint64_t source_len, const char* name,
                                         const void* constants, uint32_t constants_count, Hold&& hold,
                                         const std::function<void()>& release, mlxn_compile_job** out, char* msg,
                                         uint64_t msg_cap) {
  if (!device || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_library_compile_start: device and out must be non-NULL");
  *out = nullptr;
  hold();
  std::string err;
  const mlxn_status st =
      start_compile_job(device, source, source_len, name, constants, constants_count, release, out, &err);
  if (st != MLXN_OK) {
    release();
    return set_msg(msg, msg_cap, st, err);
  }
  return ok_msg(msg, msg_cap);
}

// mlxn_compile_job_finish: the job's library and message.
inline mlxn_status library_compile_finish(mlxn_compile_job* job, mlxn_library** out, char* msg, uint64_t msg_cap) {
  if (!job || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_compile_job_finish: job and out must be non-NULL");
  std::string text;
  const mlxn_status st = finish_compile_job(job, out, &text);
  return st == MLXN_OK ? ok_msg(msg, msg_cap) : set_msg(msg, msg_cap, st, text);
}

}  // namespace mlxn::common
