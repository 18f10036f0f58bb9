//! The replies read from a master (RESP2): the value of a plain one and where it ends, built in
//! one pass without redis-rs's general parser, and where any other ends, so that an incomplete
//! one waits for more bytes and a complete one goes to that parser.

use redis::Value;

/// The longest bulk string or array a reply may announce; anything longer is taken for a
/// broken stream rather than waited for.
const MAX_LENGTH: i64 = 512 * 1024 * 1024;

/// Why the bytes are not a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Malformed(pub(super) String);

/// The length of the first complete reply in `bytes`, `None` if more bytes are needed.
pub(super) fn reply_len(bytes: &[u8]) -> Result<Option<usize>, Malformed> {
    let mut at = 0;
    // Values still to be read: one to begin with, plus every element an array announces.
    let mut to_read: i64 = 1;
    while to_read > 0 {
        to_read -= 1;
        let Some(&kind) = bytes.get(at) else {
            return Ok(None);
        };
        let Some(line_end) = find_crlf(bytes, at + 1) else {
            return Ok(None);
        };
        let after_line = line_end + 2;
        match kind {
            b'+' | b'-' | b':' => at = after_line,
            b'$' => {
                let len = length(&bytes[at + 1..line_end])?;
                if len < 0 {
                    at = after_line;
                } else {
                    // `len` is at most MAX_LENGTH, so it fits.
                    let end = after_line + len as usize + 2;
                    if bytes.len() < end {
                        return Ok(None);
                    }
                    if &bytes[end - 2..end] != b"\r\n" {
                        return Err(Malformed("a bulk string not ended by CRLF".to_owned()));
                    }
                    at = end;
                }
            }
            b'*' => {
                let len = length(&bytes[at + 1..line_end])?;
                to_read += len.max(0);
                at = after_line;
            }
            other => {
                return Err(Malformed(format!(
                    "a reply of type {:?}, which RESP2 does not have",
                    char::from(other)
                )));
            }
        }
    }
    Ok(Some(at))
}

/// How deep an array nests before [`plain_value`] leaves the reply to redis-rs's parser: the
/// scripts answer flat arrays or arrays of arrays.
const PLAIN_DEPTH: usize = 4;

/// The first reply in `bytes`, if it is complete and plain, and its length: the same value
/// redis-rs's parser gives. `None` for an incomplete reply, an error reply and anything else
/// this does not build; [`reply_len`] and that parser take those. Every lock operation gets a
/// reply from each master, and the general parser costs several allocations for each, where
/// this needs one per string or array, in the same pass that finds where the reply ends.
pub(super) fn plain_value(bytes: &[u8]) -> Option<(Value, usize)> {
    let mut at = 0;
    let value = value_at(bytes, &mut at, 0)?;
    Some((value, at))
}

/// The value starting at `at`, which is moved past it.
fn value_at(bytes: &[u8], at: &mut usize, depth: usize) -> Option<Value> {
    let kind = *bytes.get(*at)?;
    let line_end = find_crlf(bytes, *at + 1)?;
    let line = bytes.get(*at + 1..line_end)?;
    *at = line_end + 2;
    match kind {
        b'+' => {
            let text = std::str::from_utf8(line).ok()?;
            Some(if text == "OK" {
                Value::Okay
            } else {
                Value::SimpleString(text.to_owned())
            })
        }
        b':' => Some(Value::Int(number(line)?)),
        b'$' => {
            let Ok(len) = usize::try_from(length(line).ok()?) else {
                return Some(Value::Nil);
            };
            let end = *at + len;
            let data = bytes.get(*at..end)?;
            if bytes.get(end..end + 2)? != b"\r\n" {
                return None;
            }
            *at = end + 2;
            Some(Value::BulkString(data.to_vec()))
        }
        b'*' if depth < PLAIN_DEPTH => {
            let Ok(len) = usize::try_from(length(line).ok()?) else {
                return Some(Value::Nil);
            };
            // Every element takes at least three bytes, so what was read bounds the allocation.
            let mut items = Vec::with_capacity(len.min(bytes.len() / 3));
            for _ in 0..len {
                items.push(value_at(bytes, at, depth + 1)?);
            }
            Some(Value::Array(items))
        }
        _ => None,
    }
}

/// An integer reply's line, as redis-rs reads one (surrounding blanks allowed).
fn number(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

fn find_crlf(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|i| from + i)
}

/// A bulk string's or array's announced length: -1 (nil) up to [`MAX_LENGTH`].
fn length(digits: &[u8]) -> Result<i64, Malformed> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| (-1..=MAX_LENGTH).contains(n))
        .ok_or_else(|| Malformed(format!("a length of {:?}", String::from_utf8_lossy(digits))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply of every shape the masters send, one error among them.
    const REPLIES: [&[u8]; 16] = [
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"-ERR no\r\n",
        b":42\r\n",
        b":-7\r\n",
        b"$3\r\nabc\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*2\r\n:1\r\n:1795727772372935\r\n",
        b"*3\r\n:4\r\n$32\r\n2a588abab8c174d6f648e11321bd4d87\r\n:12\r\n",
        b"*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n:7\r\n",
        b"$4\r\na\r\nb\r\n",
        b"*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$5\r\nw.1 x\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$4\r\nchan\r\n:1\r\n",
    ];

    #[test]
    fn complete_replies_are_measured() {
        for reply in REPLIES {
            assert_eq!(reply_len(reply), Ok(Some(reply.len())), "{reply:?}");
            // Followed by the start of the next reply, it is measured the same.
            let mut more = reply.to_vec();
            more.extend_from_slice(b"*2\r\n:1");
            assert_eq!(reply_len(&more), Ok(Some(reply.len())), "{reply:?}");
            // Cut anywhere, it is incomplete.
            for cut in 0..reply.len() {
                assert_eq!(reply_len(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn plain_values_are_what_redis_rs_makes_of_them() {
        for reply in REPLIES {
            let expected = match redis::parse_redis_value(reply).unwrap() {
                Value::ServerError(_) => None,
                value => Some((value, reply.len())),
            };
            assert_eq!(plain_value(reply), expected, "{reply:?}");
            // Followed by the next reply, it is read the same; cut anywhere, not at all.
            let mut more = reply.to_vec();
            more.extend_from_slice(b":1\r\n");
            assert_eq!(plain_value(&more), expected, "{reply:?}");
            for cut in 0..reply.len() {
                assert_eq!(plain_value(&reply[..cut]), None, "{reply:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn errors_and_deep_arrays_are_left_to_redis_rs() {
        assert_eq!(plain_value(b"-NOSCRIPT No matching script\r\n"), None);
        assert_eq!(plain_value(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"), None);
        assert_eq!(plain_value(b"*2\r\n:1\r\n-ERR inside\r\n"), None);
        // Nor does it take what reply_len calls malformed.
        assert_eq!(plain_value(b"$-2\r\n"), None);
        assert_eq!(plain_value(b"*99999999999\r\n"), None);
        assert_eq!(plain_value(b"$3\r\nabcde\r\n"), None);
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(reply_len(b"?what\r\n").is_err());
        assert!(reply_len(b"$x\r\n").is_err());
        assert!(reply_len(b"$-2\r\n").is_err());
        assert!(reply_len(b"*99999999999\r\n").is_err());
        assert!(reply_len(b"$3\r\nabcde\r\n").is_err());
    }
}
