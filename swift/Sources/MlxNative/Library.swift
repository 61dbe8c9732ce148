// Libraries (compiled from source, or loaded from an installed metallib built
// from the same source) and compute pipelines.
import CMlxNative
import Foundation
import Metal

/// One 12-byte function-constant record of mlxn_library_compile.
public struct FunctionConstant {
    public let index: UInt32
    public let type: UInt32  // MLXN_CONST_*
    public let bits: UInt32

    public init(index: UInt32, type: UInt32, bits: UInt32) {
        self.index = index
        self.type = type
        self.bits = bits
    }

    /// Reads `count` packed little-endian records.
    static func parse(_ records: UnsafeRawPointer?, count: UInt32) throws -> [FunctionConstant] {
        guard count > 0 else { return [] }
        guard let records else { throw MlxnError.invalid("library_compile: constants is null but constants_count is \(count)") }
        return (0..<Int(count)).map { i in
            let at = i * 12
            func u32(_ offset: Int) -> UInt32 {
                UInt32(littleEndian: records.loadUnaligned(fromByteOffset: at + offset, as: UInt32.self))
            }
            return FunctionConstant(index: u32(0), type: u32(4), bits: u32(8))
        }
    }
}

/// The values Metal binds to [[function_constant(index)]] when it makes a
/// function. Each value is passed in its own type's size: 1 byte for bool,
/// 2 for the 16-bit types (the low half of `bits`), 4 for the 32-bit ones.
func constantValues(_ constants: [FunctionConstant]) throws -> MTLFunctionConstantValues {
    let values = MTLFunctionConstantValues()
    for c in constants {
        // Binds `value` in its own type's size.
        func bind<T>(_ value: T, _ type: MTLDataType) {
            withUnsafeBytes(of: value) { values.setConstantValue($0.baseAddress!, type: type, index: Int(c.index)) }
        }
        switch c.type {
        case MLXN_CONST_BOOL: bind(c.bits != 0, .bool)
        case MLXN_CONST_I32: bind(Int32(bitPattern: c.bits), .int)
        case MLXN_CONST_U32: bind(c.bits, .uint)
        case MLXN_CONST_F32: bind(Float(bitPattern: c.bits), .float)
        case MLXN_CONST_F16: bind(UInt16(truncatingIfNeeded: c.bits), .half)
        case MLXN_CONST_I16: bind(Int16(truncatingIfNeeded: c.bits), .short)
        case MLXN_CONST_U16: bind(UInt16(truncatingIfNeeded: c.bits), .ushort)
        default:
            throw MlxnError.invalid(
                "library_compile: function constant \(c.index) has unknown type \(c.type) (expected MLXN_CONST_BOOL..MLXN_CONST_U16, 1..7)")
        }
    }
    return values
}

