//! Optional bearer-token authentication, compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// The token every `/v1` request must carry as `Authorization: Bearer <token>`.
#[derive(Clone)]
pub struct BearerToken(Arc<[u8]>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(***)")
    }
}

impl BearerToken {
    /// A token; surrounding white space (a file's trailing newline, say) is not part of it.
    /// `None` when nothing is left.
    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (!token.is_empty()).then(|| BearerToken(token.as_bytes().into()))
    }

    fn matches(&self, presented: &[u8]) -> bool {
        // `ct_eq` on slices of different lengths is false at once; the length of the token is
        // not a secret worth hiding, its bytes are.
        self.0.as_ref().ct_eq(presented).into()
    }
}

/// The credentials of an `Authorization` header of the Bearer scheme. A scheme's name is
/// case-insensitive (RFC 9110, 11.1): `bearer` and `BEARER` are the same scheme.
fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"Bearer") {
        return None;
    }
    let start = rest.iter().position(|b| *b != b' ')?;
    rest.get(start..)
}

/// Refuses requests to `/v1` (any path under it, routed or not) without the right bearer
/// token; lets the open routes (`/healthz`, `/readyz`, `/metrics`) and unknown paths outside
/// `/v1` through.
pub(crate) async fn require_on_api(
    State(token): State<BearerToken>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if path != "/v1" && !path.starts_with("/v1/") {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_credentials(v.as_bytes()));
    match presented {
        Some(p) if token.matches(p) => next.run(req).await,
        _ => {
            let mut response = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid `Authorization: Bearer <token>` header is required",
            )
            .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }
}
