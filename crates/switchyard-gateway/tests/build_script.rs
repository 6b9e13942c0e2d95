//! The build script hands the layout list to the linker only where lld is sure to link.

#[path = "../build.rs"]
mod build;

use std::path::Path;

use build::{Build, chooses_linker, link_arguments, minor_version};

fn release() -> Build {
    Build {
        profile: "release".into(),
        target: "x86_64-unknown-linux-gnu".into(),
        rustc_minor: Some(95),
        linker_chosen: false,
        turned_off: false,
    }
}

#[test]
fn a_release_build_for_x86_64_linux_orders_its_symbols() {
    let arguments = link_arguments(&release(), Path::new("/repo/layout/symbols.txt")).unwrap();
    assert_eq!(
        arguments,
        ["-Wl,--symbol-ordering-file=/repo/layout/symbols.txt", "-Wl,--no-warn-symbol-ordering"]
    );
}

/// One way a build differs from [`release`].
type Change = fn(&mut Build);

#[test]
fn the_list_stays_out_wherever_the_linker_may_not_be_lld() {
    let symbols = Path::new("symbols.txt");
    let cases: [(&str, Change); 6] = [
        ("dev profile", |b| b.profile = "debug".into()),
        ("another target", |b| b.target = "aarch64-unknown-linux-gnu".into()),
        ("musl", |b| b.target = "x86_64-unknown-linux-musl".into()),
        ("rustc before 1.90", |b| b.rustc_minor = Some(89)),
        ("rustc unknown", |b| b.rustc_minor = None),
        ("linker chosen", |b| b.linker_chosen = true),
    ];
    for (case, change) in cases {
        let mut build = release();
        change(&mut build);
        assert!(link_arguments(&build, symbols).is_err(), "{case}");
    }
    let off = Build { turned_off: true, ..release() };
    assert_eq!(link_arguments(&off, symbols), Err("SWITCHYARD_LAYOUT=off"));
}

#[test]
fn versions_and_linker_flags_are_read() {
    assert_eq!(minor_version("rustc 1.95.0 (59807616e 2026-04-14)\n"), Some(95));
    assert_eq!(minor_version("rustc 1.90.0-nightly (abc 2025-07-01)"), Some(90));
    assert_eq!(minor_version("garbage"), None);
    assert!(chooses_linker("-C\u{1f}linker=clang"));
    assert!(chooses_linker("-Clink-arg=-fuse-ld=mold"));
    assert!(chooses_linker("-Zlinker-features=-lld"));
    assert!(chooses_linker("-Clink-self-contained=-linker"));
    assert!(!chooses_linker("-Ctarget-cpu=native\u{1f}-Cforce-frame-pointers=yes"));
    assert!(!chooses_linker(""));
}
