//! The RCCL patch series applied to a real RCCL checkout (RCCL_SRC): a copy
//! of its HEAD gets scripts/apply-rccl-patches.sh, which fails on drift.
//!
//! Without RCCL_SRC the test is reported as IGNORED, never as passed: this
//! machine has no RCCL checkout, so the series was not applied to RCCL.
//! `RCCL_SRC=/path/to/rocm-systems cargo test --test patch_series_rccl_src`
//! runs it (docs/building-rccl.md).

#[path = "support/scratch.rs"]
mod scratch;

use libtest_mimic::{Arguments, Failed, Trial};
use scratch::{text, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The RCCL revision the series is written against (tests/patch_series.rs
/// checks the series itself).
const PIN: &str = "66e4315fa6f05511f37860f8ceebfa26805fbca1";
const NAME: &str = "apply_series_to_rccl_src_checkout";

fn git(dir: &Path, args: &[&str]) -> Result<String, Failed> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().map_err(|e| format!("git: {e}"))?;
    if !out.status.success() {
        return Err(format!("git {args:?} in {}: {}", dir.display(), text(&out)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn apply(src: PathBuf) -> Result<(), Failed> {
    let top = PathBuf::from(git(&src, &["rev-parse", "--show-toplevel"])?);
    let head = git(&top, &["rev-parse", "HEAD"])?;
    // A cheap copy of HEAD: a shared clone, checked out sparsely in a monorepo.
    let tmp = TempDir::new("rccl-src");
    let copy = tmp.0.join("rccl");
    let out = Command::new("git")
        .args(["clone", "--quiet", "--shared", "--no-checkout"])
        .arg(&top)
        .arg(&copy)
        .output()
        .map_err(|e| format!("git clone: {e}"))?;
    if !out.status.success() {
        return Err(format!("cloning RCCL_SRC={}: {}", top.display(), text(&out)).into());
    }
    if top.join("projects/rccl").is_dir() {
        git(&copy, &["sparse-checkout", "set", "projects/rccl"])?;
    }
    git(&copy, &["checkout", "--quiet", "--detach", &head])?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/apply-rccl-patches.sh");
    let out = Command::new(script).arg(&copy).output().map_err(|e| format!("apply script: {e}"))?;
    println!("{}", text(&out));
    if !out.status.success() {
        return Err(format!(
            "THE SERIES DOES NOT APPLY to RCCL_SRC={} at {head} (pin {PIN}); see the drift report above",
            top.display()
        )
        .into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let src = std::env::var_os("RCCL_SRC").filter(|s| !s.is_empty()).map(PathBuf::from);
    let trial = match src {
        Some(src) => Trial::test(NAME, move || apply(src)),
        None => {
            eprintln!("**********************************************************************");
            eprintln!("RCCL_SRC is not set: the patch series was NOT applied to an RCCL");
            eprintln!("checkout. {NAME} is reported as ignored, not passed.");
            eprintln!("**********************************************************************");
            Trial::test(NAME, || Err("RCCL_SRC is not set; this test must not run without it".into()))
                .with_ignored_flag(true)
        }
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}
