//! Where one reply ends in the bytes read from a master (RESP2), so that a complete reply can
//! be handed to redis-rs's parser and an incomplete one left until more bytes come.

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

    #[test]
    fn complete_replies_are_measured() {
        for reply in [
            &b"+OK\r\n"[..],
            b"-ERR no\r\n",
            b":42\r\n",
            b"$3\r\nabc\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n:1\r\n:5\r\n",
            b"*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n:7\r\n",
            b"$4\r\na\r\nb\r\n",
        ] {
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
    fn garbage_is_malformed() {
        assert!(reply_len(b"?what\r\n").is_err());
        assert!(reply_len(b"$x\r\n").is_err());
        assert!(reply_len(b"$-2\r\n").is_err());
        assert!(reply_len(b"*99999999999\r\n").is_err());
        assert!(reply_len(b"$3\r\nabcde\r\n").is_err());
    }
}
