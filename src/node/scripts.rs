//! The Lua scripts run on the nodes, and how one is run: by hash when the node has it cached,
//! whole otherwise, with a health reading in front when one is due.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::encode::{ScriptArgs, write_script_call};
use super::health::PROBE_REPLIES;
use super::wire::Wire;
use super::{LinkId, Node};
use crate::error::{NodeFailureKind, Operation};

/// A Lua script run on the nodes, with its SHA1 for `EVALSHA`.
#[derive(Debug)]
pub(crate) struct LuaScript {
    /// Bit of this script in a node's loaded-scripts mask.
    bit: u32,
    body: &'static str,
    sha: String,
    /// Where, among its `ARGV` (from 1), a script that grants reads what the client read of
    /// the master on the connection it is sent on (see `marked_for_me` in `lua/marked.lua`).
    process_at: Option<usize>,
}

impl LuaScript {
    fn new(bit: u32, body: &'static str) -> Self {
        LuaScript {
            bit,
            body,
            sha: redis::Script::new(body).get_hash().to_owned(),
            process_at: None,
        }
    }

    /// A script that grants: it is told, as `ARGV[at]`, what the client read of the master.
    fn granting(bit: u32, body: &'static str, at: usize) -> Self {
        LuaScript {
            process_at: Some(at),
            ..LuaScript::new(bit, body)
        }
    }
}

/// The scripts, one per node-side operation.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: LuaScript,
    pub(crate) extend: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) dequeue: LuaScript,
    pub(crate) give_back: LuaScript,
    pub(crate) deployment: LuaScript,
    pub(crate) mark: LuaScript,
    pub(crate) adopt: LuaScript,
    pub(crate) reentrant_acquire: LuaScript,
    pub(crate) reentrant_extend: LuaScript,
    pub(crate) reentrant_release: LuaScript,
    pub(crate) rw_acquire: LuaScript,
    pub(crate) semaphore_acquire: LuaScript,
    pub(crate) holders_extend: LuaScript,
    pub(crate) holders_release: LuaScript,
    pub(crate) inspect: LuaScript,
}

/// Where the acquire scripts read the client's reading of the master: after the mutex's seven
/// arguments and the two a kind may add.
const ACQUIRE_PROCESS_AT: usize = 10;
/// Where the release scripts read it: after the four arguments and the six of a place kept.
const RELEASE_PROCESS_AT: usize = 11;
/// Where the give-back reads it: after its eight arguments.
const GIVE_BACK_PROCESS_AT: usize = 9;

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: LuaScript::granting(
        1,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/acquire.lua")
        ),
        ACQUIRE_PROCESS_AT,
    ),
    extend: LuaScript::new(
        2,
        concat!(
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            include_str!("../../lua/extend.lua")
        ),
    ),
    release: LuaScript::granting(
        4,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            include_str!("../../lua/release.lua")
        ),
        RELEASE_PROCESS_AT,
    ),
    dequeue: LuaScript::new(
        8,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/dequeue.lua")
        ),
    ),
    give_back: LuaScript::granting(
        16,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/give_back.lua")
        ),
        GIVE_BACK_PROCESS_AT,
    ),
    deployment: LuaScript::new(32, include_str!("../../lua/deployment.lua")),
    mark: LuaScript::new(64, include_str!("../../lua/mark.lua")),
    adopt: LuaScript::new(128, include_str!("../../lua/adopt.lua")),
    // The reentrant scripts wrap the mutex's own as functions, so that a reentrant lock and a
    // mutex of the same name exclude each other and share the queue and the hand-over.
    reentrant_acquire: LuaScript::granting(
        1 << 8,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            "local function mutex_acquire()\n",
            include_str!("../../lua/acquire.lua"),
            "\nend\n",
            include_str!("../../lua/reentrant_acquire.lua")
        ),
        ACQUIRE_PROCESS_AT,
    ),
    reentrant_extend: LuaScript::new(
        1 << 9,
        concat!(
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            include_str!("../../lua/reentrant_extend.lua")
        ),
    ),
    reentrant_release: LuaScript::granting(
        1 << 10,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            "local function mutex_release()\n",
            include_str!("../../lua/release.lua"),
            "\nend\n",
            include_str!("../../lua/reentrant_release.lua")
        ),
        RELEASE_PROCESS_AT,
    ),
    rw_acquire: LuaScript::granting(
        1 << 11,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            include_str!("../../lua/holders.lua"),
            include_str!("../../lua/rw_acquire.lua")
        ),
        ACQUIRE_PROCESS_AT,
    ),
    semaphore_acquire: LuaScript::granting(
        1 << 12,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            include_str!("../../lua/holders.lua"),
            include_str!("../../lua/semaphore_acquire.lua")
        ),
        ACQUIRE_PROCESS_AT,
    ),
    holders_extend: LuaScript::new(
        1 << 13,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            include_str!("../../lua/holders.lua"),
            include_str!("../../lua/holders_extend.lua")
        ),
    ),
    holders_release: LuaScript::new(
        1 << 14,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/marked.lua"),
            include_str!("../../lua/fences.lua"),
            include_str!("../../lua/holders.lua"),
            include_str!("../../lua/holders_release.lua")
        ),
    ),
    inspect: LuaScript::new(1 << 15, include_str!("../../lua/inspect.lua")),
});

