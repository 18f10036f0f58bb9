//! Which kind of lock a request is about (`kind`, `permits`, `owner`, from a body or a query),
//! and the kind written into the tokens the API hands out, so that an extend or a release that
//! names another kind than the token's is refused instead of finding nothing to act on.

use redquorum::config::limits;
use redquorum::{LockKind, Owner};

use super::error::ApiError;

/// Longest owner label accepted, in bytes (a reentrant lock's owner id has the same bound).
pub const MAX_OWNER_BYTES: usize = 128;

/// The kinds' names, as requests give them and answers say them.
const KINDS: [&str; 5] = ["mutex", "reentrant", "read", "write", "semaphore"];

/// What `owner` means on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnerUse {
    /// Acquire and session: the reentrant lock's owner id, and for the other kinds a free-text
    /// label for logs and the answer.
    IdOrLabel,
    /// Extend, release and inspect: only a reentrant lock's owner id.
    IdOnly,
}

/// The kind a request names, and the owner it gave.
#[derive(Debug, Clone)]
pub(crate) struct RequestKind {
    pub(crate) kind: LockKind,
    /// The `owner` given: the reentrant lock's id, or a label for the other kinds.
    pub(crate) owner: Option<String>,
}

/// Reads `kind` (default `mutex`), `permits` (required with `semaphore`, refused with any
/// other kind) and `owner` (required with `reentrant`, where it is the [`Owner`] id).
pub(crate) fn request_kind(
    kind: Option<&str>,
    permits: Option<u64>,
    owner: Option<String>,
    owner_use: OwnerUse,
) -> Result<RequestKind, ApiError> {
    let name = kind.unwrap_or("mutex");
    if !KINDS.contains(&name) {
        return Err(ApiError::bad_request(
            "invalid_kind",
            format!(
                "unknown kind {name:?}; expected one of: {}",
                KINDS.join(", ")
            ),
        ));
    }
    let permits = match (name, permits) {
        ("semaphore", Some(p)) => Some(
            u32::try_from(p)
                .ok()
                .filter(|p| (1..=limits::MAX_PERMITS).contains(p))
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_permits",
                        format!("permits must be 1 to {}, not {p}", limits::MAX_PERMITS),
                    )
                })?,
        ),
        ("semaphore", None) => {
            return Err(ApiError::bad_request(
                "invalid_permits",
                "permits is required with kind semaphore: how many holders it admits",
            ));
        }
        (_, Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_permits",
                format!("permits is only taken with kind semaphore, not {name}"),
            ));
        }
        (_, None) => None,
    };
    let kind = match (name, permits) {
        ("reentrant", _) => {
            let id = owner.as_deref().ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_owner",
                    "owner is required with kind reentrant: the id that every acquire of the same holder gives",
                )
            })?;
            LockKind::Reentrant(Owner::from_id(id)?)
        }
        ("read", _) => LockKind::Read,
        ("write", _) => LockKind::Write,
        (_, Some(permits)) => LockKind::semaphore(permits),
        _ => LockKind::Mutex,
    };
    if let Some(owner) = owner.as_deref() {
        if !matches!(kind, LockKind::Reentrant(_)) {
            if owner_use == OwnerUse::IdOnly {
                return Err(ApiError::bad_request(
                    "invalid_owner",
                    format!("owner is only taken with kind reentrant here, not {name}"),
                ));
            }
            if owner.len() > MAX_OWNER_BYTES {
                return Err(ApiError::bad_request(
                    "invalid_owner",
                    format!("owner is at most {MAX_OWNER_BYTES} bytes"),
                ));
            }
        }
    }
    Ok(RequestKind { kind, owner })
}

/// How a kind's tokens start: nothing for a mutex (its tokens are the library's as they are),
/// else the kind, with a semaphore's permits, and `:`.
fn tag(kind: &LockKind) -> Option<String> {
    match kind {
        LockKind::Mutex => None,
        LockKind::Semaphore { permits } => Some(format!("semaphore.{permits}:")),
        other => Some(format!("{}:", other.as_str())),
    }
}

/// The token the API hands out for a hold of `kind` whose library token is `token`.
pub(crate) fn outward(kind: &LockKind, token: &str) -> String {
    match tag(kind) {
        None => token.to_owned(),
        Some(tag) => format!("{tag}{token}"),
    }
}

/// The library token inside a token the API handed out for `kind`.
///
/// # Errors
///
/// `invalid_token` (400) when the token is not of the shape the API hands tokens out in (of
/// any kind), and `wrong_kind` (400) when it is of another kind (or, for a semaphore, of
/// another number of permits): either way nothing is sent to the masters.
pub(crate) fn inward<'t>(kind: &LockKind, token: &'t str) -> Result<&'t str, ApiError> {
    let found = token_kind(token);
    // A made-up or mistyped token is refused as such, not taken for a mutex's token because it
    // has no kind in front.
    let library_token = found.map_or(token, |head| &token[head.len() + 1..]);
    redquorum::config::validate_token(library_token)?;
    let inner = match (tag(kind), found) {
        (None, None) => Some(token),
        (Some(tag), Some(_)) => token.strip_prefix(tag.as_str()),
        _ => None,
    };
    inner.ok_or_else(|| {
        let of = found.map_or_else(
            || "a mutex's".to_owned(),
            |t| match t.strip_prefix("semaphore.") {
                Some(permits) => format!("a semaphore's of {permits} permits"),
                None => format!("a {t} lock's"),
            },
        );
        let asked = match kind {
            LockKind::Semaphore { permits } => format!("a semaphore of {permits} permits"),
            other => other.as_str().to_owned(),
        };
        ApiError::bad_request(
            "wrong_kind",
            format!(
                "this token is {of}, not {asked}: give the kind (and permits) it was acquired with"
            ),
        )
    })
}

