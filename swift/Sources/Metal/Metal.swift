// Metal on Linux: the part of Apple's Metal API that the metal backend
// (Sources/MlxNative) uses, declared with Apple's Swift signatures, and run on
// the CPU emulator (Emulator.swift). Package.swift builds this module only on
// Linux, under the name Metal, so `import Metal` in the backend means Apple's
// framework on macOS and this on Linux.
//
// The rule: code that compiles against this module compiles against Apple's.
// So every declaration follows the Apple documentation page cited above it
// (names, argument labels, optionality, throws, return types), and nothing
// is declared that the backend does not use. Where Linux forces a difference,
// the comment says so: Apple's protocols refine NSObjectProtocol (here
// AnyObject: the Objective-C runtime is absent), Apple's reflection pointer is
// an AutoreleasingUnsafeMutablePointer (here UnsafeMutablePointer: `&value`
// converts to either), and CFTimeInterval is spelled Double (its definition).
// Enumerations list the cases the backend and this module use, with Apple's
// raw values; Apple's are open (more cases), so a switch over one needs a
// default case here as there.
//
// What the emulator cannot be: Apple's shader compiler (it translates Metal
// Shading Language to C++ and compiles that with clang), a GPU (threads run on
// CPU cores), a source of real timestamps (gpuStartTime is the commit time,
// gpuEndTime adds the emulator's measured duration), and a metallib loader
// (makeLibrary(URL:) throws).
//
// Misuse that Apple's API validation layer stops (setBytes over 4 KiB,
// threadgroup memory lengths not a multiple of 16, a dispatch the emulator
// refuses, encoding after endEncoding, committing twice or before
// endEncoding) is written to stderr and fails the command buffer: its status
// becomes .error and its error says why, so a test sees it.
@_exported import Foundation
import CMlxNative

// MARK: - Values

/// https://developer.apple.com/documentation/metal/mtlsize
public struct MTLSize {
    /// https://developer.apple.com/documentation/metal/mtlsize/width
    public var width: Int
    /// https://developer.apple.com/documentation/metal/mtlsize/height
    public var height: Int
    /// https://developer.apple.com/documentation/metal/mtlsize/depth
    public var depth: Int

    /// https://developer.apple.com/documentation/metal/mtlsize/init(width:height:depth:)
    public init(width: Int, height: Int, depth: Int) {
        self.width = width
        self.height = height
        self.depth = depth
    }
}

/// https://developer.apple.com/documentation/metal/mtlresourceoptions
public struct MTLResourceOptions: OptionSet {
    /// https://developer.apple.com/documentation/metal/mtlresourceoptions/rawvalue
    public let rawValue: UInt
    /// https://developer.apple.com/documentation/metal/mtlresourceoptions/init(rawvalue:)
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// https://developer.apple.com/documentation/metal/mtlresourceoptions/storagemodeshared
    /// (MTLStorageModeShared << MTLResourceStorageModeShift: 0, the default.)
    public static let storageModeShared = MTLResourceOptions([])
}

/// https://developer.apple.com/documentation/metal/mtlpipelineoption
public struct MTLPipelineOption: OptionSet {
    /// https://developer.apple.com/documentation/metal/mtlpipelineoption/rawvalue
    public let rawValue: UInt
    /// https://developer.apple.com/documentation/metal/mtlpipelineoption/init(rawvalue:)
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// https://developer.apple.com/documentation/metal/mtlpipelineoption/bindinginfo
    public static let bindingInfo = MTLPipelineOption(rawValue: 1 << 0)
}

/// https://developer.apple.com/documentation/metal/mtlbarrierscope
public struct MTLBarrierScope: OptionSet {
    /// https://developer.apple.com/documentation/metal/mtlbarrierscope/rawvalue
    public let rawValue: UInt
    /// https://developer.apple.com/documentation/metal/mtlbarrierscope/init(rawvalue:)
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// https://developer.apple.com/documentation/metal/mtlbarrierscope/buffers
    public static let buffers = MTLBarrierScope(rawValue: 1 << 0)
}

/// https://developer.apple.com/documentation/metal/mtldatatype
public enum MTLDataType: UInt {
    /// https://developer.apple.com/documentation/metal/mtldatatype/float
    case float = 3
    /// https://developer.apple.com/documentation/metal/mtldatatype/half
    case half = 16
    /// https://developer.apple.com/documentation/metal/mtldatatype/int
    case int = 29
    /// https://developer.apple.com/documentation/metal/mtldatatype/uint
    case uint = 33
    /// https://developer.apple.com/documentation/metal/mtldatatype/short
    case short = 37
    /// https://developer.apple.com/documentation/metal/mtldatatype/ushort
    case ushort = 41
    /// https://developer.apple.com/documentation/metal/mtldatatype/bool
    case bool = 53
}

/// https://developer.apple.com/documentation/metal/mtllanguageversion
public enum MTLLanguageVersion: UInt {
    /// https://developer.apple.com/documentation/metal/mtllanguageversion/version3_1
    case version3_1 = 196609
}