impl Node {
    /// Runs a script with the given keys, using `EVALSHA` when the node is known to have the
    /// script and `EVAL` (which also caches it) otherwise. When the node's health is due for a
    /// reading, the reading is pipelined in front of the script, in the same round trip. Returns
    /// the answer and the connection it came on.
    ///
    /// A `NOSCRIPT` answer means the script cache was emptied under this connection (`SCRIPT
    /// FLUSH`, or a restart behind something that kept the connection open): the script is
    /// sent whole, with a fresh reading in front, before its vote can count.
    pub(super) async fn eval(
        &self,
        op: Operation,
        script: &LuaScript,
        keys: &[&str],
        args: impl Fn(&mut ScriptArgs<'_>),
    ) -> std::result::Result<(Value, LinkId), NodeFailureKind> {
        let (link, conn) = self.connect();
        let known = self.loaded.load(Ordering::Relaxed) & script.bit != 0;
        let process = script.process_at.map(|at| (at, self.process_arg(link)));
        let args = |c: &mut ScriptArgs<'_>| {
            args(c);
            if let Some((at, process)) = &process {
                c.pad_to(at - 1).arg(process.as_str());
            }
        };
        let call = |by_hash: bool| {
            let args = &args;
            move |out: &mut Vec<u8>| {
                if by_hash {
                    write_script_call(out, "EVALSHA", &script.sha, keys, args);
                } else {
                    write_script_call(out, "EVAL", script.body, keys, args);
                }
            }
        };
        let probe = self.needs_probe(link);
        let sent = self.send(op, &conn, link, call(known), probe);
        // Sent whole, the script is cached on the node before any later command on this
        // connection runs: those can go by hash, without waiting for this one's answer.
        self.loaded.fetch_or(script.bit, Ordering::Relaxed);
        let mut result = sent.await;
        if known
            && matches!(&result, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        {
            self.loaded.fetch_and(!script.bit, Ordering::Relaxed);
            self.health().verified_link = None;
            result = self.send(op, &conn, link, call(false), true).await;
            self.loaded.fetch_or(script.bit, Ordering::Relaxed);
        }
        match result {
            Ok(value) => Ok((value, link)),
            Err(e) => Err(self.failed(op, &e, link)),
        }
    }

    /// Sends the command `write` writes on connection `link`, with a health reading in front
    /// when `probe` is set. The command is sent when this is called; the future answers.
    fn send<W: FnOnce(&mut Vec<u8>)>(
        &self,
        op: Operation,
        conn: &Wire,
        link: LinkId,
        write: W,
        probe: bool,
    ) -> impl Future<Output = RedisResult<Value>> + use<'_, W> {
        let call = if probe {
            // The reading in front of the command, in one write.
            conn.call(Some(op), PROBE_REPLIES + 1, |out| {
                out.extend_from_slice(&self.probe_pipeline().get_packed_pipeline());
                write(out);
            })
        } else {
            conn.call(Some(op), 1, write)
        };
        async move {
            let mut values = call.await?;
            if !probe {
                // Server errors come back as values; turn them into errors to match on.
                return values
                    .pop()
                    .ok_or_else(|| RedisError::from((ErrorKind::Parse, "no reply")))
                    .and_then(Value::extract_error);
            }
            match values.len() {
                n if n == PROBE_REPLIES + 1 => {
                    let value = values.pop().unwrap_or(Value::Nil);
                    self.record_probe(link, &values);
                    value.extract_error()
                }
                n => Err(RedisError::from((
                    ErrorKind::Parse,
                    "pipeline answered with the wrong number of replies",
                    format!("{n}"),
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_hashes_are_distinct() {
        let s = &*SCRIPTS;
        let all = [
            &s.acquire,
            &s.extend,
            &s.release,
            &s.dequeue,
            &s.give_back,
            &s.deployment,
            &s.mark,
            &s.adopt,
            &s.reentrant_acquire,
            &s.reentrant_extend,
            &s.reentrant_release,
            &s.rw_acquire,
            &s.semaphore_acquire,
            &s.holders_extend,
            &s.holders_release,
            &s.inspect,
        ];
        for (i, a) in all.iter().enumerate() {
            assert_eq!(a.sha.len(), 40);
            for b in &all[i + 1..] {
                assert_ne!(a.sha, b.sha);
                // Each has its own bit in a node's record of the scripts it has loaded.
                assert_eq!(a.bit & b.bit, 0);
            }
        }
    }
}
