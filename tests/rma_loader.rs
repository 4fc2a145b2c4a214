//! RCCL's RMA plugin loader, replicated, against the installed plugin; and the
//! built library against the symbol names and version order RCCL's loader
//! really uses (the facts below, from the research memo's section 6).
//!
//! What RCCL does (src/plugin/rma.cc and plugin_open.cc): NCCL_RMA_PLUGIN unset means "librccl-rma.so"; "none" means no
//! external plugin; otherwise a comma-separated list. Each name is passed to
//! dlopen as given (a name that is a case-insensitive prefix of
//! "STATIC_PLUGIN" means the program itself); if that fails and the name has
//! no '/' and is not of the form lib*.so, "librccl-rma-<name>.so" is tried.
//! In the opened library the newest known version symbol wins:
//! ncclRmaPlugin_v17, _v16, _v15, _v14, _v13 in NCCL 2.32 (an RCCL that syncs
//! it will do the same), _v16, _v15, _v14, _v13 in a newer RCCL (its docs),
//! _v15, _v14, _v13 at the pinned revision; v13 falls back to ncclGinPlugin_v13, and RCCL's
//! v13 wrapper makes init fail unless getProperties(0) reports
//! NCCL_NET_DEVICE_GIN_PROXY.
//!
//! dlopen of a bare name searches the dynamic linker's path (LD_LIBRARY_PATH,
//! the cache, the system directories). A process cannot change that path for
//! itself after it started, so the replica takes the directories to search
//! explicitly; one test also runs the replica in a child process whose
//! LD_LIBRARY_PATH names the install directory, with plain dlopen.
//!
//! The library is installed with scripts/install-rma-plugin.sh --from the
//! cdylib cargo built with this test (rccl_host::cdylib_path).

#[path = "support/rccl_host.rs"]
mod rccl_host;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use rccl_host::{cdylib_path, setup_env};
use rccl_rust_gin::ffi::nccl::*;
use rccl_rust_gin::ffi::rma::*;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const PREFIX: &str = "librccl-rma";

// --- what RCCL really does, from the research memo (rccl-gin.md section 6) ----
// These are RCCL's facts, not this project's choices; the replica below and
// the built library are both checked against them.
//
// - The pinned RCCL's src/plugin/rma.cc loads v15, v14, v13, in that order
//   (randomizedcoder/rocm-systems@66e4315f, "F1").
// - RCCL's RMA plugin docs (StefanBS/rocm-systems@b76e4ecb) describe v16 and
//   newer RCCL tries it first (NVIDIA/nccl@14c81c37 rma_v16.h matches).
// - NCCL's src/plugin/rma.cc tries 17, 16, 15, 14, 13 once rma_v17.h exists
//   (NVIDIA/nccl@e714a588 rma.cc, ncclRmaVersion[]; rma_v17.h @c6fbb1d7),
//   the order an RCCL that syncs NCCL 2.32 inherits.
// - Each getNcclRma_vN dlsym()s "ncclRmaPlugin_vN"; v13 falls back to
//   "ncclGinPlugin_v13" ("the two should have an equal signature").

/// The version order of NCCL 2.32 (and an RCCL that syncs it), of a newer
/// RCCL (its RMA plugin docs) and of the pin.
const NCCL_2_32: &[u32] = &[17, 16, 15, 14, 13];
const NEWER: &[u32] = &[16, 15, 14, 13];
const PINNED: &[u32] = &[15, 14, 13];

/// The symbol RCCL dlsym()s for version `v`, and its fallback.
fn rccl_symbols(v: u32) -> Vec<String> {
    let mut s = vec![format!("ncclRmaPlugin_v{v}")];
    if v == 13 {
        s.push("ncclGinPlugin_v13".into());
    }
    s
}

/// What the replica did: every name it tried, and what it loaded.
#[derive(Debug, Default)]
struct Outcome {
    tried: Vec<String>,
    /// (the name that opened, the version chosen, the vtable's name field)
    loaded: Option<(String, u32, String)>,
}

