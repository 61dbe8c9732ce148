// The C ABI of native/include/mlx_native.h: one @_cdecl function per header
// function, same name, same parameters, in the header's order. Each one only
// converts between C and Swift; the work is in Device.swift, Library.swift and
// Encoder.swift. tests/contract-swift.test.ts holds this file to the header.
//
// Handles are OpaquePointer (pointers to the header's incomplete structs);
// null handles give 0 / null / MLXN_ERR_INVALID_ARGUMENT, and a dangling or
// forged handle is the caller's error.
import CMlxNative
import Foundation

/// "metal", NUL-terminated, alive for the life of the process.
private let backendName: UnsafePointer<CChar> = UnsafePointer(strdup("metal")!)

func outIsNull(_ op: String) -> MlxnError { MlxnError.invalid("\(op): out is null") }

func cString(_ text: UnsafePointer<CChar>?, _ op: String, _ what: String) throws -> String {
    guard let text else { throw MlxnError.invalid("\(op): \(what) is null") }
    return String(cString: text)
}

/// The object of a handle; MlxnError.invalid("<op>: <what> is null") where there is none of this type.
func required<T: AnyObject>(_ handle: OpaquePointer?, as type: T.Type, _ op: String, _ what: String) throws -> T {
    guard let found = object(handle, as: type) else { throw MlxnError.invalid("\(op): \(what) is null") }
    return found
}

/// The out parameter of a call that makes an object: an error where it is
/// null; else null until `make` returns, then the new object's handle.
func makeInto(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ op: String, _ make: () throws -> AnyObject) throws {
    guard let out else { throw outIsNull(op) }
    out.pointee = nil
    out.pointee = makeHandle(try make())
}

// ---- backend ----

@_cdecl("mlxn_abi_version")
public func mlxnAbiVersion() -> UInt32 {
    MLXN_ABI_VERSION
}

@_cdecl("mlxn_backend_name")
public func mlxnBackendName() -> UnsafePointer<CChar>? {
    backendName
}

@_cdecl("mlxn_device_count")
public func mlxnDeviceCount() -> UInt32 {
    MetalDevice.count
}

// ---- device ----

@_cdecl("mlxn_device_open")
public func mlxnDeviceOpen(_ ordinal: UInt32, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                           _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "device_open") { try MetalDevice(ordinal: ordinal) }
    }
}

@_cdecl("mlxn_device_close")
public func mlxnDeviceClose(_ device: OpaquePointer?) {
    releaseHandle(device)
}

@_cdecl("mlxn_device_name")
public func mlxnDeviceName(_ device: OpaquePointer?, _ out: UnsafeMutablePointer<CChar>?, _ cap: UInt64) -> UInt64 {
    let name = object(device, as: MetalDevice.self)?.name ?? ""
    return writeCString(name, to: out, cap: cap)
}

@_cdecl("mlxn_device_limit")
public func mlxnDeviceLimit(_ device: OpaquePointer?, _ key: UInt32) -> UInt64 {
    object(device, as: MetalDevice.self)?.limit(key) ?? 0
}

@_cdecl("mlxn_device_set_option")
public func mlxnDeviceSetOption(_ device: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ value: UnsafePointer<CChar>?,
                                _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        let target = try required(device, as: MetalDevice.self, "device_set_option", "device")
        let keyText = try cString(key, "device_set_option", "key")
        let valueText = try cString(value, "device_set_option", "value")
        try target.setOption(key: keyText, value: valueText)
    }
}

// ---- buffers ----

@_cdecl("mlxn_buffer_alloc")
public func mlxnBufferAlloc(_ device: OpaquePointer?, _ length: UInt64, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                            _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "buffer_alloc") {
            try required(device, as: MetalDevice.self, "buffer_alloc", "device").alloc(length: length)
        }
    }
}

@_cdecl("mlxn_buffer_release")
public func mlxnBufferRelease(_ buffer: OpaquePointer?) {
    releaseHandle(buffer)
}

@_cdecl("mlxn_buffer_length")
public func mlxnBufferLength(_ buffer: OpaquePointer?) -> UInt64 {
    object(buffer, as: MetalBuffer.self)?.length ?? 0
}

@_cdecl("mlxn_buffer_host_ptr")
public func mlxnBufferHostPtr(_ buffer: OpaquePointer?) -> UnsafeMutableRawPointer? {
    object(buffer, as: MetalBuffer.self)?.hostPointer
}

@_cdecl("mlxn_buffer_write")
public func mlxnBufferWrite(_ buffer: OpaquePointer?, _ offset: UInt64, _ src: UnsafeRawPointer?, _ length: UInt64,
                            _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try required(buffer, as: MetalBuffer.self, "buffer_write", "buffer").write(offset: offset, from: src, count: length)
    }
}

