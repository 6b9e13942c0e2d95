//! `switchyard config check`: validation only.

use std::path::Path;
use std::process::ExitCode;

use switchyard_gateway::config;

use super::env;

/// Validates `file`; prints a summary, or every problem with a non-zero exit.
pub(crate) fn check(file: &Path) -> ExitCode {
    match config::load_file(file, &env) {
        Ok(loaded) => {
            let routes: Vec<&str> = loaded.router.routes().map(|r| r.name()).collect();
            println!(
                "{}: ok ({} providers, routes: {})",
                file.display(),
                loaded.providers.len(),
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