/// ncclOsDlopen(name) with the linker's search path replaced by `search`
/// (None: the real dynamic linker decides).
fn dlopen(name: Option<&str>, search: Option<&[PathBuf]>) -> Option<Library> {
    // SAFETY: loading shared libraries made for this purpose (our plugin and
    // small C stubs); their initialisers are benign.
    unsafe {
        let Some(name) = name else { return Some(Library::this()) };
        match search {
            Some(dirs) if !name.contains('/') => dirs
                .iter()
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .and_then(|p| Library::open(Some(&p), RTLD_NOW | RTLD_LOCAL).ok()),
            _ => Library::open(Some(name), RTLD_NOW | RTLD_LOCAL).ok(),
        }
    }
}

/// tryOpenLib: the STATIC_PLUGIN rule, then dlopen.
fn try_open(name: &str, search: Option<&[PathBuf]>, out: &mut Outcome) -> Option<Library> {
    out.tried.push(name.to_string());
    let is_static = !name.is_empty() && "STATIC_PLUGIN".get(..name.len()).is_some_and(|p| p.eq_ignore_ascii_case(name));
    dlopen(if is_static { None } else { Some(name) }, search)
}

/// openPluginLib(ncclPluginTypeRma, name).
fn open_plugin_lib(name: &str, search: Option<&[PathBuf]>, out: &mut Outcome) -> Option<(Library, String)> {
    let first = if name.is_empty() { format!("{PREFIX}.so") } else { name.to_string() };
    if let Some(l) = try_open(&first, search, out) {
        return Some((l, first));
    }
    let lib_form = name.starts_with("lib") && name.len() >= 3 && name.ends_with(".so");
    if !name.is_empty() && !name.contains('/') && !lib_form {
        let second = format!("{PREFIX}-{name}.so");
        if let Some(l) = try_open(&second, search, out) {
            return Some((l, second));
        }
    }
    None
}

/// The getNcclRma_vXX getters in `order`: the first symbol found wins.
fn pick_version(lib: &Library, order: &[u32]) -> Option<(u32, *const c_void)> {
    for &v in order {
        // SAFETY: looking up data symbols; their layout is the version's.
        for name in rccl_symbols(v) {
            // SAFETY: as above.
            if let Ok(s) = unsafe { lib.get::<*const c_void>(format!("{name}\0").as_bytes()) } {
                return Some((v, *s));
            }
        }
    }
    None
}

fn vtable_name(v: u32, p: *const c_void) -> String {
    // SAFETY: every version has `const char* name` first.
    let _ = v;
    unsafe { CStr::from_ptr(*(p as *const *const std::ffi::c_char)) }.to_string_lossy().into_owned()
}

/// initPluginLibsOnceFunc + ncclRmaPluginLoad: the plugin list from
/// NCCL_RMA_PLUGIN's value, loaded in order; the first that loads wins.
fn load(env: Option<&str>, search: Option<&[PathBuf]>, order: &[u32]) -> Outcome {
    let mut out = Outcome::default();
    let names: Vec<String> = match env {
        None => vec![format!("{PREFIX}.so")],
        Some(v) if v.eq_ignore_ascii_case("none") => vec![],
        Some(v) => v.split(',').map(str::to_string).collect(),
    };
    for name in names {
        let Some((lib, opened)) = open_plugin_lib(&name, search, &mut out) else { continue };
        if let Some((v, p)) = pick_version(&lib, order) {
            out.loaded = Some((opened, v, vtable_name(v, p)));
            // Keep it loaded: a Rust cdylib is not meant to be unloaded while
            // its threads and thread-locals may live (RCCL unloads at finalize).
            std::mem::forget(lib);
            break;
        }
    }
    out
}

// --- the installed plugin and some stubs ---------------------------------------

struct Install {
    dir: PathBuf,
    stubs: PathBuf,
}

fn install() -> &'static Install {
    static I: OnceLock<Install> = OnceLock::new();
    I.get_or_init(|| {
        setup_env();
        let so = cdylib_path();
        // In target/<profile>/, replaced on every run.
        let exe = std::env::current_exe().unwrap();
        let base = exe.parent().unwrap().parent().unwrap().join("rma-loader-test");
        let dir = base.join("plugins");
        assert!(so.is_file(), "{} missing: cargo test or cargo build --lib makes it", so.display());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-rma-plugin.sh");
        let st = std::process::Command::new("bash").arg(&script).arg("--from").arg(&so).arg(&dir).output().unwrap();
        assert!(st.status.success(), "install-rma-plugin.sh: {}", String::from_utf8_lossy(&st.stderr));
        assert!(dir.join("librccl-rma-rust.so").is_file());
        let stubs = base.join("stubs");
        build_stubs(&stubs);
        Install { dir, stubs }
    })
}

