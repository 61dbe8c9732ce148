// swift-tools-version: 5.9
//
// The metal backend of mlx-native: a dynamic library that exports the C ABI of
// native/include/mlx_native.h over Metal, and a command-line tool that inspects
// the device and checks the shaders.
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
import PackageDescription

let package = Package(
    name: "MlxNative",
    platforms: [.macOS(.v14)],  // MTLLanguageVersion.version3_1 (bfloat) needs macOS 14.
    products: [
        .library(name: "MlxNative", type: .dynamic, targets: ["MlxNative"]),
        .executable(name: "mlx-native", targets: ["MlxNativeTool"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.3.0"),
    ],
    targets: [
        .target(name: "CMlxNative"),
        .target(
            name: "MlxNative",
            dependencies: ["CMlxNative"],
            linkerSettings: [.linkedFramework("Metal"), .linkedFramework("Foundation")]
        ),
        .executableTarget(
            name: "MlxNativeTool",
            dependencies: [
                "MlxNative",
                "CMlxNative",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "MlxNativeTests", dependencies: ["MlxNative", "CMlxNative"]),
    ]
)