@_cdecl("mlxn_buffer_read")
public func mlxnBufferRead(_ buffer: OpaquePointer?, _ offset: UInt64, _ dst: UnsafeMutableRawPointer?, _ length: UInt64,
                           _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try required(buffer, as: MetalBuffer.self, "buffer_read", "buffer").read(offset: offset, into: dst, count: length)
    }
}

// ---- libraries ----

/// The arguments of mlxn_library_compile and mlxn_library_compile_start,
/// copied from C; their checks happen when the library is made, so both
/// return the same errors (the second at mlxn_compile_job_finish).
struct CompileRequest {
    let text: String?
    let sourceLen: UInt64
    let file: String
    let records: Result<[FunctionConstant], Error>

    init(_ source: UnsafePointer<CChar>?, _ sourceLen: UInt64, _ name: UnsafePointer<CChar>?,
         _ constants: UnsafeRawPointer?, _ constantsCount: UInt32) {
        text = source.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: Int(sourceLen)), as: UTF8.self) }
        self.sourceLen = sourceLen
        let given = name.map { String(cString: $0) } ?? ""
        file = given.isEmpty ? "source.metal" : given
        records = Result { try FunctionConstant.parse(constants, count: constantsCount) }
    }

    /// The library; `preparePipelines` also makes each kernel's pipeline (off
    /// the caller's thread, where that compile is welcome).
    func library(on device: MetalDevice, preparePipelines: Bool) throws -> MetalLibrary {
        guard text != nil || sourceLen == 0 else {
            throw MlxnError.invalid("library_compile: source is null but source_len is \(sourceLen)")
        }
        let source = text ?? ""
        let constants = try records.get()
        return preparePipelines
            ? try MetalLibrary.compiled(device: device, source: source, name: file, constants: constants)
            : try MetalLibrary(device: device, source: source, name: file, constants: constants)
    }
}

@_cdecl("mlxn_library_compile")
public func mlxnLibraryCompile(_ device: OpaquePointer?, _ source: UnsafePointer<CChar>?, _ sourceLen: UInt64,
                               _ name: UnsafePointer<CChar>?, _ constants: UnsafeRawPointer?, _ constantsCount: UInt32,
                               _ out: UnsafeMutablePointer<OpaquePointer?>?,
                               _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "library_compile") {
            let target = try required(device, as: MetalDevice.self, "library_compile", "device")
            let request = CompileRequest(source, sourceLen, name, constants, constantsCount)
            return try request.library(on: target, preparePipelines: false)
        }
    }
}

@_cdecl("mlxn_library_compile_start")
public func mlxnLibraryCompileStart(_ device: OpaquePointer?, _ source: UnsafePointer<CChar>?, _ sourceLen: UInt64,
                                    _ name: UnsafePointer<CChar>?, _ constants: UnsafeRawPointer?, _ constantsCount: UInt32,
                                    _ out: UnsafeMutablePointer<OpaquePointer?>?,
                                    _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "library_compile_start") {
            let target = try required(device, as: MetalDevice.self, "library_compile_start", "device")
            let request = CompileRequest(source, sourceLen, name, constants, constantsCount)
            return CompileJob { try request.library(on: target, preparePipelines: true) }
        }
    }
}

@_cdecl("mlxn_compile_job_done")
public func mlxnCompileJobDone(_ job: OpaquePointer?) -> Int32 {
    (object(job, as: CompileJob.self)?.isDone ?? false) ? 1 : 0
}

@_cdecl("mlxn_compile_job_finish")
public func mlxnCompileJobFinish(_ job: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                                 _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "compile_job_finish") {
            let result = try required(job, as: CompileJob.self, "compile_job_finish", "job").wait()
            releaseHandle(job)
            return try result.get()
        }
    }
}

@_cdecl("mlxn_library_release")
public func mlxnLibraryRelease(_ library: OpaquePointer?) {
    releaseHandle(library)
}

@_cdecl("mlxn_library_kernel_names")
public func mlxnLibraryKernelNames(_ library: OpaquePointer?, _ out: UnsafeMutablePointer<CChar>?, _ cap: UInt64) -> UInt64 {
    let names = object(library, as: MetalLibrary.self)?.kernelNames ?? []
    return writeCString(names.joined(separator: "\n"), to: out, cap: cap)
}

// ---- pipelines ----

