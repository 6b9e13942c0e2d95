//! The build script hands the layout list to the linker only after a program linked with it.

#![allow(clippy::unwrap_used)]

#[path = "../build.rs"]
mod build;

use std::path::Path;

use build::{Linking, link_arguments, links_with, wanted};

/// Linking as the host's `rustc` from `PATH` does, in a folder of its own.
fn host(name: &str) -> Linking {
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("switchyard-build-script-{name}-{}", std::process::id()));
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
fn only_a_release_build_that_asks_for_the_list_and_has_it_wants_it() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("layout").join("symbols.txt");
    assert!(wanted(Some("release"), Some("on"), &list));
    assert!(!wanted(Some("release"), None, &list), "opt-in: a default build never depends on it");
    assert!(!wanted(Some("release"), Some("off"), &list), "SWITCHYARD_LAYOUT=off");
    assert!(!wanted(Some("debug"), Some("on"), &list), "a dev or test build");
    assert!(!wanted(None, Some("on"), &list), "no profile said");
    assert!(!wanted(Some("release"), Some("on"), &list.with_file_name("missing.txt")), "no list");
}

#[test]
fn the_build_date_is_the_utc_day_of_source_date_epoch_else_of_now() {
    use std::time::{Duration, UNIX_EPOCH};
    let now = UNIX_EPOCH + Duration::from_secs(1_796_428_799); // 2026-12-04T23:59:59Z
    assert_eq!(build::build_date(None, now), "2026-12-04");
    assert_eq!(build::build_date(Some("0"), now), "1970-01-01");
    assert_eq!(build::build_date(Some("951782399"), now), "2000-02-28", "a second before midnight");
    assert_eq!(build::build_date(Some("951782400"), now), "2000-02-29", "a leap day");
    assert_eq!(build::build_date(Some("1709251200"), now), "2024-03-01");
    assert_eq!(build::build_date(Some("not a number"), now), "2026-12-04", "ignored");
}

#[test]
fn a_packaged_crate_names_the_commit_it_was_made_from() {
    let info = r#"{
  "git": {
    "sha1": "869708cbd2e1f0aa3b4c5d6e7f8091a2b3c4d5e6"
  },
  "path_in_vcs": "crates/switchyard-gateway"
}"#;
    assert_eq!(build::packaged_commit(info).as_deref(), Some("869708c"));
    assert_eq!(build::packaged_commit("{}"), None);
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("switchyard-build-script-package-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join(".cargo_vcs_info.json"), info).unwrap();
    assert_eq!(build::commit(&folder), "869708c");
    std::fs::remove_file(folder.join(".cargo_vcs_info.json")).unwrap();
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn outside_a_checkout_the_commit_is_unknown() {
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("switchyard-build-script-nogit-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let inside_a_checkout = std::process::Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(&folder)
        .output()
        .is_ok_and(|output| output.status.success());
    if !inside_a_checkout {
        assert_eq!(build::commit(&folder), "unknown");
        assert!(build::head_files(&folder).is_empty());
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn in_a_checkout_the_script_watches_head_and_its_branch() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let head =
        std::process::Command::new("git").args(["rev-parse", "--git-path", "HEAD"]).current_dir(dir).output();
    let Ok(head) = head.map(|output| String::from_utf8(output.stdout).unwrap()) else { return };
    if head.trim().is_empty() {
        return; // not a checkout (a packaged crate)
    }
    let files = build::head_files(dir);
    assert!(files.contains(&dir.join(head.trim())), "{files:?}");
    assert!(files.iter().all(|file| file.is_file()), "only files that exist: {files:?}");
    let branch = std::process::Command::new("git")
        .args(["symbolic-ref", "-q", "HEAD"])
        .current_dir(dir)
        .output()
        .unwrap();
    let branch = String::from_utf8(branch.stdout).unwrap();
    if let Some(name) = branch.trim().rsplit('/').next().filter(|name| !name.is_empty()) {
        let loose = files.iter().any(|file| file.ends_with(format!("refs/heads/{name}")));
        let packed = files.iter().any(|file| file.ends_with("packed-refs"));
        assert!(loose || packed, "the branch `{name}` is watched: {files:?}");
    }
}
