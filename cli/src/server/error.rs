//! The API's error responses: a status and a JSON body `{"error": code, "message": text}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use redquorum::{Error, NodeFailureKind};

/// An error answer. `code` is stable (clients may match on it); `message` is for people.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: String,
    message: String,
    /// Extra fields merged into the body (which nodes hold a lock, say).
    extra: Map<String, Value>,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
            extra: Map::new(),
        }
    }

    pub(crate) fn bad_request(code: &str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    fn with(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }

    /// The same error, about the lock `name` (of several a request named).
    pub(crate) fn with_name(self, name: &str) -> Self {
        self.with("name", Value::String(name.to_owned()))
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable error code.
    pub fn code(&self) -> &str {
        &self.code
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            // The permits' range is checked before the library is called (`kind.rs`): the
            // library refuses them only when the masters hold the semaphore with another
            // number than asked, which no retry mends while it is held.
            Error::InvalidArgument {
                field: "permits", ..
            } => ApiError::new(StatusCode::CONFLICT, "permits_mismatch", message),
            Error::InvalidArgument { field, .. } => {
                ApiError::bad_request(&format!("invalid_{field}"), message)
            }
            Error::Contended {
                holders,
                reserved,
                unheard,
                total,
                ..
            } => ApiError::new(StatusCode::CONFLICT, "contended", message)
                .with("holders", json!(holders.len()))
                .with("reserved", json!(reserved.len()))
                .with("unheard", json!(unheard))
                .with("nodes", json!(total)),
            Error::NotHeld { .. } => ApiError::new(StatusCode::CONFLICT, "not_held", message),
            Error::LockLost { .. } => ApiError::new(StatusCode::CONFLICT, "lock_lost", message),
            Error::QuorumUnavailable {
                failures,
                needed,
                total,
                ..
            } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "quorum_unavailable",
                message,
            )
            .with("needed", json!(needed))
            .with("nodes", json!(total))
            .with("failures", failures_json(&failures)),
            Error::ExtendUncertain {
                valid_for,
                failures,
                needed,
                total,
                ..
            } => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "extend_uncertain", message)
                // The caller keeps the lock's validity itself: this is how much of it is left.
                .with("validity_ms", json!(super::units::millis_of(valid_for)))
                .with("needed", json!(needed))
                .with("nodes", json!(total))
                .with("failures", failures_json(&failures)),
            Error::Timeout { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "timeout", message)
            }
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
        }
    }
}

/// Which nodes failed, and how.
fn failures_json(failures: &[redquorum::NodeFailure]) -> Value {
    Value::Array(
        failures
            .iter()
            .map(|f| {
                let mut failure =
                    json!({"node": f.node, "kind": f.kind.as_str(), "message": f.kind.to_string()});
                // Until when: a quarantine ends at a known time, by the master's clock.
                if let (NodeFailureKind::Quarantined(left), Value::Object(map)) =
                    (&f.kind, &mut failure)
                {
                    map.insert(
                        "quarantined_ms".to_owned(),
                        json!(super::units::millis_of(*left)),
                    );
                }
                failure
            })
            .collect(),
    )
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.extra;
        body.insert("error".to_owned(), Value::String(self.code));
        body.insert("message".to_owned(), Value::String(self.message));
        (self.status, Json(Value::Object(body))).into_response()
    }
}