/// Small libraries that export only some versions (the vtables are zeroed;
/// only the loader's choice is tested with them).
fn build_stubs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for (file, syms) in [
        ("librccl-rma-v14v13.so", &["ncclRmaPlugin_v14", "ncclRmaPlugin_v13"][..]),
        ("librccl-rma-gin13.so", &["ncclGinPlugin_v13"][..]),
        ("librccl-rma-empty.so", &[][..]),
        // A file literally named "rust": RCCL's first dlopen finds it.
        ("rust", &["ncclRmaPlugin_v14"][..]),
    ] {
        let src = dir.join(format!("{file}.c"));
        let mut c = String::from("struct vt { const char* name; void* slots[21]; };\n");
        for s in syms {
            c.push_str(&format!("struct vt {s} = {{ \"stub-{file}\" }};\n"));
        }
        c.push_str("int rust_gin_loader_stub;\n");
        std::fs::write(&src, c).unwrap();
        let st = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join(file))
            .arg(&src)
            .status()
            .expect("a C compiler (cc) for the loader stubs");
        assert!(st.success());
    }
}

fn paths(dirs: &[&Path]) -> Vec<PathBuf> {
    dirs.iter().map(|d| d.to_path_buf()).collect()
}

// --- the tests -------------------------------------------------------------

#[test]
fn an_absolute_path_is_opened_as_given_and_the_newest_version_wins() {
    let i = install();
    let abs = i.dir.join("librccl-rma-rust.so");
    let abs = abs.to_str().unwrap();
    let o = load(Some(abs), Some(&[]), NEWER);
    assert_eq!(o.tried, [abs], "a path is dlopened once, never prefixed");
    assert_eq!(o.loaded, Some((abs.to_string(), 16, "rust-gin-rma".into())), "a newer RCCL takes v16");
    let o = load(Some(abs), Some(&[]), PINNED);
    assert_eq!(o.loaded.as_ref().map(|l| l.1), Some(15), "the pinned RCCL (15, 14, 13) takes v15");
    let o = load(Some(abs), Some(&[]), NCCL_2_32);
    assert_eq!(o.loaded, Some((abs.to_string(), 17, "rust-gin-rma".into())), "NCCL 2.32's order takes v17");
}

#[test]
fn a_file_name_is_found_on_the_search_path() {
    let i = install();
    let search = paths(&[&i.stubs, &i.dir]);
    let o = load(Some("librccl-rma-rust.so"), Some(&search), NEWER);
    assert_eq!(o.tried, ["librccl-rma-rust.so"], "a lib*.so name is not prefixed");
    assert_eq!(o.loaded.map(|l| (l.0, l.1)), Some(("librccl-rma-rust.so".into(), 16)));
    // Not on the path: nothing, and no prefixed retry for a lib*.so name.
    let o = load(Some("librccl-rma-rust.so"), Some(&paths(&[&i.stubs])), NEWER);
    assert!(o.loaded.is_none());
    assert_eq!(o.tried, ["librccl-rma-rust.so"]);
}

#[test]
fn the_short_name_rust_resolves_to_librccl_rma_rust_so() {
    let i = install();
    let o = load(Some("rust"), Some(&paths(&[&i.dir])), NEWER);
    assert_eq!(o.tried, ["rust", "librccl-rma-rust.so"], "raw value first, then the prefixed name");
    assert_eq!(o.loaded, Some(("librccl-rma-rust.so".into(), 16, "rust-gin-rma".into())));
    // The raw value wins when a file of that name is on the path.
    let o = load(Some("rust"), Some(&paths(&[&i.stubs, &i.dir])), NEWER);
    assert_eq!(o.tried, ["rust"]);
    assert_eq!(o.loaded.map(|l| (l.0, l.1)), Some(("rust".into(), 14)));
    // A list: the first entry that loads wins.
    let o = load(Some("nosuch,rust"), Some(&paths(&[&i.dir])), PINNED);
    assert_eq!(o.tried, ["nosuch", "librccl-rma-nosuch.so", "rust", "librccl-rma-rust.so"]);
    assert_eq!(o.loaded.map(|l| (l.0, l.1)), Some(("librccl-rma-rust.so".into(), 15)));
    // A relative path is never prefixed.
    let o = load(Some("./rust"), Some(&paths(&[&i.dir])), NEWER);
    assert_eq!(o.tried, ["./rust"]);
}

