//! The RCCL patch series (patches/) without RCCL: every patch parses as a
//! `git format-patch` mail with consistent hunks, touches only the files this
//! table expects, adds GIN type 8 as shared/reference/contracts.md fixes it,
//! and its device header compiles for the GPU against minimal stand-ins of the
//! RCCL types (tests/fixtures/rccl_stubs/), every specialisation instantiated.
//! The header's copy of the device ABI is compared, declaration by
//! declaration, with device/include/rust_gin/rust_gin_device.h and abi/; the
//! comparison is shown to catch a change on either side.
//!
//! Applying the series to a real RCCL checkout is a separate target,
//! tests/patch_series_rccl_src.rs, reported as ignored without RCCL_SRC.

#[path = "support/scratch.rs"]
mod scratch;

use scratch::{text, TempDir};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Contract values (shared/reference/contracts.md): the GIN type and the new
/// NCCL_GIN_MAX_TYPES.
const GIN_TYPE_RUST: u32 = 8;
const GIN_MAX_TYPES: u32 = 9;
/// The host vtable symbols that librccl_rust_gin.a exports: v14 for the pinned
/// RCCL, v15 for a tree that syncs NCCL 2.32 (patch 0003 picks).
const HOST_VTABLE: &str = "ncclGinRustPlugin_v14";
const HOST_VTABLE_V15: &str = "ncclGinRustPlugin_v15";

/// Which files each patch may touch (paths relative to the rocm-systems root).
const EXPECTED_FILES: &[(&str, &[&str])] = &[
    ("0001", &["projects/rccl/src/include/nccl_device/core.h", "projects/rccl/src/include/nccl_device/net_device.h"]),
    ("0002", &["projects/rccl/src/gin/gin_host.cc"]),
    ("0003", &["projects/rccl/src/plugin/gin.cc"]),
    (
        "0004",
        &[
            "projects/rccl/src/CMakeLists.txt",
            "projects/rccl/src/include/nccl_device/gin/gin_device_api.h",
            "projects/rccl/src/include/nccl_device/gin/gin_device_common.h",
            "projects/rccl/src/include/nccl_device/gin/rust/gin_rust.h",
            "projects/rccl/src/include/nccl_device/gin/rust/gin_rust_device_abi.h",
            "projects/rccl/src/include/nccl_device/impl/gin__funcs.h",
        ],
    ),
    (
        "0005",
        &[
            "projects/rccl/CMakeLists.txt",
            "projects/rccl/cmake/DeviceLinker.cmake",
            "projects/rccl/cmake/RustGin.cmake",
            "projects/rccl/src/CMakeLists.txt",
        ],
    ),
    ("0006", &["projects/rccl/install.sh"]),
    ("0007", &["projects/rccl/test/host/CMakeLists.txt", "projects/rccl/test/host/gin-host-version-test.cc"]),
    ("0008", &["projects/rccl/docs/how-to/device-api-gin.rst", "projects/rccl/src/gin/README.md"]),
];

const NEW_DEVICE_HEADER: &str = "projects/rccl/src/include/nccl_device/gin/rust/gin_rust.h";
const NEW_ABI_HEADER: &str = "projects/rccl/src/include/nccl_device/gin/rust/gin_rust_device_abi.h";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// Parsing a format-patch mail
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct Hunk {
    old_start: usize,
    new_start: usize,
    lines: Vec<String>,
}

#[derive(Debug)]
struct FileDiff {
    path: String,
    new_file: bool,
    /// The index line's blob ids (abbreviated): the pre-image the patch
    /// claims to apply to, and the post-image it makes.
    pre: String,
    post: String,
    hunks: Vec<Hunk>,
}

