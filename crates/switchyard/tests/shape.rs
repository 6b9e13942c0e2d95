//! The workspace's shape holds: no function longer than [`MAX_LINES`] lines, so each behaviour
//! keeps a room of its own instead of growing inside one long loop. Counted from the `fn`
//! line to its closing brace, in every source file of every crate of the workspace (its
//! `src`, not its tests).

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 80;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the crate's src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text with string and char literals and comments blanked (their braces do not count),
/// line breaks kept.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        let skip = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            rest.find("*/").map_or(rest.len(), |end| end + 2)
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            rest[body..].find(&close).map_or(rest.len(), |end| body + end + close.len())
        } else if rest.starts_with('"') {
            string_end(rest)
        } else if rest.starts_with('\'') && char_literal_len(rest).is_some() {
            char_literal_len(rest).unwrap_or(1)
        } else {
            0
        };
        if skip == 0 {
            out.push(bytes[i] as char);
            i += 1;
        } else {
            out.extend(rest[..skip].chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
            i += skip;
        }
    }
    out
}

fn raw_string_start(rest: &str) -> Option<usize> {
    let after = rest.strip_prefix("br").or_else(|| rest.strip_prefix('r'))?;
    let hashes = after.bytes().take_while(|b| *b == b'#').count();
    after[hashes..].starts_with('"').then_some(hashes + usize::from(rest.starts_with('b')))
}

fn string_end(rest: &str) -> usize {
    let bytes = rest.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// `'{'`, `'\n'`, `'\''`: a char literal's length; `None` for a lifetime.
fn char_literal_len(rest: &str) -> Option<usize> {
    let mut chars = rest.char_indices().skip(1);
    let (_, first) = chars.next()?;
    if first == '\\' {
        let end = rest[2..].find('\'')?;
        return Some(end + 3);
    }
    let (at, close) = chars.next()?;
    (close == '\'').then_some(at + 1)
}

/// Every function with a body: its name, first line, and length in lines.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(at) = line.find("fn ").filter(|at| *at == 0 || line[..*at].ends_with([' ', '('])) else {
            continue;
        };
        let before = line[..at].trim();
        let is_item = before.is_empty()
            || before.split_whitespace().all(|w| {
                matches!(w, "pub" | "async" | "const" | "unsafe" | "extern" | "default")
                    || w.starts_with("pub(")
            });
        if !is_item {
            continue;
        }
        let name: String = line[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // Find the body's opening brace (a `;` first means no body), then its close.
        let mut depth = 0usize;
        let mut opened = false;
        'scan: for (offset, text) in lines[start..].iter().enumerate() {
            let from = if offset == 0 { at } else { 0 };
            for c in text[from..].chars() {
                match c {
                    ';' if !opened && depth == 0 => break 'scan,
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth = depth.saturating_sub(1);
                        if opened && depth == 0 {
                            found.push((name.clone(), start + 1, offset + 1));
                            break 'scan;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    found
}

#[test]
fn no_function_of_any_crate_is_longer_than_the_bound() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("the workspace's crates are readable") {
        let src = entry.expect("a directory entry").path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "every crate's sources: {}", files.len());
    files.sort();
    let mut long = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source file is readable");
        for (name, line, length) in functions(&text) {
            if length > MAX_LINES {
                long.push(format!("{}:{line} fn {name}: {length} lines", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines; split them into named steps:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_counter_sees_bodies_not_braces_in_strings_or_signatures_without_bodies() {
    let text = "fn short() {\n    let s = \"{{ not a brace }\";\n    let c = '{';\n}\ntrait T {\n    fn declared(&self);\n}\nfn long<'a>(x: &'a str) {\n    // }\n    x;\n}\n";
    let found = functions(text);
    assert_eq!(found, vec![("short".to_owned(), 1, 4), ("long".to_owned(), 8, 4)]);
}
