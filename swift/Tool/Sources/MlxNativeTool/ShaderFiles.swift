// Finding the kernel families of a shaders directory, their programs, and the
// kernel entry points they declare.
import ArgumentParser
import Foundation

/// The prelude of every family's Metal program (shaders/common.metal).
let metalPrelude = "common.metal"
/// The param structs of several families (shaders/common.h), in every program after the prelude.
let commonHeader = "common.h"

/// One kernel family of a shaders directory: `<name>.metal` and the program
/// the library compiles for it.
struct ShaderFamily {
    let name: String
    let file: URL
    /// As the TypeScript registry joins it (ts/registry.ts, familySources and
    /// joinSources), byte for byte: the prelude common.metal, common.h, the
    /// family header <name>.h when there is one, then <name>.metal, each file
    /// after a `#line 1 "<file>"` line and followed by a newline.
    let source: String
}

/// The families of `directory` (every `.metal` file but the prelude), sorted by name.
func metalFamilies(in directory: String) throws -> [ShaderFamily] {
    let dir = URL(fileURLWithPath: directory, isDirectory: true)
    let names: [String]
    do {
        names = try FileManager.default.contentsOfDirectory(atPath: dir.path)
    } catch {
        throw ValidationError("cannot list \(directory): \(error.localizedDescription)")
    }
    let prelude = try readSource(dir.appendingPathComponent(metalPrelude))
    let common = try readSource(dir.appendingPathComponent(commonHeader))
    return try names.filter { $0.hasSuffix(".metal") && $0 != metalPrelude }.sorted().map { fileName in
        let family = String(fileName.dropLast(".metal".count))
        var files = [(metalPrelude, prelude), (commonHeader, common)]
        if names.contains(family + ".h") {
            files.append((family + ".h", try readSource(dir.appendingPathComponent(family + ".h"))))
        }
        let file = dir.appendingPathComponent(fileName)
        files.append((fileName, try readSource(file)))
        let source = files.map { "#line 1 \"\($0.0)\"\n\($0.1)\n" }.joined()
        return ShaderFamily(name: family, file: file, source: source)
    }
}

func readSource(_ file: URL) throws -> String {
    do {
        return try String(contentsOf: file, encoding: .utf8)
    } catch {
        throw ValidationError("cannot read \(file.path): \(error.localizedDescription)")
    }
}

/// `source` with comments replaced by spaces (newlines kept, so offsets and
/// line numbers stay put). String literals are kept as they are.
func stripComments(_ source: String) -> String {
    var out: [Character] = []
    let chars = Array(source)
    var i = 0
    while i < chars.count {
        let c = chars[i]
        let next: Character? = i + 1 < chars.count ? chars[i + 1] : nil
        if c == "/" && next == "/" {
            while i < chars.count && chars[i] != "\n" { out.append(" "); i += 1 }
        } else if c == "/" && next == "*" {
            out.append(" "); out.append(" "); i += 2
            while i < chars.count && !(chars[i] == "*" && i + 1 < chars.count && chars[i + 1] == "/") {
                out.append(chars[i] == "\n" ? "\n" : " "); i += 1
            }
            if i < chars.count { out.append(" "); out.append(" "); i += 2 }
        } else if c == "\"" {
            out.append(c); i += 1
            while i < chars.count && chars[i] != "\"" && chars[i] != "\n" {
                if chars[i] == "\\" && i + 1 < chars.count { out.append(chars[i]); i += 1 }
                out.append(chars[i]); i += 1
            }
            if i < chars.count { out.append(chars[i]); i += 1 }
        } else {
            out.append(c); i += 1
        }
    }
    return String(out)
}

private func captures(_ pattern: String, in text: String) -> [(String, Range<String.Index>)] {
    guard let regex = try? NSRegularExpression(pattern: pattern) else { return [] }
    let range = NSRange(text.startIndex..., in: text)
    return regex.matches(in: text, range: range).compactMap { m in
        guard let r = Range(m.range(at: 1), in: text), let whole = Range(m.range, in: text) else { return nil }
        return (String(text[r]), whole)
    }
}

/// The kernel entry points of a Metal source, in source order: every
/// `[[host_name("NAME")]]`, and every `kernel void NAME(` that is not a
/// template (a template is only an entry through its host_name instantiations).
/// The same rule as tests/contract-kernels.test.ts.
func kernelEntries(_ source: String) -> [String] {
    let code = stripComments(source)
    var found: [(String.Index, String)] = []
    for (name, range) in captures(#"\[\[\s*host_name\s*\(\s*"([^"]+)"\s*\)\s*\]\]"#, in: code) {
        found.append((range.lowerBound, name))
    }
    for (name, range) in captures(#"(?:\bkernel|\[\[\s*kernel\s*\]\])\s+void\s+([A-Za-z_]\w*)\s*\("#, in: code) {
        let before = code[..<range.lowerBound]
        let isTemplate = before.range(of: #"template\s*<[^;{}]*>\s*$"#, options: .regularExpression) != nil
        if !isTemplate { found.append((range.lowerBound, name)) }
    }
    return found.sorted { $0.0 < $1.0 }.map { $0.1 }
}