/// https://developer.apple.com/documentation/metal/mtldispatchtype
public enum MTLDispatchType: UInt {
    /// https://developer.apple.com/documentation/metal/mtldispatchtype/serial
    case serial = 0
    /// https://developer.apple.com/documentation/metal/mtldispatchtype/concurrent
    case concurrent = 1
}

/// https://developer.apple.com/documentation/metal/mtlcommandbufferstatus
public enum MTLCommandBufferStatus: UInt {
    /// https://developer.apple.com/documentation/metal/mtlcommandbufferstatus/notenqueued
    case notEnqueued = 0
    /// https://developer.apple.com/documentation/metal/mtlcommandbufferstatus/committed
    case committed = 2
    /// https://developer.apple.com/documentation/metal/mtlcommandbufferstatus/completed
    case completed = 4
    /// https://developer.apple.com/documentation/metal/mtlcommandbufferstatus/error
    case error = 5
}

/// https://developer.apple.com/documentation/metal/mtlbindingtype
public enum MTLBindingType: Int {
    /// https://developer.apple.com/documentation/metal/mtlbindingtype/buffer
    case buffer = 0
    /// https://developer.apple.com/documentation/metal/mtlbindingtype/threadgroupmemory
    case threadgroupMemory = 1
}

// MARK: - Device

/// https://developer.apple.com/documentation/metal/mtlcreatesystemdefaultdevice()
/// The emulator's device, opened once; nil (with the reason on stderr, once)
/// when the emulator cannot be loaded or opened.
public func MTLCreateSystemDefaultDevice() -> MTLDevice? {
    EmulatedDevice.shared
}

/// https://developer.apple.com/documentation/metal/mtldevice
public protocol MTLDevice: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtldevice/name
    var name: String { get }
    /// https://developer.apple.com/documentation/metal/mtldevice/maxthreadsperthreadgroup
    var maxThreadsPerThreadgroup: MTLSize { get }
    /// https://developer.apple.com/documentation/metal/mtldevice/maxthreadgroupmemorylength
    var maxThreadgroupMemoryLength: Int { get }
    /// https://developer.apple.com/documentation/metal/mtldevice/maxbufferlength
    var maxBufferLength: Int { get }
    /// https://developer.apple.com/documentation/metal/mtldevice/makecommandqueue()
    func makeCommandQueue() -> MTLCommandQueue?
    /// https://developer.apple.com/documentation/metal/mtldevice/makebuffer(length:options:)
    func makeBuffer(length: Int, options: MTLResourceOptions) -> MTLBuffer?
    /// https://developer.apple.com/documentation/metal/mtldevice/makebuffer(bytes:length:options:)
    func makeBuffer(bytes pointer: UnsafeRawPointer, length: Int, options: MTLResourceOptions) -> MTLBuffer?
    /// https://developer.apple.com/documentation/metal/mtldevice/makelibrary(source:options:)
    func makeLibrary(source: String, options: MTLCompileOptions?) throws -> MTLLibrary
    /// https://developer.apple.com/documentation/metal/mtldevice/makelibrary(url:)
    func makeLibrary(URL url: URL) throws -> MTLLibrary
    /// https://developer.apple.com/documentation/metal/mtldevice/makecomputepipelinestate(function:options:reflection:)
    func makeComputePipelineState(
        function computeFunction: MTLFunction, options: MTLPipelineOption,
        reflection: UnsafeMutablePointer<MTLAutoreleasedComputePipelineReflection?>?
    ) throws -> MTLComputePipelineState
}

/// https://developer.apple.com/documentation/metal/mtlbuffer
public protocol MTLBuffer: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtlbuffer/contents()
    func contents() -> UnsafeMutableRawPointer
}

// MARK: - Libraries and pipelines

/// https://developer.apple.com/documentation/metal/mtlcompileoptions
open class MTLCompileOptions: NSObject {
    /// https://developer.apple.com/documentation/metal/mtlcompileoptions/languageversion
    /// The emulator reads Metal Shading Language as the backend writes it, 3.1.
    open var languageVersion: MTLLanguageVersion = .version3_1
    /// https://developer.apple.com/documentation/metal/mtlcompileoptions/fastmathenabled
    /// The emulator computes precise math either way (-ffp-contract=off).
    open var fastMathEnabled: Bool = true

    /// https://developer.apple.com/documentation/objectivec/nsobject/init() (inherited)
    public override init() {}
}

/// https://developer.apple.com/documentation/metal/mtlfunctionconstantvalues
open class MTLFunctionConstantValues: NSObject {
    /// Index -> (MLXN_CONST_* type, value bits), as the C ABI takes constants.
    var values: [Int: (type: UInt32, bits: UInt32)] = [:]

    /// https://developer.apple.com/documentation/objectivec/nsobject/init() (inherited)
    public override init() {}

