//! `switchyard-mock [--listen ADDR] [--threads N] [--tls-cert PEM --tls-key PEM]`: serves the
//! mock and prints `listening on ADDR` as its first stdout line, so scripts can start it on
//! port 0 and read the port it got.

use std::io::Write as _;
use std::process::ExitCode;

const USAGE: &str = "usage: switchyard-mock [--listen 127.0.0.1:PORT] [--threads N] [--tls-cert PEM --tls-key PEM]\n\n\
    Serves a mock OpenAI/Anthropic upstream; behaviour is chosen by the URL path, e.g.\n\
    POST /status=500,ok/v1/chat/completions or POST /ok~chunks=8~gap=50ms/v1/messages.\n\
    --listen   address to bind (default 127.0.0.1:0, a free port)\n\
    --threads  runtime worker threads (default: available cores)\n\
    --tls-cert serve HTTPS with this PEM certificate chain (needs --tls-key)\n\
    --tls-key  the certificate's PEM private key\n\n\
    Every scenario (ok, tools, custom, filter, think, status=NNN, ratelimit=S, quota, auth,\n\
    context, hang, reset, cut=N, noterm, noend, badevent=N, stall=N, keepalive=N, errevent=N, down=D, model429=M,\n\
    noprefill), its modifiers (latency, jitter, chunks, gap, words, tools) and the\n\
    /_stats and /_reset endpoints: crates/switchyard-mock/README.md";

struct Options {
    listen: String,
    threads: Option<usize>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options =
        Options { listen: "127.0.0.1:0".to_owned(), threads: None, tls_cert: None, tls_key: None };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => options.listen = value()?,
            "--threads" => {
                let text = value()?;
                match text.parse::<usize>() {
                    Ok(n) if n > 0 => options.threads = Some(n),
                    _ => return Err(format!("--threads needs a positive number, got `{text}`")),
                }
            }
            "--tls-cert" => options.tls_cert = Some(value()?),
            "--tls-key" => options.tls_key = Some(value()?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if options.tls_cert.is_some() != options.tls_key.is_some() {
        return Err("--tls-cert and --tls-key go together".to_owned());
    }
    Ok(options)
}

/// The TLS identity of `--tls-cert` and `--tls-key`, when given.
fn identity(options: &Options) -> Result<Option<switchyard_mock::TlsIdentity>, String> {
    let (Some(cert), Some(key)) = (&options.tls_cert, &options.tls_key) else { return Ok(None) };
    let read = |path: &str| std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"));
    switchyard_mock::TlsIdentity::from_pem(&read(cert)?, &read(key)?).map(Some)
}

fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("switchyard-mock: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let identity = match identity(&options) {
        Ok(identity) => identity,
        Err(message) => {
            eprintln!("switchyard-mock: {message}");
            return ExitCode::from(2);
        }
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(threads) = options.threads {
        runtime.worker_threads(threads);
    }
    let runtime = match runtime.build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("switchyard-mock: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&options.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
        let addr = listener.local_addr().map_err(|e| format!("cannot read the bound address: {e}"))?;
        let mut stdout = std::io::stdout();
        // Scripts block on this line to learn the port; it must not sit in a buffer.
        writeln!(stdout, "listening on {addr}")
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("cannot write to stdout: {e}"))?;
        let served = match &identity {
            Some(identity) => switchyard_mock::serve_tls(listener, identity).await,
            None => switchyard_mock::serve(listener).await,
        };
        served.map_err(|e| format!("server stopped: {e}"))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchyard-mock: {message}");
            ExitCode::FAILURE
        }
    }
}