impl FileDiff {
    fn added(&self) -> Vec<&str> {
        self.lines_with('+')
    }
    fn removed(&self) -> Vec<&str> {
        self.lines_with('-')
    }
    fn lines_with(&self, sign: char) -> Vec<&str> {
        self.hunks.iter().flat_map(|h| h.lines.iter()).filter_map(|l| l.strip_prefix(sign)).collect()
    }
    /// The content of a file the patch creates.
    fn new_content(&self) -> String {
        assert!(self.new_file, "{} is not a new file", self.path);
        let mut s = String::new();
        for l in self.added() {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

#[derive(Debug)]
struct Patch {
    name: String,
    subject: String,
    body: String,
    files: Vec<FileDiff>,
}

impl Patch {
    fn file(&self, path: &str) -> &FileDiff {
        self.files.iter().find(|f| f.path == path).unwrap_or_else(|| panic!("{}: no diff for {path}", self.name))
    }
}

fn parse_range(s: &str) -> Result<(usize, usize), String> {
    let (start, count) = match s.split_once(',') {
        Some((a, b)) => (a, b),
        None => (s, "1"),
    };
    Ok((
        start.parse().map_err(|_| format!("bad range start {s:?}"))?,
        count.parse().map_err(|_| format!("bad range count {s:?}"))?,
    ))
}

/// Parses one `git format-patch` mail. Errors name the patch and the line.
fn parse_patch(name: &str, text: &str) -> Result<Patch, String> {
    let err = |n: usize, what: &str| format!("{name}:{}: {what}", n + 1);
    let lines: Vec<&str> = text.lines().collect();
    if !lines.first().is_some_and(|l| l.starts_with("From ") && l.ends_with("Mon Sep 17 00:00:00 2001")) {
        return Err(err(0, "not a format-patch mail (no 'From <sha> Mon Sep 17 00:00:00 2001' line)"));
    }
    let mut i = 1;
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    let mut last: Option<String> = None;
    while i < lines.len() && !lines[i].is_empty() {
        let l = lines[i];
        if l.starts_with(' ') {
            // A folded header line continues the previous header.
            let key = last.clone().ok_or_else(|| err(i, "continuation before any header"))?;
            headers.get_mut(&key).unwrap().push_str(l);
        } else {
            let (k, v) = l.split_once(": ").ok_or_else(|| err(i, "bad header line"))?;
            headers.insert(k.to_string(), v.to_string());
            last = Some(k.to_string());
        }
        i += 1;
    }
    for h in ["From", "Date", "Subject"] {
        if !headers.contains_key(h) {
            return Err(err(i, &format!("missing {h}: header")));
        }
    }
    let subject = headers["Subject"].clone();
    i += 1;
    let body_start = i;
    while i < lines.len() && lines[i] != "---" {
        i += 1;
    }
    if i == lines.len() {
        return Err(err(i, "no '---' line after the commit message"));
    }
    let body = lines[body_start..i].join("\n");
    while i < lines.len() && !lines[i].starts_with("diff --git ") {
        i += 1;
    }
    // A signature ("-- " and the git version) may close the mail.
    let end = lines.iter().rposition(|l| *l == "-- ").filter(|&e| e > i).unwrap_or(lines.len());
    let lines = &lines[..end];
    let mut files = Vec::new();
    while i < lines.len() {
        let l = lines[i];
        let rest = l.strip_prefix("diff --git a/").ok_or_else(|| err(i, "expected 'diff --git'"))?;
        let (a, b) = rest.split_once(" b/").ok_or_else(|| err(i, "bad diff --git line"))?;
        if a != b {
            return Err(err(i, "renames are not expected"));
        }
        let path = a.to_string();
        i += 1;
        let mut new_file = false;
        let mut saw_index = false;
        let (mut pre, mut post) = (String::new(), String::new());
        while i < lines.len() && !lines[i].starts_with("--- ") {
            let h = lines[i];
            if h.starts_with("new file mode ") {
                new_file = true;
            } else if let Some(ids) = h.strip_prefix("index ") {
                let ids = ids.split(' ').next().unwrap();
                let (a, b) = ids.split_once("..").ok_or_else(|| err(i, "bad index line"))?;
                (pre, post) = (a.to_string(), b.to_string());
                saw_index = true;
            } else if h.starts_with("deleted file mode") || h.starts_with("old mode") || h.starts_with("new mode") {
                return Err(err(i, &format!("unexpected extended header {h:?}")));
            } else {
                return Err(err(i, &format!("unknown extended header {h:?}")));
            }
            i += 1;
        }
        if !saw_index {
            return Err(err(i, "no index line"));
        }
        let minus = lines.get(i).ok_or_else(|| err(i, "missing --- line"))?;
        let expect_minus = if new_file { "--- /dev/null".to_string() } else { format!("--- a/{path}") };
        if *minus != expect_minus {
            return Err(err(i, &format!("expected {expect_minus:?}, got {minus:?}")));
        }
        i += 1;
        let plus = lines.get(i).ok_or_else(|| err(i, "missing +++ line"))?;
        if *plus != format!("+++ b/{path}") {
            return Err(err(i, &format!("bad +++ line {plus:?}")));
        }
        i += 1;
        let mut hunks = Vec::new();
        while i < lines.len() && lines[i].starts_with("@@ ") {
            let header = lines[i];
            let inner = header
                .strip_prefix("@@ -")
                .and_then(|r| r.split_once(" @@"))
                .map(|(r, _)| r)
                .ok_or_else(|| err(i, "bad hunk header"))?;
            let (old, new) = inner.split_once(" +").ok_or_else(|| err(i, "bad hunk header"))?;
            let (old_start, old_count) = parse_range(old).map_err(|e| err(i, &e))?;
            let (new_start, new_count) = parse_range(new).map_err(|e| err(i, &e))?;
            let at = i;
            i += 1;
            let (mut o, mut n) = (0, 0);
            let mut body = Vec::new();
            while i < lines.len() && (o < old_count || n < new_count) {
                let h = lines[i];
                match h.chars().next() {
                    Some(' ') => {
                        o += 1;
                        n += 1
                    }
                    Some('-') => o += 1,
                    Some('+') => n += 1,
                    Some('\\') => {}
                    None => return Err(err(i, "empty line inside a hunk (a context line lost its space)")),
                    _ => return Err(err(i, &format!("bad hunk line {h:?}"))),
                }
                body.push(h.to_string());
                i += 1;
            }
            if o != old_count || n != new_count {
                return Err(err(
                    at,
                    &format!("hunk {header:?} announces -{old_count} +{new_count} lines, has -{o} +{n}"),
                ));
            }
            while i < lines.len() && lines[i].starts_with('\\') {
                i += 1;
            }
            if new_file && (old_start, old_count) != (0, 0) {
                return Err(err(at, "a new file's hunk must start at -0,0"));
            }
            hunks.push(Hunk { old_start, new_start, lines: body });
        }
        if hunks.is_empty() {
            return Err(err(i, &format!("{path}: no hunks")));
        }
        // Hunks in order and not overlapping.
        for w in hunks.windows(2) {
            if w[1].old_start <= w[0].old_start || w[1].new_start <= w[0].new_start {
                return Err(format!("{name}: {path}: hunks out of order"));
            }
        }
        files.push(FileDiff { path, new_file, pre, post, hunks });
        // Anything between file diffs other than the next diff is an error,
        // except trailing blank lines at the very end.
        while i < lines.len() && lines[i].is_empty() {
            i += 1;
        }
    }
    Ok(Patch { name: name.to_string(), subject, body, files })
}

fn series_names() -> Vec<String> {
    read(&root().join("patches/series"))
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn series() -> Vec<Patch> {
    series_names()
        .iter()
        .map(|n| parse_patch(n, &read(&root().join("patches").join(n))).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

fn patch<'a>(all: &'a [Patch], number: &str) -> &'a Patch {
    all.iter().find(|p| p.name.starts_with(number)).unwrap_or_else(|| panic!("no patch {number}"))
}

#[test]
fn series_file_lists_every_patch_in_order() {
    let listed = series_names();
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("patches"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".patch"))
        .collect();
    on_disk.sort();
    assert_eq!(listed, on_disk, "patches/series must list every .patch file, in order");
    for (i, name) in listed.iter().enumerate() {
        assert!(name.starts_with(&format!("{:04}-", i + 1)), "{name} is not number {}", i + 1);
    }
    assert_eq!(listed.len(), EXPECTED_FILES.len(), "the table of expected files covers every patch");
}

#[test]
fn every_patch_parses_with_a_message_that_says_why() {
    let all = series();
    let n = all.len();
    for (i, p) in all.iter().enumerate() {
        let tag = format!("[PATCH {}/{n}] ", i + 1);
        assert!(p.subject.starts_with(&tag), "{}: subject {:?} should start with {tag:?}", p.name, p.subject);
        let words = p.body.split_whitespace().count();
        assert!(words >= 30, "{}: the commit message says too little ({words} words) about why", p.name);
        assert!(!p.files.is_empty(), "{}: no diffs", p.name);
    }
}

#[test]
fn hunk_parser_rejects_inconsistent_counts() {
    let good = read(&root().join("patches").join(&series_names()[0]));
    parse_patch("good", &good).unwrap();
    // One context line dropped from a hunk: the announced count no longer holds.
    let mut lines: Vec<&str> = good.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("@@ ")).unwrap() + 1;
    lines.remove(at);
    let broken = lines.join("\n");
    let e = parse_patch("broken", &broken).unwrap_err();
    assert!(e.contains("announces") || e.contains("bad hunk line"), "{e}");
}

#[test]
fn every_patch_touches_only_its_expected_files() {
    let all = series();
    for (number, files) in EXPECTED_FILES {
        let p = patch(&all, number);
        let mut got: Vec<&str> = p.files.iter().map(|f| f.path.as_str()).collect();
        got.sort();
        let mut want: Vec<&str> = files.to_vec();
        want.sort();
        assert_eq!(got, want, "{}: touches other files than expected", p.name);
    }
}

#[test]
fn series_adds_gin_type_8_and_raises_max_types_to_9() {
    let all = series();
    let p = patch(&all, "0001");
    let core = p.file("projects/rccl/src/include/nccl_device/core.h");
    let net = p.file("projects/rccl/src/include/nccl_device/net_device.h");
    let has = |lines: &[&str], needle: &str| lines.iter().any(|l| l.split("//").next().unwrap().trim() == needle);
    // The number is written once, in net_device.h; both enums take it from there.
    assert!(has(&net.added(), &format!("#define RUST_GIN_TYPE {GIN_TYPE_RUST}")), "net_device.h: the number");
    assert!(has(&core.added(), "NCCL_GIN_TYPE_RUST = RUST_GIN_TYPE,"), "core.h: type from the one definition");
    assert!(has(&net.added(), "NCCL_NET_DEVICE_GIN_RUST = RUST_GIN_TYPE,"), "net_device.h: type");
    assert!(
        has(
            &core.added(),
            "NCCL_GIN_MAX_TYPES = (RUST_GIN_TYPE > NCCL_GIN_TYPE_ANVIL_SDMA ? RUST_GIN_TYPE : NCCL_GIN_TYPE_ANVIL_SDMA) + 1,"
        ),
        "core.h: max types follows the largest type"
    );
    assert!(has(&core.removed(), &format!("NCCL_GIN_MAX_TYPES = {},", GIN_MAX_TYPES - 1)), "core.h: old max");
    assert!(has(&core.added(), "#include \"net_device.h\""), "core.h sees the number");
    // The device backend mask is a 32-bit unsigned, the support mask 64 bits.
    assert!(GIN_TYPE_RUST < 32 && GIN_TYPE_RUST < GIN_MAX_TYPES);

    let host = patch(&all, "0002").file("projects/rccl/src/gin/gin_host.cc").added().join("\n");
    assert!(host.contains("case NCCL_GIN_TYPE_RUST:"), "gin_host.cc: no case for type 8");
    assert!(host.contains("const int rustGinBackendMinVersions[] = {0};"), "gin_host.cc: version-less table");

    let plugin = patch(&all, "0003").file("projects/rccl/src/plugin/gin.cc").added().join("\n");
    assert!(plugin.contains(&format!("extern \"C\" ncclGin_v14_t {HOST_VTABLE};")), "gin.cc: vtable declaration");
    assert!(plugin.contains(&format!("extern \"C\" ncclGin_v15_t {HOST_VTABLE_V15};")), "gin.cc: v15 declaration");
    assert!(plugin.contains("pluginLibs[pluginCounter].ncclGin = &RUST_GIN_HOST_PLUGIN;"), "gin.cc: registration");
    assert!(plugin.contains("case NCCL_GIN_TYPE_RUST:"), "gin.cc: priority case");
    assert!(plugin.contains("#ifdef ENABLE_RUST_GIN"), "gin.cc: gated on ENABLE_RUST_GIN");

    let p4 = patch(&all, "0004");
    let common = p4.file("projects/rccl/src/include/nccl_device/gin/gin_device_common.h").added().join("\n");
    assert!(common.contains("case (int)NCCL_NET_DEVICE_GIN_RUST:"), "no case in ncclGinCallImpl");
    assert!(common.contains("<< (unsigned)NCCL_NET_DEVICE_GIN_RUST"), "no mask bit");
    assert!(common.contains("defined(__HIP_PLATFORM_AMD__) && defined(ENABLE_RUST_GIN)"), "enable macro");
    let api = p4.file("projects/rccl/src/include/nccl_device/gin/gin_device_api.h").added().join("\n");
    assert!(api.contains("#include \"rust/gin_rust.h\""), "gin_device_api.h: include");

    let build = patch(&all, "0005");
    let cmake = build.file("projects/rccl/cmake/RustGin.cmake").new_content();
    for needle in ["build --release --locked", "HIP_CLANG=", "GPU_TARGETS=", "librccl_rust_gin.a", "FATAL_ERROR"] {
        assert!(cmake.contains(needle), "RustGin.cmake lacks {needle:?}");
    }
    let dl = build.file("projects/rccl/cmake/DeviceLinker.cmake").added().join("\n");
    assert!(dl.contains("librccl_rust_gin_device_${DL_GPU_TARGET}.bc"), "DeviceLinker: per-arch bitcode");
    let install = patch(&all, "0006").file("projects/rccl/install.sh").added().join("\n");
    assert!(install.contains("-DENABLE_RUST_GIN=ON") && install.contains("--rust-gin) build_rust_gin=true"), "install.sh --rust-gin");
}

#[test]
fn device_header_checks_the_abi_version_it_was_written_for() {
    let all = series();
    let header = patch(&all, "0004").file(NEW_DEVICE_HEADER).new_content();
    let crate_version =
        define_value(&read(&root().join("device/include/rust_gin/abi/gin.h")), "RUST_GIN_DEVICE_ABI_VERSION");
    assert_eq!(
        define_value(&header, "NCCL_GIN_RUST_DEVICE_ABI_VERSION"),
        crate_version,
        "gin_rust.h was written for another device ABI version than the crate's"
    );
    assert!(header.contains("static_assert(RUST_GIN_DEVICE_ABI_VERSION == NCCL_GIN_RUST_DEVICE_ABI_VERSION"));
    assert!(header.contains("static_assert(sizeof(rust_gin_request) <= sizeof(ncclGinRequest_t)"));
    assert!(!header.contains("__builtin_trap"), "no specialisation may trap");
}

// ---------------------------------------------------------------------------
// The device ABI: the patch's mirror against the crate's headers
// ---------------------------------------------------------------------------

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn squash(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    s.replace(" *", "*").replace("* ", "*").replace("( ", "(").replace(" )", ")")
}

fn define_value(text: &str, name: &str) -> String {
    strip_comments(text)
        .lines()
        .find_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t.len() >= 3 && t[0] == "#define" && t[1] == name).then(|| t[2..].join(" "))
        })
        .unwrap_or_else(|| panic!("no #define {name}"))
}