@_cdecl("mlxn_pipeline_create")
public func mlxnPipelineCreate(_ library: OpaquePointer?, _ kernelName: UnsafePointer<CChar>?,
                               _ out: UnsafeMutablePointer<OpaquePointer?>?,
                               _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "pipeline_create") {
            let source = try required(library, as: MetalLibrary.self, "pipeline_create", "library")
            return try source.pipeline(try cString(kernelName, "pipeline_create", "kernel_name"))
        }
    }
}

@_cdecl("mlxn_pipeline_release")
public func mlxnPipelineRelease(_ pipeline: OpaquePointer?) {
    releaseHandle(pipeline)
}

@_cdecl("mlxn_pipeline_max_threads")
public func mlxnPipelineMaxThreads(_ pipeline: OpaquePointer?) -> UInt32 {
    object(pipeline, as: MetalPipeline.self)?.maxThreads ?? 0
}

@_cdecl("mlxn_pipeline_static_threadgroup_memory")
public func mlxnPipelineStaticThreadgroupMemory(_ pipeline: OpaquePointer?) -> UInt64 {
    object(pipeline, as: MetalPipeline.self)?.staticThreadgroupMemory ?? 0
}

// ---- encoders ----

@_cdecl("mlxn_encoder_create")
public func mlxnEncoderCreate(_ device: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                              _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "encoder_create") {
            MetalEncoder(device: try required(device, as: MetalDevice.self, "encoder_create", "device"))
        }
    }
}

@_cdecl("mlxn_encoder_release")
public func mlxnEncoderRelease(_ encoder: OpaquePointer?) {
    releaseHandle(encoder)
}

@_cdecl("mlxn_encoder_dispatch")
public func mlxnEncoderDispatch(_ encoder: OpaquePointer?, _ block: UnsafeRawPointer?, _ blockLen: UInt64,
                                _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try required(encoder, as: MetalEncoder.self, "dispatch", "encoder").dispatch(block, length: blockLen)
    }
}

@_cdecl("mlxn_encoder_barrier")
public func mlxnEncoderBarrier(_ encoder: OpaquePointer?, _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try required(encoder, as: MetalEncoder.self, "barrier", "encoder").barrier()
    }
}

@_cdecl("mlxn_encoder_commit")
public func mlxnEncoderCommit(_ encoder: OpaquePointer?, _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try required(encoder, as: MetalEncoder.self, "commit", "encoder").commit()
    }
}

@_cdecl("mlxn_encoder_flush")
public func mlxnEncoderFlush(_ encoder: OpaquePointer?, _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try required(encoder, as: MetalEncoder.self, "flush", "encoder").flush()
    }
}

@_cdecl("mlxn_encoder_wait")
public func mlxnEncoderWait(_ encoder: OpaquePointer?, _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try required(encoder, as: MetalEncoder.self, "wait", "encoder").wait()
    }
}

@_cdecl("mlxn_encoder_status")
public func mlxnEncoderStatus(_ encoder: OpaquePointer?) -> Int32 {
    object(encoder, as: MetalEncoder.self)?.status ?? MLXN_ENCODER_ERROR
}

@_cdecl("mlxn_encoder_gpu_time_ns")
public func mlxnEncoderGpuTimeNs(_ encoder: OpaquePointer?) -> UInt64 {
    object(encoder, as: MetalEncoder.self)?.gpuTimeNs ?? 0
}

// ---- record once, replay many ----

@_cdecl("mlxn_encoder_create_replayable")
public func mlxnEncoderCreateReplayable(_ device: OpaquePointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                                        _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        try makeInto(out, "encoder_create_replayable") {
            MetalEncoder(device: try required(device, as: MetalDevice.self, "encoder_create_replayable", "device"), replayable: true)
        }
    }
}

@_cdecl("mlxn_encoder_replay")
public func mlxnEncoderReplay(_ encoder: OpaquePointer?, _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        guard let encoder = object(encoder, as: MetalEncoder.self) else {
            throw MlxnError.invalid("mlxn_encoder_replay: encoder must be non-NULL (got NULL)")
        }
        try encoder.replay()
    }
}

@_cdecl("mlxn_encoder_patch_bytes")
public func mlxnEncoderPatchBytes(_ encoder: OpaquePointer?, _ dispatchIndex: UInt64, _ bindingIndex: UInt32,
                                  _ data: UnsafeRawPointer?, _ len: UInt64,
                                  _ msg: UnsafeMutablePointer<CChar>?, _ msgCap: UInt64) -> Int32 {
    withStatus(msg, msgCap) {
        guard let encoder = object(encoder, as: MetalEncoder.self) else {
            throw MlxnError.invalid("mlxn_encoder_patch_bytes: encoder must be non-NULL (got NULL)")
        }
        try encoder.patchBytes(dispatch: dispatchIndex, binding: bindingIndex, data, length: len)
    }
}