/// The kind a token says it is of (`read`, `semaphore.3`, ...), or `None` for a mutex's (or
/// for a kind the API never hands out, such as a semaphore of 0 permits).
fn token_kind(token: &str) -> Option<&str> {
    let (head, _) = token.split_once(':')?;
    let known = KINDS[1..].contains(&head)
        || head
            .strip_prefix("semaphore.")
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|permits| (1..=limits::MAX_PERMITS).contains(&permits));
    known.then_some(head)
}

/// The fields every answer about a lock of `kind` carries: `kind`, and a semaphore's
/// `permits`.
pub(crate) fn kind_fields(kind: &LockKind, map: &mut serde_json::Map<String, serde_json::Value>) {
    map.insert("kind".to_owned(), kind.as_str().into());
    if let LockKind::Semaphore { permits } = kind {
        map.insert("permits".to_owned(), (*permits).into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code<T: std::fmt::Debug>(r: Result<T, ApiError>) -> String {
        r.unwrap_err().code().to_owned()
    }

    #[test]
    fn kinds_permits_and_owners_are_checked() {
        let ok = |k, p, o: Option<&str>| {
            request_kind(k, p, o.map(str::to_owned), OwnerUse::IdOrLabel)
                .unwrap()
                .kind
        };
        assert_eq!(ok(None, None, None), LockKind::Mutex);
        assert_eq!(ok(Some("read"), None, Some("cron@web1")), LockKind::Read);
        assert_eq!(ok(Some("semaphore"), Some(3), None), LockKind::semaphore(3));
        assert_eq!(
            ok(Some("reentrant"), None, Some("job-1")).as_str(),
            "reentrant"
        );
        let bad = |k, p, o: Option<&str>, u| code(request_kind(k, p, o.map(str::to_owned), u));
        let any = OwnerUse::IdOrLabel;
        assert_eq!(bad(Some("spinlock"), None, None, any), "invalid_kind");
        assert_eq!(bad(Some("Mutex"), None, None, any), "invalid_kind");
        assert_eq!(bad(Some("semaphore"), None, None, any), "invalid_permits");
        assert_eq!(
            bad(Some("semaphore"), Some(0), None, any),
            "invalid_permits"
        );
        assert_eq!(
            bad(Some("semaphore"), Some(1 << 40), None, any),
            "invalid_permits"
        );
        assert_eq!(bad(Some("write"), Some(2), None, any), "invalid_permits");
        assert_eq!(bad(None, Some(1), None, any), "invalid_permits");
        assert_eq!(bad(Some("reentrant"), None, None, any), "invalid_owner");
        assert_eq!(
            bad(Some("reentrant"), None, Some("a b"), any),
            "invalid_owner"
        );
        assert_eq!(
            bad(None, None, Some(&"x".repeat(129)), any),
            "invalid_owner"
        );
        assert_eq!(
            bad(None, None, Some("label"), OwnerUse::IdOnly),
            "invalid_owner"
        );
    }

    #[test]
    fn tokens_carry_their_kind() {
        const RANDOM: &str = "0123456789abcdef0123456789abcdef";
        let handed_over = format!("0123abcd.7/{RANDOM}");
        let owner = LockKind::Reentrant(Owner::from_id("o").unwrap());
        for kind in [
            LockKind::Mutex,
            owner,
            LockKind::Read,
            LockKind::Write,
            LockKind::semaphore(3),
        ] {
            for library_token in [RANDOM, handed_over.as_str()] {
                let token = outward(&kind, library_token);
                assert_eq!(inward(&kind, &token).unwrap(), library_token);
            }
        }
        assert_eq!(outward(&LockKind::Read, "ab"), "read:ab");
        assert_eq!(outward(&LockKind::semaphore(2), "ab"), "semaphore.2:ab");
        let read = format!("read:{RANDOM}");
        let semaphore_of_2 = format!("semaphore.2:{RANDOM}");
        assert_eq!(code(inward(&LockKind::Write, &read)), "wrong_kind");
        assert_eq!(code(inward(&LockKind::Mutex, &read)), "wrong_kind");
        assert_eq!(code(inward(&LockKind::Read, RANDOM)), "wrong_kind");
        assert_eq!(
            code(inward(&LockKind::semaphore(3), &semaphore_of_2)),
            "wrong_kind"
        );
        let message = format!(
            "{:?}",
            inward(&LockKind::Read, &semaphore_of_2).unwrap_err()
        );
        assert!(message.contains("semaphore's of 2 permits"), "{message}");
        // A token of a shape never handed out is that, whatever kind it is given with or says
        // it is of: not a token of another kind.
        for made_up in [
            "made-up",
            "read:made-up",
            "semaphore.0:0123456789abcdef0123456789abcdef",
            "semaphore.1025:0123456789abcdef0123456789abcdef",
            "mutex:0123456789abcdef0123456789abcdef",
            "",
        ] {
            for kind in [LockKind::Mutex, LockKind::Read, LockKind::semaphore(1)] {
                assert_eq!(code(inward(&kind, made_up)), "invalid_token", "{made_up:?}");
            }
        }
    }
}
