//! Lays out the release binary's request path in one run of pages.
//!
//! `layout/symbols.txt` lists the functions a request runs (written by `bench/layout`, most
//! run first). Handed to lld as `--symbol-ordering-file`, it puts them side by side, so that
//! a request arriving on a quiet connection brings its code back into the caches in half the
//! pages (docs/BENCHMARKS.md). Only lld reads that option, so the list goes to the linker only
//! where lld is sure to be it: release builds for x86_64 Linux with Rust 1.90 or later, whose
//! default linker it is, and no linker chosen by hand. `SWITCHYARD_LAYOUT=off` leaves it out.
//! A name the binary no longer has is skipped by the linker, without a warning.

use std::path::Path;
use std::process::Command;

/// What decides whether the list reaches the linker, read from the build's environment.
pub(crate) struct Build {
    /// `PROFILE`: `release` for the release profile and those that inherit from it.
    pub(crate) profile: String,
    /// `TARGET`, the triple built for.
    pub(crate) target: String,
    /// The minor version of `rustc` (`1.N`), when it could be read.
    pub(crate) rustc_minor: Option<u32>,
    /// A linker was chosen by hand: `RUSTC_LINKER`, or a linker flag in `RUSTFLAGS`.
    pub(crate) linker_chosen: bool,
    /// `SWITCHYARD_LAYOUT=off`.
    pub(crate) turned_off: bool,
}

/// The link arguments that hand `symbols` to the linker, or why there are none.
pub(crate) fn link_arguments(build: &Build, symbols: &Path) -> Result<[String; 2], &'static str> {
    if build.turned_off {
        return Err("SWITCHYARD_LAYOUT=off");
    }
    if build.profile != "release" {
        return Err("not a release build");
    }
    if build.target != "x86_64-unknown-linux-gnu" {
        return Err("lld is not the target's default linker");
    }
    if build.rustc_minor.is_none_or(|minor| minor < 90) {
        return Err("lld is the default linker from Rust 1.90");
    }
    if build.linker_chosen {
        return Err("a linker was chosen by hand");
    }
    Ok([
        format!("-Wl,--symbol-ordering-file={}", symbols.display()),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ])
}

/// `N` of `rustc 1.N.P ...`.
pub(crate) fn minor_version(version: &str) -> Option<u32> {
    let number = version.split_whitespace().nth(1)?;
    number.split('.').nth(1)?.parse().ok()
}

/// Whether `rustflags` (`CARGO_ENCODED_RUSTFLAGS`, split on 0x1f) choose the linker.
pub(crate) fn chooses_linker(rustflags: &str) -> bool {
    rustflags.split('\u{1f}').any(|flag| {
        flag.contains("linker") || flag.contains("fuse-ld") || flag.contains("link-self-contained")
    })
}

#[allow(dead_code, reason = "tests/build_script.rs includes this file for its functions only")]
fn main() {
    let symbols = Path::new(env!("CARGO_MANIFEST_DIR")).join("layout").join("symbols.txt");
    println!("cargo::rerun-if-changed={}", symbols.display());
    println!("cargo::rerun-if-env-changed=SWITCHYARD_LAYOUT");
    let var = |name| std::env::var(name).unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc).arg("-V").output().ok();
    let build = Build {
        profile: var("PROFILE"),
        target: var("TARGET"),
        rustc_minor: version.and_then(|out| minor_version(&String::from_utf8_lossy(&out.stdout))),
        linker_chosen: std::env::var_os("RUSTC_LINKER").is_some()
            || chooses_linker(&var("CARGO_ENCODED_RUSTFLAGS")),
        turned_off: var("SWITCHYARD_LAYOUT") == "off",
    };
    if let Ok(arguments) = link_arguments(&build, &symbols) {
        for argument in arguments {
            println!("cargo::rustc-link-arg-bin=switchyard={argument}");
        }
    }
}