/// One declaration: return type and parameter types, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decl {
    ret: String,
    params: Vec<String>,
}

/// Top-level statements (split at ';' outside braces), preprocessor lines removed.
fn statements(text: &str) -> Vec<String> {
    let code: String =
        strip_comments(text).lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0i32;
    for c in code.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ';' && depth == 0 {
            out.push(squash(&cur));
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    out
}

const QUALIFIERS: &[&str] = &["RG_EXTERN_C", "RG_DEV", "extern \"C\"", "__device__", "__attribute__((device))"];

/// The `rust_gin_*` function declarations of a header.
fn function_decls(text: &str) -> BTreeMap<String, Decl> {
    let mut out = BTreeMap::new();
    for st in statements(text) {
        if st.contains('{') || st.starts_with("typedef") || st.starts_with("enum") || st.starts_with("struct") {
            continue;
        }
        let Some(open) = st.find('(') else { continue };
        let head = &st[..open];
        let Some(name) = head.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|t| !t.is_empty()).next_back()
        else {
            continue;
        };
        if !name.starts_with("rust_gin_") {
            continue;
        }
        let mut ret = head[..head.len() - name.len()].to_string();
        for q in QUALIFIERS {
            ret = ret.replace(q, " ");
        }
        let close = st.rfind(')').expect("a declaration's ')'");
        let params = st[open + 1..close]
            .split(',')
            .map(|p| param_type(p.trim()))
            .filter(|p| !p.is_empty() && p != "void")
            .collect();
        let prev = out.insert(name.to_string(), Decl { ret: squash(&ret), params });
        assert!(prev.is_none(), "{name} declared twice");
    }
    out
}

/// A parameter's type: the parameter without its name.
fn param_type(p: &str) -> String {
    let p = squash(p);
    let cut = p.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_');
    if cut.is_empty() || cut.ends_with(' ') || cut.ends_with('*') || cut.ends_with('&') {
        // `type name` or `type* name`: drop the name (a lone type has no name to drop).
        let t = squash(cut);
        if t.is_empty() {
            p
        } else {
            t
        }
    } else {
        p
    }
}

/// `typedef struct name { fields } name;` bodies, as (type, field) lists.
fn struct_fields(text: &str) -> BTreeMap<String, Vec<String>> {
    let code = strip_comments(text);
    let mut out = BTreeMap::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("typedef struct ") {
        rest = &rest[at + "typedef struct ".len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let (Some(open), Some(close)) = (rest.find('{'), rest.find('}')) else { break };
        let fields = rest[open + 1..close].split(';').map(squash).filter(|f| !f.is_empty()).collect();
        out.insert(name, fields);
        rest = &rest[close..];
    }
    out
}

/// `RUST_GIN_* = value` enumerators.
fn enum_constants(text: &str) -> BTreeMap<String, String> {
    let code = strip_comments(text);
    let mut out = BTreeMap::new();
    for piece in code.split([',', '{', '}', ';']) {
        if let Some((k, v)) = piece.split_once('=') {
            let k = k.trim();
            if k.starts_with("RUST_GIN_") && !k.contains(' ') {
                out.insert(k.to_string(), squash(v));
            }
        }
    }
    out
}

struct AbiSides {
    /// device/include/rust_gin/rust_gin_device.h
    crate_functions: String,
    /// device/include/rust_gin/abi/gin.h and abi/error.h
    crate_types: String,
    /// The patch's gin_rust_device_abi.h
    mirror: String,
}

fn abi_sides() -> AbiSides {
    let inc = root().join("device/include/rust_gin");
    let all = series();
    AbiSides {
        crate_functions: read(&inc.join("rust_gin_device.h")),
        crate_types: read(&inc.join("abi/gin.h")) + "\n" + &read(&inc.join("abi/error.h")),
        mirror: patch(&all, "0004").file(NEW_ABI_HEADER).new_content(),
    }
}

/// Every difference between the patch's mirror and the crate's headers.
fn abi_differences(s: &AbiSides) -> Vec<String> {
    let mut diffs = Vec::new();
    let ours = function_decls(&s.crate_functions);
    let theirs = function_decls(&s.mirror);
    if ours.len() < 10 {
        diffs.push(format!("rust_gin_device.h: only {} declarations found; the parser is lost", ours.len()));
    }
    for (name, d) in &ours {
        match theirs.get(name) {
            None => diffs.push(format!("{name}: in rust_gin_device.h, missing from the patch")),
            Some(t) if t != d => diffs.push(format!("{name}: rust_gin_device.h has {d:?}, the patch has {t:?}")),
            Some(_) => {}
        }
    }
    for name in theirs.keys().filter(|n| !ours.contains_key(*n)) {
        diffs.push(format!("{name}: declared by the patch, not in rust_gin_device.h"));
    }
    let (ov, tv) = (
        define_value(&s.crate_types, "RUST_GIN_DEVICE_ABI_VERSION"),
        define_value(&s.mirror, "RUST_GIN_DEVICE_ABI_VERSION"),
    );
    if ov != tv {
        diffs.push(format!("RUST_GIN_DEVICE_ABI_VERSION: crate {ov}, patch {tv}"));
    }
    let (os, ts) = (struct_fields(&s.crate_types), struct_fields(&s.mirror));
    for name in ["rust_gin_request", "rust_gin_signal"] {
        match (os.get(name), ts.get(name)) {
            (Some(o), Some(t)) if o == t => {}
            (o, t) => diffs.push(format!("struct {name}: crate {o:?}, patch {t:?}")),
        }
    }
    let (oc, tc) = (enum_constants(&s.crate_types), enum_constants(&s.mirror));
    if tc.len() < 10 {
        diffs.push(format!("the patch: only {} RUST_GIN_ constants found; the parser is lost", tc.len()));
    }
    for (k, v) in &tc {
        match oc.get(k) {
            Some(o) if o == v => {}
            o => diffs.push(format!("{k}: crate {o:?}, patch {v:?}")),
        }
    }
    diffs
}

#[test]
fn device_abi_in_the_patch_matches_rust_gin_device_h() {
    let s = abi_sides();
    let diffs = abi_differences(&s);
    assert!(diffs.is_empty(), "the patch's device ABI and the crate's disagree:\n{}", diffs.join("\n"));
    // Every function of the contract is there (and the parser saw them).
    let names: Vec<String> = function_decls(&s.crate_functions).into_keys().collect();
    for f in [
        "rust_gin_put",
        "rust_gin_put_value",
        "rust_gin_signal_peer",
        "rust_gin_get",
        "rust_gin_flush",
        "rust_gin_flush_async",
        "rust_gin_wait",
        "rust_gin_signal_ptr",
        "rust_gin_signal_read",
        "rust_gin_signal_wait",
        "rust_gin_signal_reset",
        "rust_gin_va_signal_reset",
        "rust_gin_counter_ptr",
        "rust_gin_counter_read",
        "rust_gin_counter_wait",
        "rust_gin_counter_reset",
        "rust_gin_supports_strong_signal",
    ] {
        assert!(names.iter().any(|n| n == f), "{f} not found in rust_gin_device.h");
    }
}

/// Changes `from` to `to` in one side, insisting that the text was there.
fn mutate(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "mutation target {from:?} not found; update the test");
    text.replacen(from, to, 1)
}

