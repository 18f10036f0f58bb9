//! The slot of a lock name: which of the masters' fencing floors keeps its tokens growing once
//! its counter is gone (see docs/safety.md). The floor of a name lives under
//! `{prefix}fence-floor:{slot}` (`{prefix}rw:…` and `{prefix}sem:…` for read-write locks and
//! semaphores).
//!
//! The slot is the name's Redis Cluster hash slot (CRC16/XMODEM of its bytes, modulo
//! [`SLOTS`], with no hash tags), so a name always has the same one. The checksum is written
//! here rather than taken from a crate: it is a dozen lines, and every build of the library
//! then resolves from the same dependencies.

/// How many slots names are spread over: a master keeps at most this many floors per kind.
pub const SLOTS: u16 = 16_384;

/// The slot of `name`, as Redis Cluster's `CLUSTER KEYSLOT` gives it for a key without hash
/// tags.
pub fn of(name: &str) -> u16 {
    crc16_xmodem(name.as_bytes()) % SLOTS
}

/// CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection), bit by bit: names are
/// short, and a slot is computed once per lock and call.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_names_slot_is_its_redis_cluster_slot() {
        // The check value of CRC16/XMODEM, and what `CLUSTER KEYSLOT` gives.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
        for (name, slot) in [("x", 16_287), ("foo", 12_182), ("bar", 5_061), ("", 0)] {
            assert_eq!(of(name), slot, "{name:?}");
        }
    }
}
