//! Trace export, checked: the `telemetry:` block over the standard `OTEL_*` variables, each
//! problem named where its value came from.

use std::time::Duration;

use switchyard::credential::Secret;

use super::Validator;
use crate::config::file;
use crate::telemetry::{OtlpProtocol, SamplerSetting, TelemetrySettings};

impl Validator<'_> {
    /// Trace export: the `telemetry:` block over the standard `OTEL_*` variables. `None` when
    /// neither asks for it, or `OTEL_SDK_DISABLED=true`.
    pub(super) fn telemetry(&mut self, config: Option<&file::TelemetryConfig>) -> Option<TelemetrySettings> {
        if !self.otlp_exporter_wanted() {
            return None;
        }
        let before = self.problems.len();
        let traces_url = self.otlp_endpoint(config)?;
        // Each problem names where its value came from: the file, or the variable.
        let protocol = self.otlp_protocol(config);
        let sampler = self.trace_sampler(config);
        let headers = self.otlp_headers(config);
        let timeout = self.otlp_timeout(config);
        let service_name = config
            .and_then(|c| c.service_name.clone())
            .or_else(|| self.otel_var("OTEL_SERVICE_NAME"))
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

    /// An `OTEL_*` variable, trimmed; `None` when unset or blank.
    fn otel_var(&self, name: &str) -> Option<String> {
        (self.env)(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    /// Whether the variables leave OTLP export on: not `OTEL_SDK_DISABLED=true`, and an
    /// `OTEL_TRACES_EXPORTER` of `otlp` or unset.
    fn otlp_exporter_wanted(&mut self) -> bool {
        if self.otel_var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return false;
        }
        match self.otel_var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => true,
            Some("none") => false,
            Some(other) => {
                self.problem(
                    "OTEL_TRACES_EXPORTER",
                    format!("`{other}` is not an exporter Switchyard has: otlp, or none"),
                );
                false
            }
        }
    }

    /// The collector's traces URL, from the file or the variables, checked to be HTTP(S);
    /// `None` when neither names one and there is no `telemetry:` block.
    fn otlp_endpoint(&mut self, config: Option<&file::TelemetryConfig>) -> Option<String> {
        let endpoint = config.and_then(|c| c.endpoint.clone());
        let (traces_url, origin) = match (
            &endpoint,
            self.otel_var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            self.otel_var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(base), _, _) => (traces_url(base), "telemetry.endpoint"),
            (None, Some(url), _) => (url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            (None, None, Some(base)) => (traces_url(&base), "OTEL_EXPORTER_OTLP_ENDPOINT"),
            (None, None, None) if config.is_some() => {
                (traces_url("http://localhost:4318"), "telemetry.endpoint")
            }
            (None, None, None) => return None,
        };
        if !(traces_url.starts_with("http://") || traces_url.starts_with("https://")) {
            self.problem(
                origin,
                format!("`{traces_url}` is not an http:// or https:// URL of an OTLP/HTTP collector"),
            );
        }
        Some(traces_url)
    }

    /// The OTLP/HTTP encoding: protobuf unless the file or a variable asks for JSON.
    fn otlp_protocol(&mut self, config: Option<&file::TelemetryConfig>) -> OtlpProtocol {
        let protocol = config
            .and_then(|c| c.protocol.clone().map(|p| (p, "telemetry.protocol")))
            .or_else(|| {
                self.otel_var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    .map(|p| (p, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            })
            .or_else(|| {
                self.otel_var("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| (p, "OTEL_EXPORTER_OTLP_PROTOCOL"))
            });
        match protocol.as_ref().map(|(p, origin)| (p.trim(), *origin)) {
            None | Some(("http/protobuf", _)) => OtlpProtocol::Protobuf,
            Some(("http/json", _)) => OtlpProtocol::Json,
            Some((other, origin)) => {
                self.problem(
                    origin,
                    format!("`{other}` is not supported: use http/protobuf (the collector's port 4318) or http/json"),
                );
                OtlpProtocol::Protobuf
            }
        }
    }

    /// The sampler and its argument, from the file or the variables; parent-based always-on
    /// when neither names one.
    fn trace_sampler(&mut self, config: Option<&file::TelemetryConfig>) -> SamplerSetting {
        let (sampler_name, sampler_origin) = config
            .and_then(|c| c.sampler.clone().map(|s| (s, "telemetry.sampler")))
            .or_else(|| self.otel_var("OTEL_TRACES_SAMPLER").map(|s| (s, "OTEL_TRACES_SAMPLER")))
            .unwrap_or_else(|| ("parentbased_always_on".to_owned(), "telemetry.sampler"));
        let sampler_arg = match config.and_then(|c| c.sampler_arg) {
            Some(arg) => Some(arg),
            None => match self.otel_var("OTEL_TRACES_SAMPLER_ARG") {
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
        match SamplerSetting::parse(&sampler_name, sampler_arg) {
            Ok(sampler) => sampler,
            Err(problem) => {
                self.problem(sampler_origin, problem);
                SamplerSetting::ParentBasedAlwaysOn
            }
        }
    }

    /// The headers sent to the collector: the file's (secrets resolved), else the variables'
    /// `name=value` list (percent-decoded).
    fn otlp_headers(&mut self, config: Option<&file::TelemetryConfig>) -> Vec<(String, Secret)> {
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
                let listed = self
                    .otel_var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
                    .or_else(|| self.otel_var("OTEL_EXPORTER_OTLP_HEADERS"));
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
        headers
    }

    /// How long one export may take: the file's, else `OTEL_EXPORTER_OTLP_TIMEOUT` in
    /// milliseconds, else 10 s.
    fn otlp_timeout(&mut self, config: Option<&file::TelemetryConfig>) -> Duration {
        match config.and_then(|c| c.timeout.as_ref()) {
            Some(timeout) => timeout.0,
            None => match self.otel_var("OTEL_EXPORTER_OTLP_TIMEOUT").map(|ms| ms.parse::<u64>()) {
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
        }
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
