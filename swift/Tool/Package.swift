// swift-tools-version: 5.9
//
// mlx-native, the command-line tool of the metal backend: inspects the device
// and checks the shaders with Apple's compiler (macOS only). It is a package of
// its own so that the library package (swift/Package.swift) has no outside
// dependency and builds offline; this one fetches swift-argument-parser.
// It links the library's dynamic product, libMlxNative.dylib, from the package
// one folder up; SwiftPM names a package given by path after its folder, so
// that package is "swift" here.
import PackageDescription

let package = Package(
    name: "MlxNativeTool",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "mlx-native", targets: ["MlxNativeTool"]),
    ],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.3.0"),
    ],
    targets: [
        .executableTarget(
            name: "MlxNativeTool",
            dependencies: [
                .product(name: "MlxNative", package: "swift"),
                .product(name: "CMlxNative", package: "swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ]
)
