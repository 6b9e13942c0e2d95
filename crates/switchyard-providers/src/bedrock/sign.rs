//! SigV4 for Bedrock requests (`aws-sigv4`), and the model's place in the path.
//!
//! A model id, an inference-profile id (`us.`, `eu.`, `apac.`, `global.`) or an ARN goes in
//! the path as one segment, percent-escaped once on the wire (`:` as `%3A`, `/` as `%2F`).
//! SigV4 for every service but S3 escapes the path again for its canonical request
//! (`%3A` as `%253A`); `aws-sigv4`'s default settings do that, as botocore does.

use std::time::SystemTime;

use ::http::HeaderValue;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use switchyard::credential::Secret;
use switchyard::{ErrorKind, ProviderError};

use crate::http::Request;

/// The name Bedrock's runtime signs under.
pub const SIGNING_NAME: &str = "bedrock";

/// `text` as one path segment: every byte but RFC 3986's unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) percent-escaped, as SigV4 escapes.
///
/// ```
/// use switchyard_providers::bedrock::escape_segment;
///
/// assert_eq!(escape_segment("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
///            "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0");
/// assert_eq!(escape_segment("arn:aws:bedrock:us-east-1:1:inference-profile/x"),
///            "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx");
/// ```
pub fn escape_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The path of `action` (`invoke`, `converse-stream`, ...) on `model`.
pub fn model_path(model: &str, action: &str) -> String {
    format!("/model/{}/{action}", escape_segment(model))
}

/// Headers a proxy or a tracer may change or drop on the way, left out of the signature as
/// AWS's own SDKs leave them (botocore's `SIGNED_HEADERS_BLACKLIST`): beside what `aws-sigv4`
/// leaves out by default, hop-by-hop headers and the W3C trace context, which a traced
/// gateway sends with every call (signed, it failed every traced call), and the content coding
/// asked, which a compressing proxy may rewrite.
const UNSIGNED: [&str; 12] = [
    "accept-encoding",
    "baggage",
    "connection",
    "expect",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "traceparent",
    "tracestate",
    "trailer",
    "upgrade",
];

/// `aws-sigv4`'s settings, leaving [`UNSIGNED`] out too.
fn signing_settings() -> SigningSettings {
    let mut settings = SigningSettings::default();
    settings.excluded_headers.get_or_insert_with(Vec::new).extend(UNSIGNED.map(std::borrow::Cow::Borrowed));
    settings
}

/// Signs `request` (its whole `body` given) for `region` at `time`: adds `x-amz-date`,
/// `x-amz-security-token` for temporary credentials, and `authorization`, marked sensitive.
/// Returns the signature, which the adapter cuts out of anything it reports. (Public for the
/// signing benchmark: the adapter signs every request it sends through here.)
pub fn sign_request(
    request: &mut Request,
    body: &[u8],
    credentials: &Credentials,
    region: &str,
    time: SystemTime,
) -> Result<Secret, ProviderError> {
    let failed = |what: &dyn std::fmt::Display| {
        ProviderError::new(ErrorKind::Auth, format!("the request could not be signed: {what}"))
    };
    let identity: Identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SIGNING_NAME)
        .time(time)
        .settings(signing_settings())
        .build()
        .map_err(|error| failed(&error))?
        .into();
    let uri = request.uri().to_string();
    let headers: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let signable = SignableRequest::new(
        request.method().as_str(),
        uri.as_str(),
        headers.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|error| failed(&error))?;
    let (instructions, signature) = sign(signable, &params).map_err(|error| failed(&error))?.into_parts();
    let added: Vec<(String, String)> =
        instructions.headers().map(|(name, value)| (name.to_owned(), value.to_owned())).collect();
    for (name, value) in added {
        let mut value = HeaderValue::try_from(value).map_err(|_| failed(&"a signed header is not valid"))?;
        value.set_sensitive(name != "x-amz-date");
        let name = ::http::HeaderName::try_from(name).map_err(|_| failed(&"a signed header is not valid"))?;
        request.headers_mut().insert(name, value);
    }
    Ok(Secret::new(signature))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_profiles_and_arns_are_one_escaped_segment() {
        assert_eq!(
            model_path("anthropic.claude-3-haiku-20240307-v1:0", "invoke"),
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke"
        );
        assert_eq!(
            model_path("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "converse"),
            "/model/global.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
        );
        assert_eq!(
            model_path(
                "arn:aws:bedrock:eu-west-1:123456789012:application-inference-profile/a1b2c3",
                "invoke-with-response-stream"
            ),
            "/model/arn%3Aaws%3Abedrock%3Aeu-west-1%3A123456789012%3Aapplication-inference-profile%2Fa1b2c3/invoke-with-response-stream"
        );
        assert_eq!(escape_segment("a b+c?d#é"), "a%20b%2Bc%3Fd%23%C3%A9");
    }

    #[test]
    fn the_trace_context_and_hop_by_hop_headers_are_left_out_of_the_signature() {
        let mut headers = http::HeaderMap::new();
        for (name, value) in [
            ("host", "bedrock-runtime.us-east-1.amazonaws.com"),
            ("content-type", "application/json"),
            ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ("tracestate", "vendor=1"),
            ("baggage", "team=search"),
        ] {
            headers.insert(http::HeaderName::from_static(name), http::HeaderValue::from_static(value));
        }
        let uri = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/invoke".parse().unwrap();
        let mut request = crate::http::post_bytes(uri, headers, bytes::Bytes::from_static(b"{}"));
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
        sign_request(&mut request, b"{}", &credentials, "us-east-1", std::time::UNIX_EPOCH).unwrap();
        let authorization = request.headers()["authorization"].to_str().unwrap();
        assert!(
            authorization.contains("SignedHeaders=accept;content-type;host;x-amz-date,"),
            "{authorization}"
        );
        assert_eq!(
            request.headers()["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
    }
}
