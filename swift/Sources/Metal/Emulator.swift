// The emulator's C ABI, loaded privately: what this Metal runs on.
//
// libmlx_native_emu.so exports the same mlxn_* names as the library that this
// module is linked into (libMlxNative.so), so it is opened with RTLD_LOCAL and
// every function is taken with dlsym from its handle: a call by name here
// would resolve to the Swift backend's own export. Nothing in this module
// calls an mlxn_* function directly; CMlxNative is imported for the header's
// constants only.
//
// Which file: MLX_NATIVE_EMU_LIB when set; else libmlx_native_emu.so next to
// the binary holding this code; else build/emu/libmlx_native_emu.so in the
// nearest folder above that binary that has one (the clone the package was
// built in: swift/.build/<triple>/<config>/ is four levels below it).
import CMlxNative
import Foundation

final class Emulator {
    typealias Msg = UnsafeMutablePointer<CChar>?
    typealias Out = UnsafeMutablePointer<OpaquePointer?>?

    let file: String
    let deviceOpen: @convention(c) (UInt32, Out, Msg, UInt64) -> Int32
    let deviceName: @convention(c) (OpaquePointer?, Msg, UInt64) -> UInt64
    let deviceLimit: @convention(c) (OpaquePointer?, UInt32) -> UInt64
    let bufferAlloc: @convention(c) (OpaquePointer?, UInt64, Out, Msg, UInt64) -> Int32
    let bufferRelease: @convention(c) (OpaquePointer?) -> Void
    let bufferHostPtr: @convention(c) (OpaquePointer?) -> UnsafeMutableRawPointer?
    let libraryCompile: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, UInt64, UnsafePointer<CChar>?,
                                        UnsafeRawPointer?, UInt32, Out, Msg, UInt64) -> Int32
    let libraryRelease: @convention(c) (OpaquePointer?) -> Void
    let libraryKernelNames: @convention(c) (OpaquePointer?, Msg, UInt64) -> UInt64
    let pipelineCreate: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Out, Msg, UInt64) -> Int32
    let pipelineRelease: @convention(c) (OpaquePointer?) -> Void
    let pipelineMaxThreads: @convention(c) (OpaquePointer?) -> UInt32
    let pipelineStaticThreadgroupMemory: @convention(c) (OpaquePointer?) -> UInt64
    /// mlxn_emu_pipeline_binding_indices (native/emu/api.cpp; not in the header).
    let pipelineBindingIndices: @convention(c) (OpaquePointer?, UInt32, UnsafeMutablePointer<UInt32>?, UInt32) -> UInt32
    let encoderCreate: @convention(c) (OpaquePointer?, Out, Msg, UInt64) -> Int32
    let encoderRelease: @convention(c) (OpaquePointer?) -> Void
    let encoderDispatch: @convention(c) (OpaquePointer?, UnsafeRawPointer?, UInt64, Msg, UInt64) -> Int32
    let encoderBarrier: @convention(c) (OpaquePointer?, Msg, UInt64) -> Int32
    let encoderCommit: @convention(c) (OpaquePointer?, Msg, UInt64) -> Int32
    let encoderWait: @convention(c) (OpaquePointer?, Msg, UInt64) -> Int32
    let encoderStatus: @convention(c) (OpaquePointer?) -> Int32
    let encoderGpuTimeNs: @convention(c) (OpaquePointer?) -> UInt64

    /// The loaded emulator, or why it could not be loaded.
    static let shared: Result<Emulator, Error> = Result { try Emulator() }

    private init() throws {
        let file = try Emulator.locate()
        guard let handle = dlopen(file, RTLD_NOW | RTLD_LOCAL) else {
            throw EmulatorError(text: "dlopen(\(file)) failed: \(dlerror().map { String(cString: $0) } ?? "no error text")")
        }
        func sym<T>(_ name: String, _ type: T.Type) throws -> T {
            guard let p = dlsym(handle, name) else {
                throw EmulatorError(text: "\(file) has no \(name) (an emulator older than this Swift code? run scripts/build-emu.sh)")
            }
            return unsafeBitCast(p, to: type)
        }
        self.file = file
        deviceOpen = try sym("mlxn_device_open", type(of: deviceOpen))
        deviceName = try sym("mlxn_device_name", type(of: deviceName))
        deviceLimit = try sym("mlxn_device_limit", type(of: deviceLimit))
        bufferAlloc = try sym("mlxn_buffer_alloc", type(of: bufferAlloc))
        bufferRelease = try sym("mlxn_buffer_release", type(of: bufferRelease))
        bufferHostPtr = try sym("mlxn_buffer_host_ptr", type(of: bufferHostPtr))
        libraryCompile = try sym("mlxn_library_compile", type(of: libraryCompile))
        libraryRelease = try sym("mlxn_library_release", type(of: libraryRelease))
        libraryKernelNames = try sym("mlxn_library_kernel_names", type(of: libraryKernelNames))
        pipelineCreate = try sym("mlxn_pipeline_create", type(of: pipelineCreate))
        pipelineRelease = try sym("mlxn_pipeline_release", type(of: pipelineRelease))
        pipelineMaxThreads = try sym("mlxn_pipeline_max_threads", type(of: pipelineMaxThreads))
        pipelineStaticThreadgroupMemory = try sym("mlxn_pipeline_static_threadgroup_memory",
                                                  type(of: pipelineStaticThreadgroupMemory))
        pipelineBindingIndices = try sym("mlxn_emu_pipeline_binding_indices", type(of: pipelineBindingIndices))
        encoderCreate = try sym("mlxn_encoder_create", type(of: encoderCreate))
        encoderRelease = try sym("mlxn_encoder_release", type(of: encoderRelease))
        encoderDispatch = try sym("mlxn_encoder_dispatch", type(of: encoderDispatch))
        encoderBarrier = try sym("mlxn_encoder_barrier", type(of: encoderBarrier))
        encoderCommit = try sym("mlxn_encoder_commit", type(of: encoderCommit))
        encoderWait = try sym("mlxn_encoder_wait", type(of: encoderWait))
        encoderStatus = try sym("mlxn_encoder_status", type(of: encoderStatus))
        encoderGpuTimeNs = try sym("mlxn_encoder_gpu_time_ns", type(of: encoderGpuTimeNs))
    }

    static let fileName = "libmlx_native_emu.so"

    private static func locate() throws -> String {
        if let env = ProcessInfo.processInfo.environment["MLX_NATIVE_EMU_LIB"], !env.isEmpty {
            guard FileManager.default.fileExists(atPath: env) else {
                throw EmulatorError(text: "MLX_NATIVE_EMU_LIB=\(env): no such file")
            }
            return env
        }
        var info = Dl_info()
        guard dladdr(#dsohandle, &info) != 0, let image = info.dli_fname else {
            throw EmulatorError(text: "cannot name the binary holding this code (dladdr); set MLX_NATIVE_EMU_LIB")
        }
        var dir = URL(fileURLWithPath: String(cString: image)).resolvingSymlinksInPath().deletingLastPathComponent()
        let beside = dir.appendingPathComponent(fileName).path
        if FileManager.default.fileExists(atPath: beside) { return beside }
        while dir.path != "/" {
            let candidate = dir.appendingPathComponent("build/emu").appendingPathComponent(fileName).path
            if FileManager.default.fileExists(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        throw EmulatorError(
            text: "no \(fileName) next to \(String(cString: image)) nor in a build/emu/ above it; run scripts/build-emu.sh or set MLX_NATIVE_EMU_LIB")
    }

    /// Calls `body` with a message buffer; returns its status and the message.
    func call(_ body: (Msg, UInt64) -> Int32) -> (status: Int32, message: String) {
        var msg = [CChar](repeating: 0, count: 16384)
        let status = msg.withUnsafeMutableBufferPointer { body($0.baseAddress, UInt64($0.count)) }
        return (status, String(cString: msg))
    }

    /// A string that an mlxn_* query writes with the (out, cap) convention.
    func string(_ query: (Msg, UInt64) -> UInt64) -> String {
        let length = query(nil, 0)
        var text = [CChar](repeating: 0, count: Int(length) + 1)
        _ = text.withUnsafeMutableBufferPointer { query($0.baseAddress, UInt64($0.count)) }
        return String(cString: text)
    }
}

struct EmulatorError: Error, CustomStringConvertible {
    let text: String
    var description: String { "Metal on the CPU emulator: \(text)" }
}

/// An error that Metal reports as an NSError, with `text` as its description.
func metalError(_ domain: String, _ code: Int, _ text: String) -> NSError {
    NSError(domain: domain, code: code, userInfo: [NSLocalizedDescriptionKey: text])
}
