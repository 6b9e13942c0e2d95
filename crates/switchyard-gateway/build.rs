//! Names the build for `switchyard --version` (its commit and date), and lays out the release
//! binary's request path in one run of pages.
//!
//! The commit is `git rev-parse --short HEAD` of the checkout, or the commit a packaged crate
//! was made from (`.cargo_vcs_info.json`), else `unknown`; the script reruns when HEAD moves
//! (its file, its reflog, the branch it points to), not at every build. The date is UTC, of
//! `SOURCE_DATE_EPOCH` when set (reproducible builds), else of the build.
//!
//! `layout/symbols.txt` lists the functions a request runs (written by `bench/run layout`, most
//! run first). Handed to lld as `--symbol-ordering-file`, it puts them side by side, so that
//! a request arriving on a quiet connection brings its code back into the caches from half the
//! pages (docs/BENCHMARKS.md). Opt-in (`SWITCHYARD_LAYOUT=on`, which the benchmarks' builds
//! set), because its names carry compiler hashes that go stale with any dependency bump or
//! compiler: a default build never depends on it, and `bench/run layout --check` says how much
//! of it a release binary still has (`bench/run layout` writes it anew). Not every linker
//! knows the option (GNU ld does not), and which one links depends on the toolchain and on
//! settings a build script only partly sees, so the list goes to the linker only after an
//! empty program linked with it, with this build's compiler, target, flags and linker. Release
//! builds only. A name the binary no longer has is skipped by the linker, without a warning.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// Runs `git` with `args` in `dir`; its output, trimmed, when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).current_dir(dir).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The commit the crate in `dir` is built from: its checkout's short HEAD; in a packaged crate
/// (`cargo install`), the commit `.cargo_vcs_info.json` names (never a checkout around the
/// package); else `unknown`.
pub(crate) fn commit(dir: &Path) -> String {
    if let Ok(info) = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")) {
        return packaged_commit(&info).unwrap_or_else(|| "unknown".to_owned());
    }
    git(dir, &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
}

/// The short commit of a `.cargo_vcs_info.json` (`"git": { "sha1": "…" }`).
pub(crate) fn packaged_commit(info: &str) -> Option<String> {
    let after = &info[info.find("\"sha1\"")? + 6..];
    let sha = after.split('"').nth(1)?;
    (sha.len() >= 7 && sha.chars().all(|c| c.is_ascii_hexdigit())).then(|| sha[..7].to_owned())
}

/// The files whose change moves HEAD in the checkout around `dir`: HEAD itself, its reflog
/// (written at every commit, checkout and reset), the branch it points to and the packed refs;
/// those that exist (a missing one would rerun the script at every build).
pub(crate) fn head_files(dir: &Path) -> Vec<PathBuf> {
    let mut names = vec!["HEAD".to_owned(), "logs/HEAD".to_owned(), "packed-refs".to_owned()];
    names.extend(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    names
        .iter()
        .filter_map(|name| git(dir, &["rev-parse", "--git-path", name]))
        .map(|path| dir.join(path))
        .filter(|path| path.is_file())
        .collect()
}

/// `YYYY-MM-DD`, UTC, of `SOURCE_DATE_EPOCH` (seconds) when it is set and a number, else of
/// `now`.
pub(crate) fn build_date(source_date_epoch: Option<&str>, now: SystemTime) -> String {
    let seconds = source_date_epoch
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or_else(|| now.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs()));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
    let days = (seconds / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Hands the commit and the date to the compiler as `SWITCHYARD_COMMIT` and
/// `SWITCHYARD_BUILD_DATE`.
fn name_the_build(dir: &Path) {
    for file in head_files(dir) {
        println!("cargo::rerun-if-changed={}", file.display());
    }
    let packaged = dir.join(".cargo_vcs_info.json");
    if packaged.is_file() {
        println!("cargo::rerun-if-changed={}", packaged.display());
    }
    println!("cargo::rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo::rustc-env=SWITCHYARD_COMMIT={}", commit(dir));
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok();
    println!("cargo::rustc-env=SWITCHYARD_BUILD_DATE={}", build_date(epoch.as_deref(), SystemTime::now()));
}

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

/// Whether the list is wanted at all: asked for (`SWITCHYARD_LAYOUT=on`), in a release build
/// (`PROFILE`), and present in the checkout.
pub(crate) fn wanted(profile: Option<&str>, switch: Option<&str>, list: &Path) -> bool {
    profile == Some("release") && switch == Some("on") && list.is_file()
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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    name_the_build(dir);
    let symbols = dir.join("layout").join("symbols.txt");
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
