//! Lays out the release binary's request path in one run of pages.
//!
//! `layout/symbols.txt` lists the functions a request runs (written by `bench/layout`, most
//! run first). Handed to lld as `--symbol-ordering-file`, it puts them side by side, so that
//! a request arriving on a quiet connection brings its code back into the caches from half the
//! pages (docs/BENCHMARKS.md). Not every linker knows the option (GNU ld does not), and which
//! one links depends on the toolchain and on settings a build script only partly sees, so the
//! list goes to the linker only after an empty program linked with it, with this build's
//! compiler, target, flags and linker. Release builds only; `SWITCHYARD_LAYOUT=off` leaves it
//! out, as does a checkout without the list. A name the binary no longer has is skipped by the
//! linker, without a warning.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The link arguments that hand `symbols` to the linker. `-Xlinker` passes each as it is, a
/// path with a comma in it too.
pub(crate) fn link_arguments(symbols: &Path) -> [String; 4] {
    [
        "-Xlinker".to_owned(),
        format!("--symbol-ordering-file={}", symbols.display()),
        "-Xlinker".to_owned(),
        "--no-warn-symbol-ordering".to_owned(),
    ]
}

/// Whether the list is wanted at all: in a release build (`PROFILE`), not turned off with
/// `SWITCHYARD_LAYOUT=off`, and present in the checkout.
pub(crate) fn wanted(profile: Option<&str>, switch: Option<&str>, list: &Path) -> bool {
    profile == Some("release") && switch != Some("off") && list.is_file()
}

/// How the probe program is compiled and linked: as this build's binary would be.
pub(crate) struct Linking {
    /// The compiler (`RUSTC`).
    pub(crate) rustc: PathBuf,
    /// The target triple (`TARGET`); `None` for the host.
    pub(crate) target: Option<String>,
    /// The build's compiler flags (`CARGO_ENCODED_RUSTFLAGS`, split).
    pub(crate) flags: Vec<String>,
    /// A linker chosen for the target (`RUSTC_LINKER`).
    pub(crate) linker: Option<String>,
    /// Where the probe's files go (`OUT_DIR`).
    pub(crate) folder: PathBuf,
}

/// Whether an empty program links with `arguments` added, as `linking` says.
pub(crate) fn links_with(linking: &Linking, arguments: &[String]) -> bool {
    let source = linking.folder.join("layout_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut rustc = Command::new(&linking.rustc);
    rustc.arg("--crate-name=layout_probe").arg("--edition=2021").arg("-o");
    rustc.arg(linking.folder.join("layout_probe")).arg(&source).args(&linking.flags);
    if let Some(target) = &linking.target {
        rustc.arg(format!("--target={target}"));
    }
    if let Some(linker) = &linking.linker {
        rustc.arg(format!("-Clinker={linker}"));
    }
    for argument in arguments {
        rustc.arg(format!("-Clink-arg={argument}"));
    }
    rustc.stdout(Stdio::null()).stderr(Stdio::null());
    rustc.status().is_ok_and(|status| status.success())
}

#[allow(dead_code, reason = "tests/build_script.rs includes this file for its functions only")]
fn main() {
    let symbols = Path::new(env!("CARGO_MANIFEST_DIR")).join("layout").join("symbols.txt");
    println!("cargo::rerun-if-changed=build.rs");
    // A path that does not exist would have the script rerun on every build.
    if symbols.is_file() {
        println!("cargo::rerun-if-changed={}", symbols.display());
    }
    for name in ["SWITCHYARD_LAYOUT", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS"] {
        println!("cargo::rerun-if-env-changed={name}");
    }
    let var = |name| std::env::var(name).ok();
    if !wanted(var("PROFILE").as_deref(), var("SWITCHYARD_LAYOUT").as_deref(), &symbols) {
        return;
    }
    let (Some(rustc), Some(folder)) = (var("RUSTC"), var("OUT_DIR")) else {
        return;
    };
    let flags = var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let linking = Linking {
        rustc: rustc.into(),
        target: var("TARGET"),
        flags: flags.split('\u{1f}').filter(|flag| !flag.is_empty()).map(str::to_owned).collect(),
        linker: var("RUSTC_LINKER"),
        folder: folder.into(),
    };
    let arguments = link_arguments(&symbols);
    if links_with(&linking, &arguments) {
        for argument in arguments {
            println!("cargo::rustc-link-arg-bin=switchyard={argument}");
        }
    }
}
