//! OpenAI embeddings answers (docs/wire-formats.md §1.7). Failures use the OpenAI error shape.

use std::fmt::Write as _;

use hyper::{Response, StatusCode};

use crate::body::MockBody;
use crate::probe::Probe;
use crate::reply;
use crate::wire::{base64, next_id, push_json_str};

/// Vector length when the request does not ask for `dimensions`.
const DEFAULT_DIMENSIONS: u32 = 8;
/// Cap on `dimensions`, so a typo cannot make the mock format megabytes per answer.
const MAX_DIMENSIONS: u32 = 4096;

/// One embedding per input, floats or base64 as `encoding_format` asks. The vectors are fixed
/// and the same for every input; only their number and length follow the request.
pub(crate) fn answer(probe: &Probe<'_>) -> Response<MockBody> {
    let inputs = probe.input.map_or(1, |count| count.0);
    let dimensions = probe.dimensions.unwrap_or(DEFAULT_DIMENSIONS).clamp(1, MAX_DIMENSIONS);
    let values: Vec<f32> = (0..dimensions).map(|i| ((i % 16) as f32 - 7.5) / 100.0).collect();
    let vector = if probe.encoding_format.as_deref() == Some("base64") {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        format!("\"{}\"", base64(&bytes))
    } else {
        let mut s = String::from("[");
        for (i, v) in values.iter().enumerate() {
            let _ = write!(s, "{}{v}", if i == 0 { "" } else { "," });
        }
        s.push(']');
        s
    };

    let mut s = String::with_capacity(64 + inputs * (vector.len() + 48));
    s.push_str(r#"{"object":"list","data":["#);
    for index in 0..inputs {
        if index > 0 {
            s.push(',');
        }
        let _ = write!(s, r#"{{"object":"embedding","index":{index},"embedding":{vector}}}"#);
    }
    s.push_str(r#"],"model":"#);
    push_json_str(&mut s, &probe.model);
    let tokens = reply::PROMPT_TOKENS as usize * inputs.max(1);
    let _ = write!(s, r#","usage":{{"prompt_tokens":{tokens},"total_tokens":{tokens}}}}}"#);

    let mut response = reply::json(StatusCode::OK, s);
    reply::add_header(&mut response, "x-request-id", &format!("req_mock{}", next_id()));
    response
}
