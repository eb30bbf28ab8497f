//! Versioned formats: how log entries and snapshots say which format they are in, which
//! formats this build reads, and which commands need which format.
//!
//! Format 0 is what releases before versioned formats wrote: bare bincode. Every later format
//! puts an envelope in front of the bincode: the byte `0xFF` (no bincode encoding of an enum
//! or of the machine starts with it: a variable-length integer's first byte is at most 254)
//! and the version as a variable-length integer. A build reads every format up to its own.
//!
//! A replica writes the cluster's format (`Machine::format`), never its own: the leader raises
//! the cluster's format with a `SetFormat` entry only once every voter has said it reads the
//! new one (`Node::handle_peer_format`), so no replica is ever sent an entry or a snapshot it
//! cannot read, and an upgrade can go one replica at a time. Once raised, the format is never
//! lowered: a replica of an older build can no longer join (it stops with a message saying
//! so), and going back to it means restoring a backup taken before.
//!
//! A format also gates what every replica must decide alike: from format 2 on, a failed
//! workload with auto-resume on is queued again, which a replica of a release before would
//! mark failed instead.
//!
//! | format | what it added |
//! |---|---|
//! | 0 | (releases before versioned formats: bare bincode) |
//! | 1 | the envelope; `SetFormat` |
//! | 2 | auto-resume: `Machine::auto_resumed` at the end of a snapshot, and failed workloads queued again |
//! | 3 | `RemoveNode`, and `Machine::removed_nodes` at the end of a snapshot |
//!
//! API requests carry a protocol version (`allot_net::wire`): a client sends the oldest one
//! that has its request, so a newer client talks to an older coordinator during an upgrade,
//! and a coordinator answers every version from `OLDEST_PROTOCOL_VERSION` to its own.

use allot_core::machine::Command;

/// The newest format this build reads and writes.
pub const CURRENT: u32 = 3;

/// The first byte of an enveloped (format 1 or later) entry or snapshot.
const ENVELOPE: u8 = 0xFF;

/// Set to `0` for a build that reads and writes only what the releases before versioned
/// formats did (format 0, protocol 2), or to another format below `CURRENT` for a build that
/// stops there: the upgrade test's "old release" when no old binary is given. Not for
/// production.
pub const EMULATE_ENV: &str = "ALLOT_EMULATE_FORMAT";

/// The newest format this process reads and writes: `CURRENT`, or less when emulating an
/// older release (`EMULATE_ENV`).
pub fn reads_from_env() -> Result<u32, String> {
    match std::env::var(EMULATE_ENV) {
        Err(_) => Ok(CURRENT),
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n <= CURRENT => Ok(n),
            _ => Err(format!(
                "{EMULATE_ENV}={v:?}: expected a format version from 0 to {CURRENT}"
            )),
        },
    }
}

/// Why bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Written in a format newer than this build reads: the replica must not go on.
    #[error("written in format {found}, and this build reads formats up to {reads}: run a newer allot (an upgrade is never undone once the cluster writes the new format)")]
    Newer { found: u32, reads: u32 },
    /// An envelope that ends early or whose version does not parse.
    #[error("a format envelope that does not parse ({0} bytes)")]
    BadEnvelope(usize),
    /// A format this build reads, but the bytes are not what it writes.
    #[error("{0}")]
    Undecodable(String),
}

/// `payload` in format `version`'s framing.
pub fn seal(version: u32, payload: Vec<u8>) -> Vec<u8> {
    if version == 0 {
        return payload;
    }
    let mut out = Vec::with_capacity(payload.len() + 6);
    out.push(ENVELOPE);
    let mut v = version;
    loop {
        let low = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    out.extend_from_slice(&payload);
    out
}

/// The format `b` is in and its payload, if this build (reading formats up to `reads`) reads it.
pub fn open(b: &[u8], reads: u32) -> Result<(u32, &[u8]), FormatError> {
    if b.first() != Some(&ENVELOPE) {
        return Ok((0, b));
    }
    let mut version: u32 = 0;
    for (i, &byte) in b.iter().enumerate().skip(1).take(5) {
        version |= u32::from(byte & 0x7F) << (7 * (i - 1));
        if byte & 0x80 == 0 {
            if version > reads {
                return Err(FormatError::Newer {
                    found: version,
                    reads,
                });
            }
            return Ok((version, &b[i + 1..]));
        }
    }
    Err(FormatError::BadEnvelope(b.len()))
}

/// The oldest format a log entry of `cmd` can be written in (what each format added).
pub fn needs(cmd: &Command) -> u32 {
    match cmd {
        Command::SetFormat { version } => *version,
        Command::RemoveNode { .. } => 3,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_0_is_bare_and_later_ones_round_trip() {
        assert_eq!(seal(0, vec![3, 4]), vec![3, 4]);
        assert_eq!(open(&[3, 4], 0), Ok((0, &[3u8, 4][..])));
        for v in [1, 2, 127, 128, 300, u32::MAX] {
            let b = seal(v, vec![9, 8, 7]);
            assert_eq!(b[0], ENVELOPE);
            assert_eq!(open(&b, u32::MAX), Ok((v, &[9u8, 8, 7][..])));
        }
        // An empty payload (the version alone) still reads.
        assert_eq!(open(&seal(1, vec![]), 1), Ok((1, &[][..])));
    }

    #[test]
    fn a_newer_format_is_refused_by_name_and_a_torn_envelope_is_bad() {
        let b = seal(2, vec![1]);
        assert_eq!(open(&b, 1), Err(FormatError::Newer { found: 2, reads: 1 }));
        assert!(open(&b, 1)
            .unwrap_err()
            .to_string()
            .contains("format 2, and this build reads formats up to 1"));
        assert_eq!(open(&[ENVELOPE], 1), Err(FormatError::BadEnvelope(1)));
        assert_eq!(
            open(&[ENVELOPE, 0x80, 0x80], 1),
            Err(FormatError::BadEnvelope(3))
        );
    }

    #[test]
    fn bincode_never_starts_an_enum_or_a_machine_with_the_envelope_byte() {
        // Variable-length integers start with at most 254 (251 to 254 announce a wider
        // integer), so a format-0 entry is never mistaken for an envelope.
        let e = allot_core::machine::Entry {
            now: 1,
            cmd: Command::SetFormat { version: 1 },
        };
        let b = allot_net::wire::encode(&e).expect("encodes");
        assert_ne!(b[0], ENVELOPE);
        let m = allot_net::wire::encode_snapshot(&allot_core::machine::Machine::new())
            .expect("encodes");
        assert_ne!(m[0], ENVELOPE);
    }
}
