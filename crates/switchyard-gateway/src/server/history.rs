//! `GET /admin/requests` and `GET /admin/requests/{id}`: the recent requests of the fleet
//! (with shared state: every replica's, through the trails in Redis) or of this replica, and
//! one request's whole trail, found on whichever replica served it.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchyard::chat::Dialect;

use super::admin::{admin_reader, bad_request};
use super::auth::admin_unauthorized;
use super::errors::ApiError;
use super::state::AppState;

/// Lines read from the fleet per line asked for, when filters may pass over most of them.
const FILTERED_WINDOW: usize = 20;
/// The fleet's lines read for one list at most.
const MAX_WINDOW: usize = 5000;

/// What a list asks for: how many, which, and from where.
#[derive(Debug, Default)]
struct Filter {
    limit: usize,
    route: Option<String>,
    status: Option<StatusFilter>,
    target: Option<String>,
    replica: Option<String>,
    /// The client key whose requests alone are shown: a client key reading without the admin
    /// key sees only its own requests, never another key's trails.
    key: Option<Arc<str>>,
    /// This replica's memory only, fleet or not.
    local: bool,
    /// `scope=fleet` was asked: without the fleet's trails that is refused, not answered with
    /// this replica's.
    fleet_asked: bool,
}

/// `status=429`, `status=5xx`, or `status=error` (400 and above, and a stream that broke after
/// its 200).
#[derive(Debug, Clone, Copy)]
enum StatusFilter {
    Exact(u16),
    Class(u16),
    Error,
}

impl StatusFilter {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "error" => Some(Self::Error),
            class if class.len() == 3 && class.ends_with("xx") => {
                class[..1].parse::<u16>().ok().filter(|c| (1..=5).contains(c)).map(Self::Class)
            }
            exact => exact.parse::<u16>().ok().filter(|s| (100..600).contains(s)).map(Self::Exact),
        }
    }

    fn admits(self, status: u16) -> bool {
        match self {
            Self::Exact(wanted) => status == wanted,
            Self::Class(class) => status / 100 == class,
            Self::Error => status >= 400,
        }
    }
}

impl Filter {
    fn parse(query: &[(String, String)]) -> Result<Self, String> {
        let mut filter = Filter { limit: 50, ..Filter::default() };
        for (name, value) in query {
            match name.as_str() {
                "limit" => match value.parse::<usize>() {
                    Ok(n) if n > 0 => filter.limit = n.min(MAX_WINDOW),
                    _ => return Err(format!("limit `{value}` is not a positive whole number")),
                },
                "route" => filter.route = Some(value.clone()),
                "target" => filter.target = Some(value.clone()),
                "replica" => filter.replica = Some(value.clone()),
                "status" => {
                    let parsed = StatusFilter::parse(value);
                    filter.status = Some(parsed.ok_or_else(|| {
                        format!("status `{value}` is not a status (429), a class (5xx) or `error`")
                    })?);
                }
                "scope" => match value.as_str() {
                    "fleet" => (filter.local, filter.fleet_asked) = (false, true),
                    "replica" => filter.local = true,
                    other => return Err(format!("scope `{other}` is not `fleet` or `replica`")),
                },
                other => {
                    return Err(format!(
                        "unknown parameter `{other}`: `limit`, `route`, `status`, `target`, `replica` and `scope` are taken"
                    ));
                }
            }
        }
        Ok(filter)
    }

    fn narrows(&self) -> bool {
        self.route.is_some()
            || self.status.is_some()
            || self.target.is_some()
            || self.replica.is_some()
            || self.key.is_some()
    }

    /// Whether a request's line (as `/admin/requests` lists it) passes.
    fn admits(&self, line: &Value) -> bool {
        let text = |key: &str| line.get(key).and_then(Value::as_str);
        let route_ok = self.route.as_deref().is_none_or(|route| text("route") == Some(route));
        let replica_ok = self.replica.as_deref().is_none_or(|replica| text("replica") == Some(replica));
        let key_ok = self.key.as_deref().is_none_or(|key| text("key") == Some(key));
        let status = line.get("status").and_then(Value::as_u64).unwrap_or_default() as u16;
        // A stream that broke after its 200 is no success: an error, whatever its status.
        let broke = line.get("stream_error").is_some_and(|error| !error.is_null());
        let status_ok = self
            .status
            .is_none_or(|filter| filter.admits(status) || (matches!(filter, StatusFilter::Error) && broke));
        let target_ok = self.target.as_deref().is_none_or(|target| {
            text("served_by") == Some(target)
                || line["failed"].as_array().is_some_and(|failed| failed.iter().any(|t| t == target))
        });
        route_ok && replica_ok && status_ok && target_ok && key_ok
    }
}

