//! Request bodies: size- and time-limited JSON objects whose fields are checked one by one, so
//! that each bad field gets its own stable error code, and unknown or repeated fields are
//! refused.

use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde_json::{Map, Value};

use super::DEFAULT_IDLE_TIMEOUT;
use super::error::ApiError;
use super::unique_json;

/// Largest request body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// How long a request's body may take to arrive once its head has, set on each request by the
/// server from its connection limits; requests without it (the router called directly) get
/// [`DEFAULT_IDLE_TIMEOUT`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyTimeout(pub(crate) std::time::Duration);

/// A JSON object body. An empty body counts as `{}`.
#[derive(Debug)]
pub(crate) struct Fields(Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for Fields {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let query = req.uri().query().map(str::to_owned);
        let body_timeout = req
            .extensions()
            .get::<BodyTimeout>()
            .map_or(DEFAULT_IDLE_TIMEOUT, |t| t.0);
        // A body declared too large is refused before any of it is read: hyper sends the
        // `100 Continue` a client may have asked for when the body is first read, which would
        // tell the client to send a body that is refused anyway, and a client that does not
        // send it would be answered only at the body timeout.
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
            return Err(too_large());
        }
        // Without a limit, a client sending its body slowly holds its connection, and a
        // shutdown, for as long as it likes.
        let reading = axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES);
        let bytes = tokio::time::timeout(body_timeout, reading)
            .await
            .map_err(|_| {
                ApiError::new(
                    axum::http::StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!(
                        "the request body did not arrive within {} ms",
                        body_timeout.as_millis()
                    ),
                )
            })?
            .map_err(unreadable)?;
        // Refused after the body is read, so that the connection stays usable. A field given
        // in the query would otherwise be ignored, and `?ttl_ms=100` take a lock of the default
        // TTL without a word.
        if let Some(query) = query.filter(|q| !q.is_empty()) {
            return Err(ApiError::bad_request(
                "unknown_field",
                format!(
                    "this route takes no query parameters (got {query:?}); send its fields in the JSON body"
                ),
            ));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Fields(Map::new()));
        }
        match unique_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => Ok(Fields(map)),
            Ok(_) => Err(ApiError::bad_request(
                "invalid_json",
                "the body must be a JSON object",
            )),
            Err(e) if e.is_data() => Err(ApiError::bad_request(
                "invalid_json",
                format!("the body must name each field once: {e}"),
            )),
            Err(e) => Err(ApiError::bad_request(
                "invalid_json",
                format!("the body is not valid JSON: {e}"),
            )),
        }
    }
}

/// Why a body could not be read: over [`MAX_BODY_BYTES`], or broken on the way (a malformed
/// chunked encoding, a connection closed before the body's end).
fn unreadable(e: axum::Error) -> ApiError {
    let e = e.into_inner();
    if e.is::<http_body_util::LengthLimitError>() {
        return too_large();
    }
    ApiError::bad_request(
        "invalid_body",
        format!("the request body could not be read: {e}"),
    )
}

/// A body over [`MAX_BODY_BYTES`], declared so or sent.
fn too_large() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
    )
}

impl Fields {
    /// Refuses fields other than `allowed`.
    pub(crate) fn only(self, allowed: &[&str]) -> Result<Self, ApiError> {
        if let Some(unknown) = self.0.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::bad_request(
                "unknown_field",
                format!(
                    "unknown field {unknown:?}; expected one of: {}",
                    allowed.join(", ")
                ),
            ));
        }
        Ok(self)
    }

    /// A non-negative whole number of milliseconds; `code` names the error when it is anything
    /// else.
    pub(crate) fn u64(&self, key: &str, code: &str) -> Result<Option<u64>, ApiError> {
        self.whole(key, code, "a whole number of milliseconds")
    }

    /// A non-negative whole number, `what` saying what it must be in the error.
    pub(crate) fn whole(&self, key: &str, code: &str, what: &str) -> Result<Option<u64>, ApiError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                n.as_u64()
                    .or_else(|| exact_whole(n))
                    .map(Some)
                    .ok_or_else(|| {
                        ApiError::bad_request(code, format!("{key} must be {what}, not {n}"))
                    })
            }
            Some(other) => Err(ApiError::bad_request(
                code,
                format!("{key} must be {what}, not {other}"),
            )),
        }
    }

    /// An array field of strings.
    pub(crate) fn strings(&self, key: &str, code: &str) -> Result<Option<Vec<String>>, ApiError> {
        let bad = |other: &Value| {
            ApiError::bad_request(
                code,
                format!("{key} must be an array of strings, not {other}"),
            )
        };
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad(v)))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(bad(other)),
        }
    }

    /// A boolean field.
    pub(crate) fn bool(&self, key: &str, code: &str) -> Result<Option<bool>, ApiError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(ApiError::bad_request(
                code,
                format!("{key} must be true or false, not {other}"),
            )),
        }
    }

    /// A string field.
    pub(crate) fn string(&self, key: &str, code: &str) -> Result<Option<String>, ApiError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ApiError::bad_request(
                code,
                format!("{key} must be a string, not {other}"),
            )),
        }
    }

    /// An object field whose values are strings, as (key, value) pairs in key order.
    pub(crate) fn string_map(
        &self,
        key: &str,
        code: &str,
    ) -> Result<Option<Vec<(String, String)>>, ApiError> {
        let bad = |other: &Value| {
            ApiError::bad_request(
                code,
                format!("{key} must be an object of strings, not {other}"),
            )
        };
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(|| bad(v))?.to_owned())))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(bad(other)),
        }
    }

    /// A string field that must be there.
    pub(crate) fn required_string(&self, key: &str, code: &str) -> Result<String, ApiError> {
        self.string(key, code)?
            .ok_or_else(|| ApiError::bad_request(code, format!("{key} is required")))
    }
}

/// JSON has one number type: `10000.0` and `1e4` are the whole number `10000`. Only numbers a
/// double holds exactly (up to 2^53) count, so that none is rounded into a different value.
fn exact_whole(n: &serde_json::Number) -> Option<u64> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    let f = n.as_f64()?;
    if !(0.0..=EXACT).contains(&f) || f.fract() != 0.0 {
        return None;
    }
    // Whole, non-negative and at most 2^53: the conversion is exact.
    Some(f as u64)
}
