//! A script call written as RESP straight into a connection's output buffer, with no command
//! built apart: every lock operation makes one such call to each master, and a command built
//! first costs two allocations and a copy for each.

use std::io;

use redis::{RedisWrite, ToRedisArgs};

/// A script call's arguments after its keys, as the calls to a node add them: counted on a
/// first pass, then written on a second, after the RESP header that counts them.
pub(crate) struct ScriptArgs<'o> {
    out: Option<&'o mut Vec<u8>>,
    count: usize,
}

impl ScriptArgs<'_> {
    /// Adds `arg`: one argument, or several for a value that makes several (as redis-rs's
    /// commands take them).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(self);
        self
    }

    /// Adds empty arguments until there are `n`: an argument a script reads at a fixed place
    /// after optional ones goes there.
    pub(crate) fn pad_to(&mut self, n: usize) -> &mut Self {
        while self.count < n {
            self.write_arg(b"");
        }
        self
    }
}

impl RedisWrite for ScriptArgs<'_> {
    fn write_arg(&mut self, arg: &[u8]) {
        self.count += 1;
        if let Some(out) = self.out.as_deref_mut() {
            bulk(out, arg);
        }
    }

    fn writer_for_next_arg(&mut self) -> impl io::Write + '_ {
        NextArg {
            to: self,
            bytes: Vec::new(),
        }
    }
}

/// One argument written in pieces: its length goes in front of it, so it is added when done.
struct NextArg<'a, 'o> {
    to: &'a mut ScriptArgs<'o>,
    bytes: Vec<u8>,
}

impl io::Write for NextArg<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for NextArg<'_, '_> {
    fn drop(&mut self) {
        self.to.write_arg(&self.bytes);
    }
}

/// Appends to `out` the call `command script numkeys keys... args...`, where `command` is
/// `EVALSHA` with the script's hash or `EVAL` with its body, and `args` adds the arguments
/// after the keys (it is run twice: to count them, then to write them).
pub(crate) fn write_script_call(
    out: &mut Vec<u8>,
    command: &str,
    script: &str,
    keys: &[&str],
    args: &impl Fn(&mut ScriptArgs<'_>),
) {
    let mut counted = ScriptArgs {
        out: None,
        count: 0,
    };
    args(&mut counted);
    out.push(b'*');
    out.extend_from_slice(decimal(3 + keys.len() + counted.count, &mut [0; 20]));
    out.extend_from_slice(b"\r\n");
    bulk(out, command.as_bytes());
    bulk(out, script.as_bytes());
    bulk(out, decimal(keys.len(), &mut [0; 20]));
    for key in keys {
        bulk(out, key.as_bytes());
    }
    args(&mut ScriptArgs {
        out: Some(out),
        count: 0,
    });
}

/// Appends `arg` as a RESP bulk string.
fn bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(decimal(arg.len(), &mut [0; 20]));
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, written at the end of `digits` (a `usize` has at most 20).
fn decimal(n: usize, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    let mut rest = n;
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        start -= 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    digits.get(start..).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// What redis-rs writes for the same call.
    fn packed(
        command: &str,
        script: &str,
        keys: &[&str],
        args: impl Fn(&mut redis::Cmd),
    ) -> Vec<u8> {
        let mut cmd = redis::cmd(command);
        cmd.arg(script).arg(keys.len()).arg(keys);
        args(&mut cmd);
        cmd.get_packed_command()
    }

    #[test]
    fn lengths_are_written_in_decimal() {
        for n in [0, 7, 10, 99, 100, 4096, 1_000_000, usize::MAX] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }

    #[test]
    fn a_call_is_written_as_redis_rs_writes_it() {
        let keys = ["rq:lock:x", "rq:fence:x", "rq:queue:x"];
        let mut out = b"*1\r\n$4\r\nPING\r\n".to_vec();
        write_script_call(&mut out, "EVALSHA", "0123abcd", &keys, &|c| {
            c.arg("token")
                .arg(10_000u64)
                .arg(u8::from(true))
                .arg("")
                .arg(-3i64);
        });
        let mut expected = b"*1\r\n$4\r\nPING\r\n".to_vec();
        expected.extend(packed("EVALSHA", "0123abcd", &keys, |c| {
            c.arg("token")
                .arg(10_000u64)
                .arg(u8::from(true))
                .arg("")
                .arg(-3i64);
        }));
        assert_eq!(out, expected);
    }

    #[test]
    fn a_call_without_arguments_and_an_argument_written_in_pieces() {
        let mut out = Vec::new();
        write_script_call(&mut out, "EVAL", "return 1", &[], &|_| {});
        assert_eq!(out, packed("EVAL", "return 1", &[], |_| {}));

        let mut out = Vec::new();
        write_script_call(&mut out, "EVAL", "return 1", &["k"], &|c| {
            let mut piece = c.writer_for_next_arg();
            piece.write_all(b"ab").unwrap();
            piece.write_all(b"cd").unwrap();
            drop(piece);
            c.arg("e");
        });
        assert_eq!(
            out,
            packed("EVAL", "return 1", &["k"], |c| {
                c.arg("abcd").arg("e");
            })
        );
    }
}
