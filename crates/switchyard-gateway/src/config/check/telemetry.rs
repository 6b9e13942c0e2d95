//! Trace export, checked: the `telemetry:` block over the standard `OTEL_*` variables, each
//! problem named where its value came from.

use std::time::Duration;

use switchyard::credential::Secret;

use super::Validator;
use crate::config::file;
use crate::telemetry::{OtlpProtocol, SamplerSetting, TelemetrySettings};

impl Validator<'_> {
    /// The Redis store of `state:`, not yet connected: it connects when the gateway starts.
    /// Trace export: the `telemetry:` block over the standard `OTEL_*` variables. `None` when
    /// neither asks for it, or `OTEL_SDK_DISABLED=true`.
    pub(super) fn telemetry(&mut self, config: Option<&file::TelemetryConfig>) -> Option<TelemetrySettings> {
        let var = |name: &str| (self.env)(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        match var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return None,
            Some(other) => {
                self.problem(
                    "OTEL_TRACES_EXPORTER",
                    format!("`{other}` is not an exporter Switchyard has: otlp, or none"),
                );
                return None;
            }
        }
        let endpoint = config.and_then(|c| c.endpoint.clone());
        let (traces_url, origin) = match (
            &endpoint,
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(base), _, _) => (traces_url(base), "telemetry.endpoint"),
            (None, Some(url), _) => (url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            (None, None, Some(base)) => (traces_url(&base), "OTEL_EXPORTER_OTLP_ENDPOINT"),
            (None, None, None) if config.is_some() => {
                (traces_url("http://localhost:4318"), "telemetry.endpoint")
            }
            (None, None, None) => return None,
        };
        let before = self.problems.len();
        if !(traces_url.starts_with("http://") || traces_url.starts_with("https://")) {
            self.problem(
                origin,
                format!("`{traces_url}` is not an http:// or https:// URL of an OTLP/HTTP collector"),
            );
        }
        // Each problem names where its value came from: the file, or the variable.
        let protocol = config
            .and_then(|c| c.protocol.clone().map(|p| (p, "telemetry.protocol")))
            .or_else(|| {
                var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").map(|p| (p, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            })
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| (p, "OTEL_EXPORTER_OTLP_PROTOCOL")));
        let protocol = match protocol.as_ref().map(|(p, origin)| (p.trim(), *origin)) {
            None | Some(("http/protobuf", _)) => OtlpProtocol::Protobuf,
            Some(("http/json", _)) => OtlpProtocol::Json,
            Some((other, origin)) => {
                self.problem(
                    origin,
                    format!("`{other}` is not supported: use http/protobuf (the collector's port 4318) or http/json"),
                );
                OtlpProtocol::Protobuf
            }
        };
        let (sampler_name, sampler_origin) = config
            .and_then(|c| c.sampler.clone().map(|s| (s, "telemetry.sampler")))
            .or_else(|| var("OTEL_TRACES_SAMPLER").map(|s| (s, "OTEL_TRACES_SAMPLER")))
            .unwrap_or_else(|| ("parentbased_always_on".to_owned(), "telemetry.sampler"));
        let sampler_arg = match config.and_then(|c| c.sampler_arg) {
            Some(arg) => Some(arg),
            None => match var("OTEL_TRACES_SAMPLER_ARG") {
                Some(text) => match text.parse::<f64>() {
                    Ok(arg) => Some(arg),
                    Err(_) => {
                        self.problem("OTEL_TRACES_SAMPLER_ARG", format!("`{text}` is not a number"));
                        None
                    }
                },
                None => None,
            },
        };
        let sampler = match SamplerSetting::parse(&sampler_name, sampler_arg) {
            Ok(sampler) => sampler,
            Err(problem) => {
                self.problem(sampler_origin, problem);
                SamplerSetting::ParentBasedAlwaysOn
            }
        };
        let mut headers = Vec::new();
        match config.filter(|c| !c.headers.is_empty()) {
            Some(config) => {
                for (name, value) in &config.headers {
                    if let Some((secret, _)) = self.secret(&format!("telemetry.headers.{name}"), value) {
                        headers.push((name.clone(), secret));
                    }
                }
            }
            None => {
                let listed =
                    var("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or_else(|| var("OTEL_EXPORTER_OTLP_HEADERS"));
                for pair in listed.iter().flat_map(|text| text.split(',')) {
                    match pair.split_once('=') {
                        Some((name, value)) if !name.trim().is_empty() => {
                            headers.push((name.trim().to_owned(), Secret::new(percent_decode(value.trim()))));
                        }
                        _ => self.problem(
                            "OTEL_EXPORTER_OTLP_HEADERS",
                            "write headers as name=value,name2=value2",
                        ),
                    }
                }
            }
        }
        let timeout = match config.and_then(|c| c.timeout.as_ref()) {
            Some(timeout) => timeout.0,
            None => match var("OTEL_EXPORTER_OTLP_TIMEOUT").map(|ms| ms.parse::<u64>()) {
                Some(Ok(ms)) => Duration::from_millis(ms),
                Some(Err(_)) => {
                    self.problem(
                        "OTEL_EXPORTER_OTLP_TIMEOUT",
                        "give the timeout in milliseconds, like 10000",
                    );
                    Duration::from_secs(10)
                }
                None => Duration::from_secs(10),
            },
        };
        let service_name = config
            .and_then(|c| c.service_name.clone())
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "switchyard".to_owned());
        (self.problems.len() == before).then_some(TelemetrySettings {
            traces_url,
            protocol,
            service_name,
            sampler,
            headers,
            timeout,
        })
    }
}

/// The OTLP/HTTP traces URL of a collector's base URL.
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
}

/// `%XX` escapes decoded, as `OTEL_EXPORTER_OTLP_HEADERS` values are written.
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}