/// Where precompiled libraries are installed: the `metallib` folder next to
/// the binary holding this code (libMlxNative.dylib, or the mlx-native tool).
/// scripts/build-metal.sh puts `<family>.metallib` there together with the
/// `<family>.metal` it was built from.
let metallibDirectory: URL? = {
    // #dsohandle is the handle of the image this code is in, so dladdr names
    // its file. (A C function pointer to one of the @_cdecl exports would make
    // the compiler emit that export a second time in a debug build.)
    var info = Dl_info()
    guard dladdr(#dsohandle, &info) != 0, let file = info.dli_fname else { return nil }
    return URL(fileURLWithPath: String(cString: file))
        .deletingLastPathComponent()
        .appendingPathComponent("metallib", isDirectory: true)
}()

public final class MetalLibrary {
    public let device: MetalDevice
    public let library: MTLLibrary
    public let name: String
    /// True when the library came from an installed metallib.
    public let precompiled: Bool
    let constants: MTLFunctionConstantValues

    /// Compiles `source` (Metal Shading Language 3.1, precise math) as a file
    /// called `name`. When `allowPrecompiled` and an installed metallib was
    /// built from exactly these source bytes, loads it instead; any problem
    /// with it falls back to compiling the source.
    public init(device: MetalDevice, source: String, name: String,
                constants: [FunctionConstant], allowPrecompiled: Bool = true) throws {
        self.device = device
        self.name = name
        self.constants = try constantValues(constants)
        if allowPrecompiled, let library = MetalLibrary.loadPrecompiled(device: device, source: source, name: name) {
            self.library = library
            self.precompiled = true
            return
        }
        let options = MTLCompileOptions()
        options.languageVersion = .version3_1
        // Precise math, as the emulator and the CPU references compute.
        options.fastMathEnabled = false
        do {
            self.library = try device.device.makeLibrary(source: source, options: options)
        } catch {
            // Metal cites the source as "program_source:LINE:COLUMN"; cite the
            // file by its own name instead.
            let text = (error as NSError).localizedDescription
                .replacingOccurrences(of: "program_source", with: name)
            throw MlxnError(MLXN_ERR_SHADER_COMPILATION, "metal: compiling \(name) failed:\n\(text)")
        }
        self.precompiled = false
    }

    static func loadPrecompiled(device: MetalDevice, source: String, name: String) -> MTLLibrary? {
        guard let dir = metallibDirectory, name.hasSuffix(".metal") else { return nil }
        let file = URL(fileURLWithPath: name).lastPathComponent
        let stem = String(file.dropLast(".metal".count))
        let builtFrom = dir.appendingPathComponent(file)
        let metallib = dir.appendingPathComponent(stem + ".metallib")
        guard let installed = FileManager.default.contents(atPath: builtFrom.path),
              installed == Data(source.utf8) else { return nil }
        return try? device.device.makeLibrary(URL: metallib)
    }

    /// The kernel entry points, sorted.
    public var kernelNames: [String] { library.functionNames.sorted() }

    /// The pipeline states made ahead by `compiled`, by kernel name (the
    /// states only: a MetalPipeline holds its library, which would make a cycle).
    private var prepared: [String: (state: MTLComputePipelineState, bufferIndices: [Int], threadgroupIndices: [Int])] = [:]
    private let preparedLock = NSLock()

    /// A library compiled off the caller's thread (mlxn_library_compile_start),
    /// with a pipeline made for each kernel while there, since making one
    /// compiles the kernel for the GPU; a kernel whose pipeline fails here
    /// fails again, with its error, when asked for.
    static func compiled(device: MetalDevice, source: String, name: String,
                         constants: [FunctionConstant]) throws -> MetalLibrary {
        let library = try MetalLibrary(device: device, source: source, name: name, constants: constants)
        for kernel in library.kernelNames {
            if let pipeline = try? library.makePipeline(kernel) {
                library.preparedLock.lock()
                library.prepared[kernel] = (pipeline.state, pipeline.bufferIndices, pipeline.threadgroupIndices)
                library.preparedLock.unlock()
            }
        }
        return library
    }

    public func pipeline(_ kernel: String) throws -> MetalPipeline {
        preparedLock.lock()
        let ready = prepared[kernel]
        preparedLock.unlock()
        if let ready {
            return MetalPipeline(library: self, name: kernel, state: ready.state,
                                 bufferIndices: ready.bufferIndices, threadgroupIndices: ready.threadgroupIndices)
        }
        return try makePipeline(kernel)
    }

    func makePipeline(_ kernel: String) throws -> MetalPipeline {
        guard library.functionNames.contains(kernel) else {
            throw MlxnError(MLXN_ERR_KERNEL_NOT_FOUND,
                            "metal: kernel '\(kernel)' not found in \(name) (it has: \(kernelNames.joined(separator: ", ")))")
        }
        let function: MTLFunction
        do {
            function = try library.makeFunction(name: kernel, constantValues: constants)
        } catch {
            throw MlxnError(MLXN_ERR_SHADER_COMPILATION,
                            "metal: specializing kernel '\(kernel)' of \(name) failed: \((error as NSError).localizedDescription)")
        }
        do {
            // The reflection lists the kernel's [[buffer(n)]] and
            // [[threadgroup(n)]] arguments, which every dispatch must bind.
            var reflection: MTLAutoreleasedComputePipelineReflection?
            let state = try device.device.makeComputePipelineState(
                function: function, options: .bindingInfo, reflection: &reflection)
            let bindings = reflection?.bindings ?? []
            return MetalPipeline(
                library: self, name: kernel, state: state,
                bufferIndices: bindings.filter { $0.type == .buffer }.map { $0.index }.sorted(),
                threadgroupIndices: bindings.filter { $0.type == .threadgroupMemory }.map { $0.index }.sorted())
        } catch {
            throw MlxnError(MLXN_ERR_SHADER_COMPILATION,
                            "metal: making the pipeline of kernel '\(kernel)' of \(name) failed: \((error as NSError).localizedDescription)")
        }
    }
}

/// A compile on a thread of its own (mlxn_library_compile_start): the
/// library, with a pipeline made for each of its kernels, or the error.
/// The thread's closure holds the job and the device until it ends.
final class CompileJob: @unchecked Sendable {
    private let condition = NSCondition()
    private var result: Result<MetalLibrary, Error>?  // guarded by condition

    init(_ work: @escaping () throws -> MetalLibrary) {
        let thread = Thread { [self] in
            let outcome = Result { try work() }
            condition.lock()
            result = outcome
            condition.broadcast()
            condition.unlock()
        }
        thread.start()
    }

    var isDone: Bool {
        condition.lock()
        defer { condition.unlock() }
        return result != nil
    }

    func wait() -> Result<MetalLibrary, Error> {
        condition.lock()
        defer { condition.unlock() }
        while result == nil { condition.wait() }
        return result!
    }
}

public final class MetalPipeline {
    public let library: MetalLibrary
    public let name: String
    public let state: MTLComputePipelineState
    /// The [[buffer(n)]] indices the kernel declares.
    public let bufferIndices: [Int]
    /// The [[threadgroup(n)]] indices the kernel declares.
    public let threadgroupIndices: [Int]

    init(library: MetalLibrary, name: String, state: MTLComputePipelineState,
         bufferIndices: [Int], threadgroupIndices: [Int]) {
        self.library = library
        self.name = name
        self.state = state
        self.bufferIndices = bufferIndices
        self.threadgroupIndices = threadgroupIndices
    }

    public var device: MetalDevice { library.device }
    public var maxThreads: UInt32 { UInt32(state.maxTotalThreadsPerThreadgroup) }
    public var staticThreadgroupMemory: UInt64 { UInt64(state.staticThreadgroupMemoryLength) }
}