#[test]
fn unset_none_and_static_plugin() {
    let i = install();
    let o = load(None, Some(&paths(&[&i.dir])), NEWER);
    assert_eq!(o.tried, ["librccl-rma.so"], "unset: RCCL's default name only");
    assert!(o.loaded.is_none(), "librccl-rma.so is not what this project installs");
    for none in ["none", "NONE", "None"] {
        let o = load(Some(none), Some(&paths(&[&i.dir])), NEWER);
        assert!(o.tried.is_empty() && o.loaded.is_none(), "{none}: no external plugin");
    }
    // A prefix of STATIC_PLUGIN opens the program itself: that dlopen never
    // fails, so no prefixed name is tried, and the program (which exports no
    // plugin symbols dynamically) yields no plugin. A short name must avoid
    // such prefixes ("rust" does).
    let o = load(Some("static"), Some(&paths(&[&i.dir])), NEWER);
    assert_eq!(o.tried, ["static"], "no librccl-rma-static.so attempt");
    assert!(o.loaded.is_none());
}

#[test]
fn the_version_choice_follows_the_symbols_a_library_exports() {
    let i = install();
    let s = paths(&[&i.stubs]);
    let v = |name: &str, order| load(Some(name), Some(&s), order).loaded.map(|l| l.1);
    assert_eq!(v("v14v13", NEWER), Some(14));
    assert_eq!(v("v14v13", NCCL_2_32), Some(14), "an older plugin still loads in NCCL 2.32's order");
    assert_eq!(v("v14v13", PINNED), Some(14));
    assert_eq!(v("gin13", NEWER), Some(13), "v13 falls back to ncclGinPlugin_v13");
    let o = load(Some("empty"), Some(&s), NEWER);
    assert_eq!(o.tried, ["empty", "librccl-rma-empty.so"]);
    assert!(o.loaded.is_none(), "a library without any version symbol is not a plugin");
    // Our library exports every version, each in its own layout.
    let lib = dlopen(Some(i.dir.join("librccl-rma-rust.so").to_str().unwrap()), None).unwrap();
    for ver in [17u32, 16, 15, 14, 13] {
        let (got, p) = pick_version(&lib, &[ver]).unwrap();
        assert_eq!(got, ver);
        assert_eq!(vtable_name(ver, p), "rust-gin-rma");
    }
    std::mem::forget(lib);
}

/// What a v13 plugin must pass in RCCL's wrapper, and what the other
/// versions' init gives RCCL: through the installed copy of the library.
#[test]
fn the_loaded_plugin_initializes_as_a_gin_proxy_backend() {
    let i = install();
    let lib = dlopen(Some(i.dir.join("librccl-rma-rust.so").to_str().unwrap()), None).unwrap();
    let (_, p) = pick_version(&lib, &[13]).unwrap();
    // SAFETY: ncclRmaPlugin_v13 of our library, in its layout.
    let v13 = unsafe { &*(p as *const NcclRmaV13) };
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointers; a NULL logger (the plugin logs to stderr).
    unsafe {
        assert_eq!(v13.init.unwrap()(&mut ctx, 1, None), NCCL_SUCCESS);
        let mut props: NcclNetProperties = std::mem::zeroed();
        assert_eq!(v13.get_properties.unwrap()(0, &mut props), NCCL_SUCCESS);
        assert_eq!(props.net_device_type, NCCL_NET_DEVICE_GIN_PROXY, "RCCL's v13 wrapper refuses anything else");
        let mut ndev = 0;
        assert_eq!(v13.devices.unwrap()(&mut ndev), NCCL_SUCCESS);
        assert!(ndev > 0, "RCCL disables a plugin with no devices");
        assert_eq!(v13.finalize.unwrap()(ctx), NCCL_SUCCESS);
    }
    std::mem::forget(lib);
}

