//! The build script hands the layout list to the linker only after a program linked with it.

#![allow(clippy::unwrap_used)]

#[path = "../build.rs"]
mod build;

use std::path::Path;

use build::{Linking, link_arguments, links_with, wanted};

/// Linking as the host's `rustc` from `PATH` does, in a folder of its own.
fn host(name: &str) -> Linking {
    let folder = std::env::temp_dir().join(format!("switchyard-build-script-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    Linking { rustc: "rustc".into(), target: None, flags: Vec::new(), linker: None, folder }
}

#[test]
fn each_argument_reaches_the_linker_whole() {
    let arguments = link_arguments(Path::new("/repo, with a comma/layout/symbols.txt"));
    assert_eq!(
        arguments,
        [
            "-Xlinker",
            "--symbol-ordering-file=/repo, with a comma/layout/symbols.txt",
            "-Xlinker",
            "--no-warn-symbol-ordering"
        ]
    );
}

#[test]
fn the_probe_tells_a_link_that_works_from_one_that_fails() {
    let linking = host("probe");
    assert!(links_with(&linking, &[]), "an empty program links with no arguments added");
    let unknown = ["-Xlinker".to_owned(), "--switchyard-no-such-option".to_owned()];
    assert!(!links_with(&linking, &unknown), "a linker option nobody knows fails the link");
    let elsewhere = Linking { linker: Some("/nonexistent/cc".into()), ..host("linker") };
    assert!(!links_with(&elsewhere, &[]), "the linker chosen for the build is the one tried");
    let flagged = Linking { flags: vec!["-Cno-such-flag".into()], ..host("flags") };
    assert!(!links_with(&flagged, &[]), "the build's flags are the ones passed");
    for linking in [linking, elsewhere, flagged] {
        std::fs::remove_dir_all(&linking.folder).unwrap();
    }
}

#[test]
fn only_a_release_build_with_the_list_and_no_switch_off_wants_it() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("layout").join("symbols.txt");
    assert!(wanted(Some("release"), None, &list));
    assert!(wanted(Some("release"), Some("on"), &list));
    assert!(!wanted(Some("debug"), None, &list), "a dev or test build");
    assert!(!wanted(None, None, &list), "no profile said");
    assert!(!wanted(Some("release"), Some("off"), &list), "SWITCHYARD_LAYOUT=off");
    assert!(!wanted(Some("release"), None, &list.with_file_name("missing.txt")), "no list");
}