/// `GET /admin/requests`: the newest requests, newest first (50 by default), filtered by
/// `route`, `status`, `target` (served by it, or failed on it) and `replica`. With shared
/// state, the fleet's (`scope=replica` for this replica's alone); when Redis does not answer,
/// this replica's, marked `partial`.
pub async fn requests(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let Ok(key) = admin_reader(&state, &headers) else {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    };
    let mut filter = match Filter::parse(&query) {
        Ok(filter) => filter,
        Err(message) => return bad_request(message),
    };
    filter.key = key;
    if filter.fleet_asked && state.trails.get().is_none() {
        return bad_request(
            "scope=fleet needs shared state (`state.redis`, with `state.trails` on) and kept trails (`gateway.recent_requests` above 0): without them, /admin/requests is this replica's".to_owned(),
        );
    }
    let kept = state.recent.capacity();
    let mut body = match (state.trails.get(), filter.local) {
        (Some(trails), false) => {
            let window = if filter.narrows() { filter.limit * FILTERED_WINDOW } else { filter.limit };
            match trails.shared().latest(window.min(MAX_WINDOW)).await {
                Ok(lines) => {
                    let lines = lines.iter().filter_map(|line| serde_json::from_slice::<Value>(line).ok());
                    let requests: Vec<Value> =
                        lines.filter(|line| filter.admits(line)).take(filter.limit).collect();
                    json!({ "requests": requests, "scope": "fleet", "partial": false })
                }
                Err(reason) => {
                    let mut body = local(&state, &filter);
                    body["partial"] = json!(true);
                    body["reason"] = json!(format!(
                        "the fleet's trails could not be read ({reason}): this replica's alone"
                    ));
                    body
                }
            }
        }
        _ => local(&state, &filter),
    };
    body["kept"] = json!(kept);
    body["replica"] = json!(&*state.replica);
    axum::Json(body).into_response()
}

/// This replica's own list, as `requests` answers it.
fn local(state: &AppState, filter: &Filter) -> Value {
    let records = state.recent.latest(state.recent.capacity());
    let requests: Vec<Value> = records
        .iter()
        .filter_map(|record| serde_json::to_value(record.summary()).ok())
        .filter(|line| filter.admits(line))
        .take(filter.limit)
        .collect();
    json!({ "requests": requests, "scope": "replica", "partial": false })
}

/// `GET /admin/requests/{id}`: a request's whole trail, from this replica's memory or, with
/// shared state, from the fleet's trails; its `replica` names the replica that served it.
pub async fn request(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Ok(key) = admin_reader(&state, &headers) else {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    };
    // A client key reading without the admin key finds its own requests alone: another key's
    // is not found, as if it did not exist.
    let mine = |of: Option<&str>| key.as_deref().is_none_or(|key| of == Some(key));
    // Another key's request of the same id (a client's own `x-request-id`) hides none of it.
    if let Some(record) = state.recent.get_where(&id, |record| mine(record.key.as_deref())) {
        return axum::Json(record).into_response();
    }
    let kept = state.recent.capacity();
    let here = format!("this replica's ({}) last {kept} requests", state.replica);
    let Some(trails) = state.trails.get() else {
        return unknown(
            format!(
                "no recent request `{id}` among {here}: without shared state, only the replica that served a request knows it"
            ),
            false,
        );
    };
    // Kept by id and key (`fleet::trail_name`): the reader's own, or any key's for the admin
    // (and under the id alone, as a replica of an earlier version kept it).
    let live = state.live();
    let labels: Vec<Arc<str>> = match &key {
        Some(label) => vec![label.clone()],
        None => live.gateway.keys.iter().map(|key| key.label.clone()).collect(),
    };
    let mut names: Vec<String> =
        labels.iter().map(|label| crate::fleet::trail_name(&id, Some(label))).collect();
    names.push(id.clone());
    match trails.shared().get_first(&names).await {
        Ok(Some(record))
            if key.is_none()
                || serde_json::from_slice::<Value>(&record)
                    .is_ok_and(|found| mine(found["key"].as_str())) =>
        {
            ([(header::CONTENT_TYPE, "application/json")], record).into_response()
        }
        Ok(_) => unknown(
            format!(
                "no recent request `{id}` among {here} nor the fleet's trails (each replica's last {kept}, kept {} min)",
                crate::fleet::TRAIL_TTL.as_secs() / 60
            ),
            false,
        ),
        Err(reason) => unknown(
            format!(
                "no recent request `{id}` among {here}; the fleet's trails could not be searched: {reason}"
            ),
            true,
        ),
    }
}

/// The 404 of a request not found, saying what was searched; `partial` when the fleet's
/// trails could not be.
fn unknown(message: String, partial: bool) -> Response {
    let mut response =
        ApiError::new(StatusCode::NOT_FOUND, "unknown_request", message).into_response(Dialect::OpenAi, "");
    if partial {
        response.headers_mut().insert("x-switchyard-partial", header::HeaderValue::from_static("true"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &[(&str, &str)]) -> Result<Filter, String> {
        let query: Vec<(String, String)> =
            query.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Filter::parse(&query)
    }

    #[test]
    fn a_filter_admits_the_lines_it_names() {
        let line = json!({ "route": "default", "replica": "a", "status": 502, "served_by": null, "failed": ["p:m"] });
        assert!(parse(&[("status", "5xx")]).unwrap().admits(&line));
        assert!(parse(&[("status", "error"), ("target", "p:m")]).unwrap().admits(&line));
        assert!(!parse(&[("status", "429")]).unwrap().admits(&line));
        let broken = json!({ "route": "default", "status": 200, "stream_error": "transport", "failed": [] });
        assert!(parse(&[("status", "error")]).unwrap().admits(&broken), "a stream that broke after its 200");
        assert!(parse(&[("status", "200")]).unwrap().admits(&broken));
        assert!(!parse(&[("replica", "b")]).unwrap().admits(&line));
        assert!(!parse(&[("route", "other")]).unwrap().admits(&line));
        assert!(parse(&[("route", "default"), ("replica", "a")]).unwrap().admits(&line));
    }

    #[test]
    fn a_bad_parameter_is_named() {
        assert!(parse(&[("status", "teapot")]).unwrap_err().contains("teapot"));
        assert!(parse(&[("scope", "world")]).unwrap_err().contains("world"));
        assert!(parse(&[("colour", "red")]).unwrap_err().contains("colour"));
        assert!(parse(&[("limit", "0")]).unwrap_err().contains("limit"));
    }
}
