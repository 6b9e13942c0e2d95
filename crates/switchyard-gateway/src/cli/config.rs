//! `switchyard config check`: validation only.

use std::path::Path;
use std::process::ExitCode;

use switchyard_gateway::config::{self, UnsetEnv};

use super::env;

/// Validates `file`; prints a summary, or every problem with a non-zero exit. An `env://`
/// variable that is not set is a warning (CI checks files without production secrets), or with
/// `strict` a problem, as `serve` and `doctor` always make it.
pub(crate) fn check(file: &Path, strict: bool) -> ExitCode {
    let unset_env = if strict { UnsetEnv::Error } else { UnsetEnv::Warning };
    match config::check_file(file, &env, unset_env) {
        Ok(checked) => {
            for warning in &checked.warnings {
                eprintln!("warning: {}: {}: {}", file.display(), warning.path, warning.message);
            }
            if !checked.warnings.is_empty() {
                eprintln!(
                    "  (serve and doctor refuse to start while a variable is unset; --strict makes it an error here too)"
                );
            }
            let loaded = checked.loaded;
            // What `serve` refuses at start is a problem of the file too (with unset variables
            // allowed, a key they would give may be what is missing: a warning then).
            if let config::Exposure::Refused(missing) = config::exposure(loaded.listen, &loaded) {
                let refusal = config::refusal(loaded.listen, &loaded, &missing);
                if strict {
                    eprintln!("{}: serve refuses to start: {refusal}", file.display());
                    return ExitCode::FAILURE;
                }
                eprintln!("warning: {}: serve refuses to start: {refusal}", file.display());
            }
            let routes: Vec<&str> = loaded.router.routes().map(|r| r.name()).collect();
            println!(
                "{}: ok ({}, routes: {})",
                file.display(),
                super::text::counted(loaded.providers.len(), "provider"),
                routes.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