/// The built library, opened with plain dlopen(3), resolves every exact
/// symbol RCCL dlsym()s, each a complete table of its version's layout: so
/// whichever RCCL (pinned, or newer) loads it, the first symbol in its order
/// resolves, and every callback its wrapper copies is there.
#[test]
fn the_built_library_resolves_the_exact_symbols_rccl_looks_up() {
    let so = std::ffi::CString::new(cdylib_path().to_str().unwrap()).unwrap();
    // SAFETY: dlopen of our own cdylib; dlsym of data symbols; the handle is
    // kept open (a Rust cdylib is not meant to be unloaded).
    let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {so:?} failed");
    let sym = |name: &str| {
        let c = std::ffi::CString::new(name).unwrap();
        // SAFETY: a NUL-terminated name and a live handle.
        unsafe { libc::dlsym(h, c.as_ptr()) as *const c_void }
    };
    let sizes = [
        (17, std::mem::size_of::<NcclRmaV17>()),
        (16, std::mem::size_of::<NcclRmaV16>()),
        (15, std::mem::size_of::<NcclRmaV15>()),
        (14, std::mem::size_of::<NcclRmaV14>()),
        (13, std::mem::size_of::<NcclRmaV13>()),
    ];
    for order in [PINNED, NEWER, NCCL_2_32] {
        let first = order.iter().find(|&&v| rccl_symbols(v).iter().any(|n| !sym(n).is_null()));
        assert_eq!(first, order.first(), "RCCL with order {order:?} would take another version");
    }
    for (v, size) in sizes {
        let p = sym(&format!("ncclRmaPlugin_v{v}"));
        assert!(!p.is_null(), "ncclRmaPlugin_v{v} is not exported");
        // SAFETY: the table is `size` bytes of pointers: a name, then callbacks.
        let words = unsafe { std::slice::from_raw_parts(p as *const usize, size / 8) };
        assert_eq!(vtable_name(v, p), "rust-gin-rma", "v{v}: name");
        let empty: Vec<usize> = (1..words.len()).filter(|&k| words[k] == 0).collect();
        assert!(empty.is_empty(), "ncclRmaPlugin_v{v}: callback slot(s) {empty:?} are NULL");
    }
    // The GIN backend's table is linked into librccl, not looked up by name;
    // the patch references this one symbol (patches/0003).
    assert!(!sym("ncclGinRustPlugin_v14").is_null(), "ncclGinRustPlugin_v14 is not exported");
    // And the v15 table, for an RCCL that syncs NCCL 2.32 (gin_v15.h).
    let p = sym("ncclGinRustPlugin_v15");
    assert!(!p.is_null(), "ncclGinRustPlugin_v15 is not exported");
    // SAFETY: ncclGin_v15_t: a name and 16 callbacks.
    let words = unsafe { std::slice::from_raw_parts(p as *const usize, 17) };
    assert!(words.iter().all(|&w| w != 0), "ncclGinRustPlugin_v15 has a NULL slot");
}

const CHILD: &str = "RUST_GIN_RMA_LOADER_CHILD";

/// The real dynamic linker: a child process with LD_LIBRARY_PATH naming the
/// install directory resolves NCCL_RMA_PLUGIN=rust with plain dlopen.
#[test]
fn the_dynamic_linker_resolves_rust_through_ld_library_path() {
    let i = install();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "loader_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &i.dir)
        .env("NCCL_RMA_PLUGIN", "rust")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("loader_child ... ok"), "the child ran:\n{text}");
}

#[test]
#[ignore = "run by the_dynamic_linker_resolves_rust_through_ld_library_path in a child process"]
fn loader_child() {
    // Run alone it would test the parent's environment, not the one set up
    // for it: fail rather than pass without having checked anything.
    assert!(
        std::env::var(CHILD).is_ok(),
        "loader_child runs only as the child of the_dynamic_linker_resolves_rust_through_ld_library_path"
    );
    let env = std::env::var("NCCL_RMA_PLUGIN").ok();
    let o = load(env.as_deref(), None, NEWER);
    assert_eq!(o.tried, ["rust", "librccl-rma-rust.so"]);
    assert_eq!(o.loaded, Some(("librccl-rma-rust.so".into(), 16, "rust-gin-rma".into())));
    let o = load(Some("librccl-rma-rust.so"), None, PINNED);
    assert_eq!(o.loaded.map(|l| l.1), Some(15));
}