    /// https://developer.apple.com/documentation/metal/mtlfunctionconstantvalues/setconstantvalue(_:type:index:)
    open func setConstantValue(_ value: UnsafeRawPointer, type: MTLDataType, index: Int) {
        switch type {
        case .bool: values[index] = (MLXN_CONST_BOOL, UInt32(value.load(as: UInt8.self) != 0 ? 1 : 0))
        case .int: values[index] = (MLXN_CONST_I32, value.loadUnaligned(as: UInt32.self))
        case .uint: values[index] = (MLXN_CONST_U32, value.loadUnaligned(as: UInt32.self))
        case .float: values[index] = (MLXN_CONST_F32, value.loadUnaligned(as: UInt32.self))
        case .half: values[index] = (MLXN_CONST_F16, UInt32(value.loadUnaligned(as: UInt16.self)))
        case .short: values[index] = (MLXN_CONST_I16, UInt32(value.loadUnaligned(as: UInt16.self)))
        case .ushort: values[index] = (MLXN_CONST_U16, UInt32(value.loadUnaligned(as: UInt16.self)))
        }
    }

    /// The header's 12-byte constant records, by index.
    var records: [UInt32] {
        values.keys.sorted().flatMap { [UInt32(truncatingIfNeeded: $0), values[$0]!.type, values[$0]!.bits] }
    }
}

/// https://developer.apple.com/documentation/metal/mtllibrary
public protocol MTLLibrary: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtllibrary/functionnames
    var functionNames: [String] { get }
    /// https://developer.apple.com/documentation/metal/mtllibrary/makefunction(name:constantvalues:)
    func makeFunction(name: String, constantValues: MTLFunctionConstantValues) throws -> MTLFunction
}

/// https://developer.apple.com/documentation/metal/mtlfunction
public protocol MTLFunction: AnyObject {}

/// https://developer.apple.com/documentation/metal/mtlbinding
public protocol MTLBinding: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtlbinding/type
    var type: MTLBindingType { get }
    /// https://developer.apple.com/documentation/metal/mtlbinding/index
    var index: Int { get }
}

/// https://developer.apple.com/documentation/metal/mtlcomputepipelinereflection
open class MTLComputePipelineReflection: NSObject {
    /// https://developer.apple.com/documentation/metal/mtlcomputepipelinereflection/bindings
    public let bindings: [MTLBinding]

    init(bindings: [MTLBinding]) {
        self.bindings = bindings
    }
}

/// https://developer.apple.com/documentation/metal/mtlautoreleasedcomputepipelinereflection
public typealias MTLAutoreleasedComputePipelineReflection = MTLComputePipelineReflection

/// https://developer.apple.com/documentation/metal/mtlcomputepipelinestate
public protocol MTLComputePipelineState: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtlcomputepipelinestate/maxtotalthreadsperthreadgroup
    var maxTotalThreadsPerThreadgroup: Int { get }
    /// https://developer.apple.com/documentation/metal/mtlcomputepipelinestate/staticthreadgroupmemorylength
    var staticThreadgroupMemoryLength: Int { get }
}

// MARK: - Commands

/// https://developer.apple.com/documentation/metal/mtlcommandqueue
public protocol MTLCommandQueue: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtlcommandqueue/makecommandbuffer()
    func makeCommandBuffer() -> MTLCommandBuffer?
}

/// https://developer.apple.com/documentation/metal/mtlcommandbuffer
public protocol MTLCommandBuffer: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtlcommandbuffer/status
    var status: MTLCommandBufferStatus { get }
    /// https://developer.apple.com/documentation/metal/mtlcommandbuffer/error
    var error: Error? { get }
    /// https://developer.apple.com/documentation/metal/mtlcommandbuffer/gpustarttime
    var gpuStartTime: Double { get }
    /// https://developer.apple.com/documentation/metal/mtlcommandbuffer/gpuendtime
    var gpuEndTime: Double { get }
    /// https://developer.apple.com/documentation/metal/mtlcommandbuffer/makecomputecommandencoder(dispatchtype:)
    func makeComputeCommandEncoder(dispatchType: MTLDispatchType) -> MTLComputeCommandEncoder?
    /// https://developer.apple.com/documentation/metal/mtlcommandbuffer/commit()
    func commit()
    /// https://developer.apple.com/documentation/metal/mtlcommandbuffer/waituntilcompleted()
    func waitUntilCompleted()
}

/// https://developer.apple.com/documentation/metal/mtlcommandencoder
public protocol MTLCommandEncoder: AnyObject {
    /// https://developer.apple.com/documentation/metal/mtlcommandencoder/endencoding()
    func endEncoding()
}

/// https://developer.apple.com/documentation/metal/mtlcomputecommandencoder
public protocol MTLComputeCommandEncoder: MTLCommandEncoder {
    /// https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/setcomputepipelinestate(_:)
    func setComputePipelineState(_ state: MTLComputePipelineState)
    /// https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/setbuffer(_:offset:index:)
    func setBuffer(_ buffer: MTLBuffer?, offset: Int, index: Int)
    /// https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/setbytes(_:length:index:)
    func setBytes(_ bytes: UnsafeRawPointer, length: Int, index: Int)
    /// https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/setthreadgroupmemorylength(_:index:)
    func setThreadgroupMemoryLength(_ length: Int, index: Int)
    /// https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/dispatchthreadgroups(_:threadsperthreadgroup:)
    func dispatchThreadgroups(_ threadgroupsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize)
    /// https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/memorybarrier(scope:)
    func memoryBarrier(scope: MTLBarrierScope)
}