#[test]
fn device_abi_comparison_catches_a_change_on_either_side() {
    let base = abi_sides();
    type Side = fn(&mut AbiSides) -> &mut String;
    let crate_fns: Side = |s| &mut s.crate_functions;
    let crate_types: Side = |s| &mut s.crate_types;
    let mirror: Side = |s| &mut s.mirror;
    let cases: &[(&str, Side, &str, &str, &str)] = &[
        (
            "crate: a parameter type",
            crate_fns,
            "uint64_t bytes, uint32_t flags);",
            "uint64_t bytes, uint64_t flags);",
            "rust_gin_get",
        ),
        (
            "patch: a return type",
            mirror,
            "uint64_t rust_gin_signal_read(",
            "uint32_t rust_gin_signal_read(",
            "rust_gin_signal_read",
        ),
        (
            "patch: a declaration dropped",
            mirror,
            "extern \"C\" __device__ void rust_gin_counter_reset(",
            "extern \"C\" __device__ void rust_gin_counter_reset_gone(",
            "rust_gin_counter_reset",
        ),
        (
            "crate: a function added",
            crate_fns,
            "#endif",
            "RG_EXTERN_C RG_DEV int rust_gin_new_op(const void* handle);\n#endif",
            "rust_gin_new_op",
        ),
        (
            "crate: parameters swapped",
            crate_fns,
            "const void* window, uint64_t offset);",
            "uint64_t offset, const void* window);",
            "rust_gin_va_signal_reset",
        ),
        (
            "patch: a pointer dropped",
            mirror,
            "rust_gin_request* out);",
            "rust_gin_request out);",
            "rust_gin_flush_async",
        ),
        (
            "crate: the ABI version",
            crate_types,
            "#define RUST_GIN_DEVICE_ABI_VERSION 7",
            "#define RUST_GIN_DEVICE_ABI_VERSION 8",
            "RUST_GIN_DEVICE_ABI_VERSION",
        ),
        ("crate: a struct field", crate_types, "uint64_t value;", "uint32_t value;", "rust_gin_signal"),
        (
            "patch: a flag value",
            mirror,
            "RUST_GIN_FLAG_RELEASE_SYSTEM = 1 << 1",
            "RUST_GIN_FLAG_RELEASE_SYSTEM = 1 << 2",
            "RUST_GIN_FLAG_RELEASE_SYSTEM",
        ),
        (
            "crate: an error code",
            crate_types,
            "RUST_GIN_ERR_TIMEOUT = 2",
            "RUST_GIN_ERR_TIMEOUT = 7",
            "RUST_GIN_ERR_TIMEOUT",
        ),
    ];
    for (what, side, from, to, must_name) in cases {
        let mut s = AbiSides {
            crate_functions: base.crate_functions.clone(),
            crate_types: base.crate_types.clone(),
            mirror: base.mirror.clone(),
        };
        let t = side(&mut s);
        *t = mutate(t, from, to);
        let diffs = abi_differences(&s);
        assert!(
            diffs.iter().any(|d| d.contains(must_name)),
            "{what}: the comparison did not report {must_name}; it reported {diffs:?}"
        );
    }
    // Parameter names are not part of the ABI: renaming one is not a difference.
    let mut s = AbiSides {
        crate_functions: mutate(&base.crate_functions, "uint32_t coop_rank", "uint32_t rank_in_coop"),
        crate_types: base.crate_types.clone(),
        mirror: base.mirror.clone(),
    };
    assert!(abi_differences(&s).is_empty(), "a renamed parameter must not count: {:?}", abi_differences(&s));
    s.mirror = mutate(&s.mirror, "uint32_t coop_size", "uint32_t   coop_size /* spacing */");
    assert!(abi_differences(&s).is_empty(), "whitespace and comments must not count");
}

// ---------------------------------------------------------------------------
// The device header, compiled for the GPU against the stubs
// ---------------------------------------------------------------------------

