// swift-tools-version: 5.9
//
// The metal backend of mlx-native: a dynamic library that exports the C ABI of
// native/include/mlx_native.h over Metal. No outside dependency, so it builds
// and tests offline (CI on Linux); the command-line tool is its own package,
// Tool/Package.swift, which depends on this one.
//
// The header lives once, in native/include/. The C target CMlxNative holds a
// symbolic link to it (Sources/CMlxNative/include/mlx_native.h ->
// ../../../../native/include/mlx_native.h), committed to git, so the Swift code
// compiles against the very file that the emulator, the CUDA backend and the
// TypeScript loader use: a copy could drift, a link cannot. The explicit
// module.modulemap next to it names that header, so no umbrella-directory
// module map is generated and nothing else is pulled in. Swift imports the
// header for its constants (status codes, limit keys, binding kinds); the
// functions it declares are defined by the @_cdecl functions of MlxNative.
//
// On Linux there is no Metal framework. There the package has a target named
// Metal (Sources/Metal) that declares the part of Apple's Metal API that
// MlxNative uses, with Apple's signatures, and runs it on the CPU emulator
// (build/emu/libmlx_native_emu.so, loaded at run time). That target exists in
// this manifest only when it is evaluated on Linux, so on macOS nothing can
// shadow Apple's Metal.
import PackageDescription

#if os(Linux)
// dladdr and Dl_info come from glibc's <dlfcn.h> only with _GNU_SOURCE.
let cSettings: [SwiftSetting] = [.unsafeFlags(["-Xcc", "-D_GNU_SOURCE"])]
let metalTargets: [Target] = [
    .target(name: "Metal", dependencies: ["CMlxNative"], swiftSettings: cSettings),
]
let metalDependency: [Target.Dependency] = [.target(name: "Metal", condition: .when(platforms: [.linux]))]
#else
let metalTargets: [Target] = []
let metalDependency: [Target.Dependency] = []
let cSettings: [SwiftSetting] = []
#endif

let package = Package(
    name: "MlxNative",
    platforms: [.macOS(.v14)],  // MTLLanguageVersion.version3_1 (bfloat) needs macOS 14.
    products: [
        .library(name: "MlxNative", type: .dynamic, targets: ["MlxNative"]),
        // The header's constants, for the tool (Tool/Package.swift).
        .library(name: "CMlxNative", targets: ["CMlxNative"]),
    ],
    targets: metalTargets + [
        .target(name: "CMlxNative"),
        .target(
            name: "MlxNative",
            dependencies: ["CMlxNative"] + metalDependency,
            swiftSettings: cSettings,
            linkerSettings: [
                .linkedFramework("Metal", .when(platforms: [.macOS])),
                .linkedFramework("Foundation", .when(platforms: [.macOS])),
            ]
        ),
        .testTarget(name: "MlxNativeTests", dependencies: ["CMlxNative", "MlxNative"] + metalDependency,
                    swiftSettings: cSettings),
    ]
)
