//! Small helpers shared by the build-script modules.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Reads an environment variable and tells cargo to rerun when it changes.
pub fn env(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

pub fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
}

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
}

/// `target/<profile>` (or `target/<triple>/<profile>`): OUT_DIR is
/// `<that>/build/<pkg>-<hash>/out`.
pub fn profile_dir() -> PathBuf {
    let out = out_dir();
    out.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| fail("cannot derive the target directory from OUT_DIR"))
}

/// Stops the build with a message cargo shows as is.
pub fn fail(msg: &str) -> ! {
    eprintln!("\nerror: rust-gin build: {msg}\n");
    std::process::exit(1);
}

/// Runs a command; on failure stops the build with its command line and output.
pub fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("{what}: cannot run {:?}: {e}", cmd.get_program())));
    if !out.status.success() {
        fail(&format!(
            "{what} failed ({})\ncommand: {:?}\n{}{}",
            out.status,
            cmd,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
}

/// stdout and stderr of a command together, or None when it cannot start.
pub fn output_text(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    Some(s)
}