fn need(var: Option<&'static str>, what: &str) -> &'static str {
    var.filter(|v| !v.is_empty()).unwrap_or_else(|| {
        panic!("DEVICE TOOLCHAIN UNKNOWN: {what} is not set (RUST_GIN_SKIP_DEVICE?); see docs/building.md")
    })
}

/// An include tree: the stubs plus the patch's two new headers at their RCCL paths.
fn header_tree() -> TempDir {
    let tmp = TempDir::new("patch-header");
    let gin = tmp.0.join("nccl_device/gin");
    std::fs::create_dir_all(gin.join("rust")).unwrap();
    let stubs = root().join("tests/fixtures/rccl_stubs/nccl_device/gin/gin_device_common.h");
    std::fs::copy(&stubs, gin.join("gin_device_common.h")).unwrap();
    let all = series();
    let p = patch(&all, "0004");
    std::fs::write(gin.join("rust/gin_rust.h"), p.file(NEW_DEVICE_HEADER).new_content()).unwrap();
    std::fs::write(gin.join("rust/gin_rust_device_abi.h"), p.file(NEW_ABI_HEADER).new_content()).unwrap();
    tmp
}

fn hip_compile(tree: &Path, arch: &str, extra: &[&str]) -> std::process::Output {
    let clang = need(option_env!("RUST_GIN_HIP_CLANG"), "RUST_GIN_HIP_CLANG");
    let mut cmd = Command::new(clang);
    cmd.args(["-x", "hip", "-std=c++17", "-nogpuinc", "-nogpulib", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("--offload-arch={arch}"))
        .arg("-I")
        .arg(tree)
        .args(extra)
        .arg(root().join("tests/fixtures/rccl_stubs/instantiate_gin_rust.hip"));
    cmd.output().unwrap_or_else(|e| panic!("cannot run {clang}: {e}"))
}

#[test]
fn device_header_compiles_for_the_gpu_with_every_specialisation_instantiated() {
    let targets = need(option_env!("RUST_GIN_GPU_TARGETS"), "RUST_GIN_GPU_TARGETS");
    let tree = header_tree();
    // Functions the specialisations call (the others are in the ABI for other users).
    let called = [
        "rust_gin_put",
        "rust_gin_put_value",
        "rust_gin_signal_peer",
        "rust_gin_get",
        "rust_gin_flush",
        "rust_gin_flush_async",
        "rust_gin_wait",
        "rust_gin_signal_ptr",
        "rust_gin_progress",
        "rust_gin_signal_reset",
        "rust_gin_va_signal_reset",
        "rust_gin_counter_ptr",
        "rust_gin_counter_reset",
        "rust_gin_supports_strong_signal",
    ];
    for arch in targets.split(',').filter(|a| !a.is_empty()) {
        let ll = tree.0.join(format!("{arch}.ll"));
        let out =
            hip_compile(&tree.0, arch, &["--cuda-device-only", "-O2", "-S", "-emit-llvm", "-o", ll.to_str().unwrap()]);
        assert!(out.status.success(), "{arch}: the patch's gin_rust.h does not compile:\n{}", text(&out));
        let ir = read(&ll);
        assert!(ir.contains("@rust_gin_instantiate_all("), "{arch}: the test kernel is missing from the IR");
        for f in called {
            assert!(
                ir.lines().any(|l| l.starts_with("declare") && l.contains(&format!("@{f}("))),
                "{arch}: no call to {f} survived; a specialisation does not reach the device ABI"
            );
        }
        assert!(!ir.contains("llvm.trap") && !ir.contains("llvm.debugtrap"), "{arch}: a specialisation traps");
        // With the device library's own bitcode linked in, as RCCL's device linker does:
        // every call resolves, and nothing on the way traps.
        let bc = Path::new(need(option_env!("RUST_GIN_DEVICE_DIR"), "RUST_GIN_DEVICE_DIR"))
            .join(arch)
            .join(format!("librccl_rust_gin_device_{arch}.bc"));
        let linked = tree.0.join(format!("{arch}-linked.ll"));
        let out = hip_compile(
            &tree.0,
            arch,
            &[
                "--cuda-device-only",
                "-O2",
                "-Xclang",
                "-mlink-builtin-bitcode",
                "-Xclang",
                bc.to_str().unwrap(),
                "-S",
                "-emit-llvm",
                "-o",
                linked.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{arch}: linking {} fails:\n{}", bc.display(), text(&out));
        let ir = read(&linked);
        let unresolved: Vec<&str> =
            ir.lines().filter(|l| l.starts_with("declare") && l.contains("@rust_gin_")).collect();
        assert!(unresolved.is_empty(), "{arch}: the device library lacks {unresolved:?}");
        assert!(!ir.contains("llvm.trap"), "{arch}: the linked device code traps");
        // Host and device passes together, as RCCL's fat-object compiles do.
        let both = hip_compile(&tree.0, arch, &["-fsyntax-only"]);
        assert!(both.status.success(), "{arch}: host+device compile fails:\n{}", text(&both));
    }
}

#[test]
fn device_header_refuses_targets_without_rust_gin_device_code() {
    let tree = header_tree();
    let out = hip_compile(&tree.0, "gfx1100", &["--cuda-device-only", "-fsyntax-only"]);
    assert!(!out.status.success(), "gin_rust.h accepted gfx1100, which rust-gin has no device code for");
    assert!(text(&out).contains("rust-gin device code exists for gfx90a, gfx942 and gfx950 only"), "{}", text(&out));
}

/// What each specialisation asks of the device ABI: the header compiled as host
/// C++ against the stubs, the ABI replaced by recording functions
/// (tests/fixtures/rccl_stubs/gin_rust_semantics.cc), every specialisation
/// called as RCCL calls it, a coop played by calling once per thread rank.
#[test]
fn device_header_maps_rccl_calls_onto_the_device_abi() {
    let clang = need(option_env!("RUST_GIN_HIP_CLANG"), "RUST_GIN_HIP_CLANG");
    let tree = header_tree();
    let exe = tree.0.join("gin_rust_semantics");
    let out = Command::new(clang)
        .args(["-x", "c++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(&tree.0)
        .arg(root().join("tests/fixtures/rccl_stubs/gin_rust_semantics.cc"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {clang}: {e}"));
    assert!(out.status.success(), "the semantic test does not build:\n{}", text(&out));
    let run = Command::new(&exe).output().expect("run the semantic test");
    eprintln!("{}", text(&run));
    assert!(run.status.success(), "gin_rust.h maps RCCL's calls wrongly:\n{}", text(&run));
    assert!(text(&run).contains(", 0 failed"), "{}", text(&run));
}

// ---------------------------------------------------------------------------
// The guarded type number (issue 12 part 6)
// ---------------------------------------------------------------------------

/// Across the whole series the number appears as code once: the define in
/// net_device.h. Every other added line names RUST_GIN_TYPE or the enums.
#[test]
fn the_gin_type_number_is_written_once_in_the_series() {
    let all = series();
    let mut defines = Vec::new();
    for p in &all {
        for f in &p.files {
            for l in f.added() {
                let code = l.split("//").next().unwrap();
                if code.trim_start().starts_with("#define RUST_GIN_TYPE") {
                    defines.push(format!("{} {}: {}", &p.name[..4], f.path, l.trim()));
                }
                for name in ["NCCL_GIN_TYPE_RUST", "NCCL_NET_DEVICE_GIN_RUST"] {
                    let literal = format!("{name} = {GIN_TYPE_RUST}");
                    assert!(!code.contains(&literal), "{} {}: {name} given a literal: {l}", p.name, f.path);
                }
                assert!(!code.contains(&format!("EXPECT_EQ({GIN_TYPE_RUST},")), "{}: a test pins the literal: {l}", p.name);
            }
        }
    }
    assert_eq!(
        defines,
        [format!(
            "0001 projects/rccl/src/include/nccl_device/net_device.h: #define RUST_GIN_TYPE {GIN_TYPE_RUST}"
        )]
    );
    // RCCL's build hands that number to the crate, which reports it.
    let cmake = patch(&all, "0005").file("projects/rccl/cmake/RustGin.cmake").new_content();
    assert!(cmake.contains("REGEX \"^#define RUST_GIN_TYPE [0-9]+\")"), "RustGin.cmake reads the define");
    assert!(cmake.contains("\"RUST_GIN_TYPE=${RUST_GIN_TYPE}\""), "RustGin.cmake passes it to cargo");
    assert_eq!(rccl_rust_gin::ffi::nccl::NCCL_NET_DEVICE_GIN_RUST as u32, GIN_TYPE_RUST, "the crate's default");
}

/// 0001's compile-time checks, compiled: the enums as at the pin (this
/// test's stand-in of the lines 0001's hunks do not show), then 0001's own
/// added lines (the define, both enumerators, the static_asserts), with the
/// define set to `n`. `edit` changes the assembled text first.
fn compile_guard(n: u32, edit: impl Fn(String) -> String) -> (bool, String) {
    let all = series();
    let p = patch(&all, "0001");
    let net = p.file("projects/rccl/src/include/nccl_device/net_device.h").added();
    let core = p.file("projects/rccl/src/include/nccl_device/core.h").added();
    let define = net.iter().find(|l| l.starts_with("#define RUST_GIN_TYPE")).expect("the define");
    let net_enum = net.iter().find(|l| l.trim_start().starts_with("NCCL_NET_DEVICE_GIN_RUST")).expect("net enum");
    let core_enum: Vec<&str> =
        core.iter().copied().filter(|l| l.trim_start().starts_with("NCCL_GIN_")).collect();
    assert_eq!(core_enum.len(), 2, "0001 adds NCCL_GIN_TYPE_RUST and NCCL_GIN_MAX_TYPES: {core_enum:?}");
    let asserts_at = core.iter().position(|l| l.starts_with("static_assert")).expect("0001 adds static_asserts");
    let asserts = core[asserts_at..].join("\n");
    let src = format!(
        "{}\ntypedef enum {{\n  NCCL_NET_DEVICE_HOST = 0,\n  NCCL_NET_DEVICE_UNPACK = 1,\n  NCCL_NET_DEVICE_GIN_PROXY = 2,\n  \
         NCCL_NET_DEVICE_GIN_GDAKI = 3,\n  NCCL_NET_DEVICE_GIN_GPI = 4,\n  NCCL_NET_DEVICE_GIN_EFA_GDA = 5,\n  \
         NCCL_NET_DEVICE_GIN_ROCSHMEM_GDA = 6,\n  NCCL_NET_DEVICE_GIN_ANVIL_SDMA = 7,\n{net_enum}\n}} ncclNetDeviceType;\n\
         typedef enum {{\n  NCCL_GIN_TYPE_NONE = 0,\n  NCCL_GIN_TYPE_PROXY = 2,\n  NCCL_GIN_TYPE_GDAKI = 3,\n  \
         NCCL_GIN_TYPE_GPI = 4,\n  NCCL_GIN_TYPE_EFA_GDA = 5,\n  NCCL_GIN_TYPE_ROCSHMEM_GDA = 6,\n  \
         NCCL_GIN_TYPE_ANVIL_SDMA = 7,\n{}\n}} ncclGinType_t;\n{asserts}\nint main() {{ return 0; }}\n",
        define.replace(&GIN_TYPE_RUST.to_string(), &n.to_string()),
        core_enum.join("\n"),
    );
    let tmp = TempDir::new("gin-type-guard");
    let file = tmp.0.join("guard.cc");
    std::fs::write(&file, edit(src)).unwrap();
    let out = Command::new("c++").args(["-std=c++17", "-fsyntax-only"]).arg(&file).output().expect("a C++ compiler (c++)");
    (out.status.success(), text(&out))
}

#[test]
fn patch_0001_refuses_at_compile_time_a_number_another_backend_has_or_the_mask_lacks() {
    for ok in [GIN_TYPE_RUST, 9, 31] {
        let (pass, out) = compile_guard(ok, |s| s);
        assert!(pass, "RUST_GIN_TYPE {ok} must compile: {out}");
    }
    for (bad, says) in [
        (2, "the proxy's number"),
        (3, "GDAKI's number"),
        (4, "GPI's number"),
        (5, "EFA GDA's number"),
        (6, "rocSHMEM GDA's number"),
        (7, "Anvil SDMA's number"),
        (1, "device backend mask"),
        (32, "device backend mask"),
        (64, "device backend mask"),
    ] {
        let (pass, out) = compile_guard(bad, |s| s);
        assert!(!pass, "RUST_GIN_TYPE {bad} compiled: the guard for it is missing");
        assert!(out.contains(says), "RUST_GIN_TYPE {bad}: the error does not say {says:?}: {out}");
    }
    // The two enums disagreeing (one of them edited by hand) is caught too.
    let (pass, out) = compile_guard(GIN_TYPE_RUST, |s| {
        s.replace("NCCL_NET_DEVICE_GIN_RUST = RUST_GIN_TYPE", "NCCL_NET_DEVICE_GIN_RUST = 9")
    });
    assert!(!pass && out.contains("disagree"), "enums that disagree compiled: {out}");
    // And the check is the guard's, not the compiler's: without 0001's
    // asserts the same clash compiles.
    let (pass, _) = compile_guard(7, |s| s.lines().filter(|l| !l.contains("static_assert") && !l.trim_start().starts_with('"')).collect::<Vec<_>>().join("\n"));
    assert!(pass, "without the static_asserts a clash is silent: the asserts above are what catches it");
}

/// A stand-in RCCL tree for patch 0001 only: core.h and net_device.h made of
/// filler lines with 0001's pre-image lines (context and removed) at the line
/// numbers its hunks name, in a git repository; and a copy of this project's
/// scripts/ and patches/ whose series is 0001 alone. `plant` edits a file's
/// text first (a tree whose RCCL took the number).
struct StandIn {
    _tmp: TempDir,
    tree: std::path::PathBuf,
    script: std::path::PathBuf,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@invalid"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn stand_in(plant: impl Fn(&str, String) -> String) -> StandIn {
    let tmp = TempDir::new("gin-type-tree");
    let all = series();
    let p = patch(&all, "0001");
    let tree = tmp.0.join("rccl");
    for f in &p.files {
        let mut lines: Vec<String> = Vec::new();
        for h in &f.hunks {
            while lines.len() + 1 < h.old_start {
                lines.push(format!("// stand-in for line {} of the pinned file", lines.len() + 1));
            }
            lines.extend(h.lines.iter().filter(|l| !l.starts_with('+')).map(|l| l[1..].to_string()));
        }
        lines.push("// stand-in end".into());
        let path = tree.join(&f.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, plant(&f.path, lines.join("\n") + "\n")).unwrap();
    }
    git(&tree, &["init", "-q"]);
    git(&tree, &["add", "-A"]);
    git(&tree, &["commit", "-qm", "stand-in"]);
    let proj = tmp.0.join("rust-gin");
    std::fs::create_dir_all(proj.join("scripts")).unwrap();
    std::fs::create_dir_all(proj.join("patches")).unwrap();
    let script = proj.join("scripts/apply-rccl-patches.sh");
    std::fs::copy(root().join("scripts/apply-rccl-patches.sh"), &script).unwrap();
    let name = series_names()[0].clone();
    std::fs::copy(root().join("patches").join(&name), proj.join("patches").join(&name)).unwrap();
    std::fs::write(proj.join("patches/series"), format!("{name}\n")).unwrap();
    StandIn { _tmp: tmp, tree, script }
}

fn apply_script(s: &StandIn, args: &[&str]) -> (i32, String) {
    let out = Command::new("bash").arg(&s.script).args(args).arg(&s.tree).output().unwrap();
    (out.status.code().unwrap_or(-1), text(&out))
}

fn define_in_tree(s: &StandIn) -> String {
    let net = std::fs::read_to_string(s.tree.join("projects/rccl/src/include/nccl_device/net_device.h")).unwrap();
    net.lines().find(|l| l.starts_with("#define RUST_GIN_TYPE")).unwrap_or("").to_string()
}

#[test]
fn the_apply_script_writes_the_default_number_or_the_one_gin_type_names() {
    let s = stand_in(|_, t| t);
    let (code, out) = apply_script(&s, &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(define_in_tree(&s), format!("#define RUST_GIN_TYPE {GIN_TYPE_RUST}"));
    assert!(out.contains(&format!("GIN type {GIN_TYPE_RUST} (the default)")), "{out}");

    let s = stand_in(|_, t| t);
    let head = git(&s.tree, &["rev-parse", "HEAD"]);
    let (code, out) = apply_script(&s, &["--gin-type", "9"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(define_in_tree(&s), "#define RUST_GIN_TYPE 9", "{out}");
    assert!(out.contains("GIN type 9 (--gin-type; not the contract's 8)"), "{out}");
    // One commit, and only the define differs from the series' own text.
    assert_eq!(git(&s.tree, &["rev-list", "--count", &format!("{head}..HEAD")]), "1");
    let diff = git(&s.tree, &["show", "--format=", "HEAD"]);
    assert!(diff.contains("+#define RUST_GIN_TYPE 9") && !diff.contains("RUST_GIN_TYPE 8"), "{diff}");
    assert_eq!(std::fs::read_to_string(root().join("patches").join(&series_names()[0])).unwrap().matches("+#define RUST_GIN_TYPE 8\n").count(), 1, "the series itself is untouched");

    for bad in ["1", "32", "eight", "-3"] {
        let s = stand_in(|_, t| t);
        let (code, out) = apply_script(&s, &["--gin-type", bad]);
        assert_eq!(code, 2, "--gin-type {bad}: {out}");
        assert!(out.contains("must be a number from 2 to 31"), "{out}");
    }
}

#[test]
fn the_apply_script_refuses_a_tree_whose_gin_types_already_use_the_number() {
    // RCCL appended a backend at 8, in both enums, as it does.
    let plant = |path: &str, t: String| {
        if path.ends_with("core.h") {
            t.replace(
                "  NCCL_GIN_MAX_TYPES = 8,",
                "  NCCL_GIN_TYPE_NEXT = 8, // a backend RCCL appended\n  NCCL_GIN_MAX_TYPES = 9,",
            )
        } else {
            t.replace("} ncclNetDeviceType;", "  NCCL_NET_DEVICE_GIN_NEXT = 8,\n} ncclNetDeviceType;")
        }
    };
    let s = stand_in(plant);
    let head = git(&s.tree, &["rev-parse", "HEAD"]);
    let (code, out) = apply_script(&s, &[]);
    assert_eq!(code, 3, "{out}");
    for needle in [
        "REFUSED: this RCCL already uses GIN type 8",
        "NCCL_GIN_TYPE_NEXT = 8 (ncclGinType_t, projects/rccl/src/include/nccl_device/core.h)",
        "NCCL_NET_DEVICE_GIN_NEXT = 8 (ncclNetDeviceType",
        "--gin-type 9",
        "NCCL_GIN_TYPE=9",
        "Nothing was changed",
    ] {
        assert!(out.contains(needle), "the refusal does not say {needle:?}:\n{out}");
    }
    assert_eq!(git(&s.tree, &["rev-parse", "HEAD"]), head, "the tree is left as it was");
    assert_eq!(git(&s.tree, &["status", "--porcelain"]), "", "no file changed");
    // A number only the device enum uses is refused as well.
    let s = stand_in(|path, t| if path.ends_with("net_device.h") { plant(path, t) } else { t });
    let (code, out) = apply_script(&s, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("NCCL_NET_DEVICE_GIN_NEXT = 8"), "{out}");
    // Another number that an enum uses: refused, naming that backend.
    let s = stand_in(|_, t| t);
    let (code, out) = apply_script(&s, &["--gin-type", "7"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("NCCL_GIN_TYPE_ANVIL_SDMA = 7"), "{out}");
    // The series applied already: refused.
    let s = stand_in(|_, t| t);
    assert_eq!(apply_script(&s, &[]).0, 0);
    let (code, out) = apply_script(&s, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("applied already"), "{out}");
}

// ---------------------------------------------------------------------------
// One patch applied to a stand-in tree (issue 12 parts 7 and 5)
// ---------------------------------------------------------------------------

/// The files one patch touches, made of filler lines with the patch's
/// pre-image lines (context and removed) at the line numbers its hunks name,
/// committed in a git repository; then the patch applied with `git am`. The
/// post-image is what RCCL gets at the lines the hunks show.
fn applied_stand_in(number: &str) -> (TempDir, std::path::PathBuf) {
    let tmp = TempDir::new(&format!("patch-{number}"));
    let all = series();
    let p = patch(&all, number);
    let tree = tmp.0.join("rccl");
    for f in p.files.iter().filter(|f| !f.new_file) {
        let mut lines: Vec<String> = Vec::new();
        for h in &f.hunks {
            while lines.len() + 1 < h.old_start {
                lines.push(format!("# stand-in for line {} of the pinned file", lines.len() + 1));
            }
            lines.extend(h.lines.iter().filter(|l| !l.starts_with('+')).map(|l| l[1..].to_string()));
        }
        lines.push("# stand-in end".into());
        let path = tree.join(&f.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        if f.path.ends_with(".sh") {
            git_init_if_needed(&tree);
            git(&tree, &["update-index", "--add", "--chmod=+x", &f.path]);
        }
    }
    git_init_if_needed(&tree);
    git(&tree, &["add", "-A"]);
    git(&tree, &["commit", "-qm", "stand-in"]);
    let file = root().join("patches").join(series_names().iter().find(|n| n.starts_with(number)).unwrap());
    git(&tree, &["am", "-q", file.to_str().unwrap()]);
    (tmp, tree)
}

fn git_init_if_needed(tree: &Path) {
    std::fs::create_dir_all(tree).unwrap();
    if !tree.join(".git").exists() {
        git(tree, &["init", "-q"]);
    }
}

/// Every place rocSHMEM-GIN's device bitcode reaches in DeviceLinker.cmake,
/// rust-gin's reaches too: the per-kernel compiles of the specialized kernels
/// (the driver's --rocshmem-bitcode option, which takes one file, so with
/// both backends the two bitcodes are linked into one), the per-arch
/// device.elf link, and the GIN symmetric kernels.
#[test]
fn device_linker_gives_rust_gin_bitcode_wherever_rocshmem_gin_bitcode_goes() {
    let (_tmp, tree) = applied_stand_in("0005");
    let dl = read(&tree.join("projects/rccl/cmake/DeviceLinker.cmake"));
    // Comments dropped; a filler line of the stand-in reads "# stand-in ...",
    // kept as "STAND-IN" so a part of the file can end at the hunk's edge.
    let code: Vec<&str> = dl
        .lines()
        .map(|l| if l.starts_with("# stand-in") { "STAND-IN" } else { l.split('#').next().unwrap().trim() })
        .collect();
    let at = |needle: &str| {
        code.iter().position(|l| l.contains(needle)).unwrap_or_else(|| {
            panic!("0005's hunks do not reach {needle:?}, where rocSHMEM-GIN's bitcode goes: rust-gin's does not go there")
        })
    };
    // Each site: where rocSHMEM-GIN's bitcode is handed over, what closes that
    // part of the file, and what rust-gin's equivalent must contain there.
    let sites: &[(&str, &str, &str, &[&str])] = &[
        (
            "per-kernel compiles",
            "target_compile_options(${_dev_target} PRIVATE --rocshmem-bitcode=${_rocshmem_bc})",
            "set(ARCH_DEVICE_ELF",
            &[
                "if(ENABLE_RUST_GIN)",
                "add_dependencies(${_dev_target} rust_gin_build)",
                "librccl_rust_gin_device_${DL_GPU_TARGET}.bc",
                "target_compile_options(${_dev_target} PRIVATE --rocshmem-bitcode=${_rg_kernel_bc})",
            ],
        ),
        (
            "device.elf link",
            // (the line before, which sets rocSHMEM's argument, is not in the hunk's context)
            "list(APPEND _rocshmem_link_depends rocshmem_static)",
            "add_custom_command(",
            &["--rocshmem-bitcode=${RUST_GIN_DEVICE_DIR}/${DL_GPU_TARGET}/librccl_rust_gin_device_${DL_GPU_TARGET}.bc"],
        ),
        (
            "GIN symmetric kernels",
            "set(_sym_rocshmem_bc_flag -Xclang -mlink-builtin-bitcode -Xclang ${_qp_bc})",
            "file(GLOB _sym_srcs",
            &["list(APPEND _sym_rocshmem_bc_flag -Xclang -mlink-builtin-bitcode -Xclang ${_rg_bc})"],
        ),
    ];
    for (site, rocshmem, end, rust) in sites {
        let from = at(rocshmem);
        let to = from
            + code[from..]
                .iter()
                .position(|l| l.starts_with(end) || *l == "STAND-IN")
                .unwrap_or_else(|| panic!("{site}: no {end:?}"));
        let part = code[from..to].join("\n");
        for needle in *rust {
            assert!(part.contains(needle), "{site}: rocSHMEM-GIN's bitcode goes here, rust-gin's does not ({needle:?} missing)");
        }
    }
    // Both backends: one file for the option, made of both bitcodes, and the
    // rocSHMEM-only option taken off so the driver sees one --rocshmem-bitcode.
    let from = at(sites[0].1);
    let to = from + code[from..].iter().position(|l| *l == "STAND-IN").unwrap();
    let per_kernel = &code[from..to].join("\n");
    for needle in [
        "if(ENABLE_ROCSHMEM_GIN AND ROCSHMEM_INSTALL_DIR)",
        "COMMAND ${_rg_llvm_link} -o ${_rg_both_bc}.new ${_rocshmem_bc} ${_rg_kernel_bc}",
        // Re-joined at every build, after rocSHMEM's build where it is in tree
        // (issue 27: a parallel build joined too early, and a rebuilt rocSHMEM
        // bitcode was never joined again).
        "COMMAND ${CMAKE_COMMAND} -E copy_if_different ${_rg_both_bc}.new ${_rg_both_bc}",
        "add_dependencies(dl_rust_gin_kernel_bc_${DL_GPU_TARGET} rust_gin_build)",
        "if(TARGET rocshmem_static)",
        "add_dependencies(dl_rust_gin_kernel_bc_${DL_GPU_TARGET} rocshmem_static)",
        "list(FILTER _rg_dev_opts EXCLUDE REGEX \"^--rocshmem-bitcode=\")",
        "set(_rg_kernel_bc ${_rg_both_bc})",
    ] {
        assert!(per_kernel.contains(needle), "per-kernel compiles with rocSHMEM-GIN too: {needle:?} missing");
    }
}

/// RUST_GIN_NATIVE_LIBS names every shared library a program that links the
/// crate needs: this test binary links the crate, so its DT_NEEDED entries
/// (less libc and the loader) are that list, amdhip64 included (hip-runtime-sys
/// links it), whatever order RCCL's own link line takes.
#[test]
fn rust_gin_native_libs_name_every_library_the_crate_needs() {
    let (_tmp, tree) = applied_stand_in("0005");
    let cmake = read(&tree.join("projects/rccl/cmake/RustGin.cmake"));
    let line = cmake.lines().find(|l| l.starts_with("set(RUST_GIN_NATIVE_LIBS \"")).expect("RUST_GIN_NATIVE_LIBS");
    let listed: Vec<&str> = line.split('"').nth(1).unwrap().split(';').collect();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("readelf").arg("-d").arg(&exe).output().expect("readelf (binutils)");
    let needed: Vec<String> = text(&out)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next().map(str::to_string))
        .filter_map(|so| so.strip_prefix("lib").map(|s| s.split(".so").next().unwrap().to_string()))
        .filter(|name| name != "c" && !name.starts_with("ld-linux"))
        .collect();
    assert!(needed.iter().any(|n| n == "amdhip64"), "the crate no longer links amdhip64? NEEDED: {needed:?}");
    for lib in &needed {
        assert!(listed.contains(&lib.as_str()), "RUST_GIN_NATIVE_LIBS {listed:?} lacks {lib} (NEEDED by the crate)");
    }
    // The imported target replaces the bare name where hip's package has it.
    assert!(cmake.contains("list(TRANSFORM _rg_native_libs REPLACE \"^amdhip64$\" \"hip::amdhip64\")"), "hip::amdhip64");
    assert!(cmake.contains("target_link_libraries(${target} PRIVATE \"${RUST_GIN_STATIC_LIB}\" ${_rg_native_libs})"));
}

/// `install.sh --rust-gin` with a RUST_GIN_SOURCE_DIR that has spaces: 0006's
/// added lines run in bash, then install.sh's own cmake line (RCCL's text,
/// which expands cmake_common_options unquoted) with a cmake that prints what
/// it gets. The path must reach CMake whole: as one -D argument, or in the
/// environment with RustGin.cmake told to take it from there.
#[test]
fn install_sh_rust_gin_keeps_a_source_dir_with_spaces_whole() {
    let (_tmp, tree) = applied_stand_in("0006");
    let all = series();
    let p = patch(&all, "0006");
    let install = p.file("projects/rccl/install.sh");
    // The hunks after display_help(): argument parsing and the options.
    let code: Vec<String> = install
        .hunks
        .iter()
        .filter(|h| !h.lines.iter().any(|l| l.starts_with("+    echo")))
        .flat_map(|h| h.lines.iter().filter_map(|l| l.strip_prefix('+')).map(str::to_string))
        .collect();
    let applied = read(&tree.join("projects/rccl/install.sh"));
    for l in &code {
        assert!(applied.lines().any(|a| a == l), "{l:?} is not in the applied install.sh");
    }
    // install.sh's cmake line (unchanged by the series).
    let cmake_line = "${cmake_executable} ${cmake_common_options} -DONLY_FUNCS=\"${ONLY_FUNCS}\" ../../.";
    let tmp = TempDir::new("install-sh");
    let dir = tmp.0.join("rust gin/with two spaces");
    std::fs::create_dir_all(&dir).unwrap();
    let fake = tmp.0.join("fake-cmake");
    std::fs::write(&fake, "#!/usr/bin/env bash\nprintf 'ARG %s\\n' \"$@\"\nprintf 'ENV %s\\n' \"${RUST_GIN_SOURCE_DIR-}\"\n").unwrap();
    let script = format!(
        "set -u\ncmake_common_options=\"-DCMAKE_BUILD_TYPE=Release\"\nONLY_FUNCS=\ncmake_executable={}\n{}\n{cmake_line}\n",
        fake.display(),
        code.join("\n")
    );
    let out = Command::new("bash")
        .args(["-c", &format!("chmod +x {}; {script}", fake.display()), "install.sh", "--rust-gin"])
        .env("RUST_GIN_SOURCE_DIR", &dir)
        .output()
        .unwrap();
    let got = text(&out);
    assert!(out.status.success(), "{got}");
    let args: Vec<&str> = got.lines().filter_map(|l| l.strip_prefix("ARG ")).collect();
    let env = got.lines().find_map(|l| l.strip_prefix("ENV ")).unwrap_or("");
    assert!(args.contains(&"-DENABLE_RUST_GIN=ON"), "{args:?}");
    let d = dir.to_str().unwrap();
    assert!(!args.iter().any(|a| *a == "spaces" || *a == "two" || a.ends_with("/rust")), "the path was split: {args:?}");
    let whole_arg = args.contains(&format!("-DRUST_GIN_SOURCE_DIR={d}").as_str());
    let via_env = args.contains(&"-DRUST_GIN_SOURCE_DIR_FROM_ENV=ON") && env == d;
    assert!(whole_arg || via_env, "cmake did not get {d:?}: args {args:?}, environment {env:?}");
    if via_env {
        // ... and RustGin.cmake takes it from there, over a cached value.
        let cmake = patch(&all, "0005").file("projects/rccl/cmake/RustGin.cmake").new_content();
        assert!(cmake.contains("if(RUST_GIN_SOURCE_DIR_FROM_ENV AND NOT \"$ENV{RUST_GIN_SOURCE_DIR}\" STREQUAL \"\")"));
        assert!(cmake.contains("\" FORCE)") && cmake.contains("unset(RUST_GIN_SOURCE_DIR_FROM_ENV CACHE)"));
    }
}

/// 0006 takes `--rust-gin` out of the arguments only where getopt would read
/// an option: as the value of `--prefix`, `--jobs`, `-j` (alone or ending a
/// cluster), `--amdgpu_targets` or `--cmake-options`, and after `--`, it is
/// an argument and stays. Seen failing before the fix: `--prefix --rust-gin`
/// lost its value and turned rust-gin on.
#[test]
fn install_sh_keeps_rust_gin_where_it_is_the_value_of_another_option() {
    let all = series();
    let p = patch(&all, "0006");
    let install = p.file("projects/rccl/install.sh");
    let parse: Vec<&str> = install
        .hunks
        .iter()
        .filter(|h| h.lines.iter().any(|l| l.contains("rust_gin_args")))
        .flat_map(|h| h.lines.iter().filter_map(|l| l.strip_prefix('+')))
        .collect();
    assert!(!parse.is_empty(), "0006 has no argument-parsing hunk");
    let run = |args: &[&str]| -> (bool, Vec<String>) {
        let script = format!("{}
echo \"BUILD=${{build_rust_gin}}\"\nprintf 'REST %s\\n' \"$@\"\n", parse.join("\n"));
        let out = Command::new("bash").arg("-c").arg(&script).arg("install.sh").args(args).output().unwrap();
        let got = text(&out);
        assert!(out.status.success(), "{got}");
        let rest = got.lines().filter_map(|l| l.strip_prefix("REST ")).map(str::to_string).collect();
        (got.contains("BUILD=true"), rest)
    };
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(run(&["--rust-gin", "--prefix", "/opt/x"]), (true, v(&["--prefix", "/opt/x"])));
    assert_eq!(run(&["--prefix", "--rust-gin"]), (false, v(&["--prefix", "--rust-gin"])));
    assert_eq!(run(&["--cmake-options", "--rust-gin", "--rust-gin"]), (true, v(&["--cmake-options", "--rust-gin"])));
    assert_eq!(run(&["-cj", "--rust-gin"]), (false, v(&["-cj", "--rust-gin"])));
    assert_eq!(run(&["-j8", "--rust-gin"]), (true, v(&["-j8"])));
    assert_eq!(run(&["--", "--rust-gin"]), (false, v(&["--", "--rust-gin"])));
}

/// Patch 0003's gin.cc lines compiled against three stand-ins of RCCL's GIN
/// plugin headers: the pinned tree (v14 newest), a tree that syncs NCCL 2.32
/// (gin_v15.h, whose config has a peer array), and one with an early
/// gin_v15.h that only aliased v14. It must register v14, v15, and refuse.
#[test]
fn patch_0003_registers_gin_v15_where_the_tree_has_it_and_v14_otherwise() {
    let all = series();
    let gin = patch(&all, "0003").file("projects/rccl/src/plugin/gin.cc");
    let added = |i: usize| gin.hunks[i].lines.iter().filter_map(|l| l.strip_prefix('+')).collect::<Vec<_>>().join("\n");
    let v14 = "typedef struct { int nSignals, nCounters, nContexts, queueDepth, trafficClass, backendVersion, rankStride; } ncclGinConfig_v14_t;\n\
               typedef struct { const char* name; int (*createContext)(ncclGinConfig_v14_t*); } ncclGin_v14_t;\n";
    let trees = [
        ("pinned", format!("{v14}typedef ncclGin_v14_t ncclGin_t;\n"), 14, Some(HOST_VTABLE)),
        (
            "NCCL 2.32",
            format!(
                "{v14}#define GIN_V15_H_\ntypedef struct {{ int nSignals, nCounters, nContexts, queueDepth, trafficClass, backendVersion; \
                 int* peerArray; int peerArrayCount; }} ncclGinConfig_v15_t;\n\
                 typedef struct {{ const char* name; int (*createContext)(ncclGinConfig_v15_t*); }} ncclGin_v15_t;\n\
                 typedef ncclGin_v15_t ncclGin_t;\n"
            ),
            15,
            Some(HOST_VTABLE_V15),
        ),
        (
            "alias v15",
            format!(
                "{v14}#define GIN_V15_H_\ntypedef ncclGinConfig_v14_t ncclGinConfig_v15_t;\ntypedef ncclGin_v14_t ncclGin_v15_t;\n\
                 typedef ncclGin_v15_t ncclGin_t;\n"
            ),
            15,
            None,
        ),
    ];
    let tmp = TempDir::new("gin-cc");
    for (name, headers, version, want) in trees {
        let src = format!(
            "{headers}enum {{ ncclGinPluginStateInitReady = 1 }};\nstruct Lib {{ ncclGin_t* ncclGin; int state; int version; }};\n\
             {}\nint ncclGinVersion[1] = {{{version}}};\nncclGin_t* registered() {{\n  static Lib pluginLibs[4];\n  int pluginCounter = 0;\n{}\n  \
             return pluginCounter == 1 && pluginLibs[0].version == {version} ? pluginLibs[0].ncclGin : nullptr;\n}}\n",
            added(0),
            added(1)
        );
        let file = tmp.0.join("gin.cc");
        std::fs::write(&file, &src).unwrap();
        let obj = tmp.0.join("gin.o");
        let out = Command::new("c++")
            .args(["-std=c++17", "-DENABLE_RUST_GIN", "-c", "-o"])
            .arg(&obj)
            .arg(&file)
            .output()
            .expect("a C++ compiler (c++)");
        match want {
            Some(symbol) => {
                assert!(out.status.success(), "{name}: 0003's gin.cc lines do not compile:\n{}\n{src}", text(&out));
                let nm = Command::new("nm").arg("-u").arg(&obj).output().expect("nm");
                let undefined = text(&nm);
                assert!(undefined.contains(symbol), "{name}: {symbol} is not what gets registered:\n{undefined}");
                for other in [HOST_VTABLE, HOST_VTABLE_V15].iter().filter(|s| **s != symbol) {
                    assert!(!undefined.contains(other), "{name}: {other} referenced as well");
                }
            }
            None => {
                assert!(!out.status.success(), "{name}: a v15 config without a peer array was accepted");
                assert!(text(&out).contains("has no peer array"), "{name}: {}", text(&out));
            }
        }
    }
}

// The index lines. `git apply` falls back on them (--3way) and a reader
// trusts them to name the pinned RCCL blobs, so they must be real: checked
// here offline where the series alone decides (new files, a file two patches
// touch, placeholder-looking ids), and against the pinned pre-images with
// RCCL_SRC in tests/patch_series_rccl_src.rs.

/// `git hash-object` of `content`.
fn blob_id(content: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(["hash-object", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git hash-object");
    child.stdin.take().unwrap().write_all(content).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A new file's content as git stores it (a last line may lack its newline).
fn new_file_bytes(f: &FileDiff) -> Vec<u8> {
    let mut s = f.new_content();
    let lines: Vec<&String> = f.hunks.iter().flat_map(|h| h.lines.iter()).collect();
    if lines.last().is_some_and(|l| l.starts_with('\\')) {
        s.pop();
    }
    s.into_bytes()
}

fn new_file_id_problems(all: &[Patch]) -> Vec<String> {
    let mut out = Vec::new();
    for p in all {
        for f in p.files.iter().filter(|f| f.new_file) {
            let id = blob_id(&new_file_bytes(f));
            if f.pre.chars().any(|c| c != '0') || !id.starts_with(&f.post) {
                out.push(format!("{}: {}: index {}..{}, but its content is blob {}", p.name, f.path, f.pre, f.post, &id[..f.post.len().max(7)]));
            }
        }
    }
    out
}

fn chain_problems(all: &[Patch]) -> Vec<String> {
    let mut out = Vec::new();
    let mut last: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    for p in all {
        for f in &p.files {
            if let Some((name, post)) = last.get(f.path.as_str()) {
                if !(post.starts_with(&f.pre) || f.pre.starts_with(post)) {
                    out.push(format!("{}: {}: pre-image {} but {name} left it at {post}", p.name, f.path, f.pre));
                }
            }
            last.insert(&f.path, (&p.name, &f.post));
        }
    }
    out
}

/// Ids that look typed rather than computed.
fn placeholder_problems(all: &[Patch]) -> Vec<String> {
    let looks_made_up = |id: &str, may_be_zero: bool| {
        let hex = id.len() >= 7 && id.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
        let b = id.as_bytes();
        let one_char = b.iter().all(|&c| c == b[0]);
        let run = b.windows(2).all(|w| w[1] == w[0] + 1) || b.windows(2).all(|w| w[0] == w[1] + 1);
        let word = ["dead", "beef", "cafe", "babe", "f00d", "c0de", "abcdef", "123456", "feed"].iter().any(|w| id.contains(w));
        !hex || (one_char && !(may_be_zero && b[0] == b'0')) || run || word
    };
    let mut out = Vec::new();
    for p in all {
        for f in &p.files {
            if looks_made_up(&f.pre, f.new_file) || looks_made_up(&f.post, false) || f.pre == f.post {
                out.push(format!("{}: {}: index {}..{} looks like a placeholder", p.name, f.path, f.pre, f.post));
            }
        }
    }
    out
}

#[test]
fn a_new_files_index_id_is_the_blob_of_its_content() {
    let all = series();
    assert!(all.iter().flat_map(|p| &p.files).any(|f| f.new_file), "the series creates no file: nothing checked");
    let bad = new_file_id_problems(&all);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn a_file_two_patches_touch_chains_its_blob_ids() {
    let all = series();
    let bad = chain_problems(&all);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // 0004 and 0005 both change src/CMakeLists.txt: the chain is really checked.
    let cm = "projects/rccl/src/CMakeLists.txt";
    assert_eq!(patch(&all, "0005").file(cm).pre, patch(&all, "0004").file(cm).post);
}

#[test]
fn no_index_id_looks_like_a_placeholder() {
    let bad = placeholder_problems(&series());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn index_checks_catch_a_wrong_id() {
    let all = series();
    let with = |number: &str, path: &str, from: &str, to: &str| -> Vec<Patch> {
        let name = series_names().into_iter().find(|n| n.starts_with(number)).unwrap();
        let text = read(&root().join("patches").join(&name));
        let i = patch(&all, number).file(path);
        let line = format!("index {}..{}", i.pre, i.post);
        assert!(text.contains(&line), "{line}");
        let planted = text.replacen(&line, &line.replace(from, to), 1);
        all.iter().map(|p| if p.name == name { parse_patch(&name, &planted).unwrap() } else { parse_patch(&p.name, &read(&root().join("patches").join(&p.name))).unwrap() }).collect()
    };
    let abi = "projects/rccl/src/include/nccl_device/gin/rust/gin_rust_device_abi.h";
    let post = patch(&all, "0004").file(abi).post.clone();
    assert!(!new_file_id_problems(&with("0004", abi, &post, "1f2e3d4")).is_empty(), "(a) missed a wrong new-file id");
    let cm = "projects/rccl/src/CMakeLists.txt";
    let post = patch(&all, "0004").file(cm).post.clone();
    assert!(!chain_problems(&with("0004", cm, &post, "1f2e3d4")).is_empty(), "(b) missed a broken chain");
    let pre = patch(&all, "0005").file(cm).pre.clone();
    assert!(!chain_problems(&with("0005", cm, &pre, "1f2e3d4")).is_empty(), "(b) missed a broken chain");
    let pre = patch(&all, "0006").file("projects/rccl/install.sh").pre.clone();
    assert!(!placeholder_problems(&with("0006", "projects/rccl/install.sh", &pre, "1234567")).is_empty(), "(c) missed 1234567");
    assert!(!placeholder_problems(&with("0006", "projects/rccl/install.sh", &pre, "aaaaaaa")).is_empty(), "(c) missed aaaaaaa");
}
