//! Snapshots written by earlier releases, read into the current machine. A snapshot is the
//! machine in bincode, field by field, with no version (issue 55 is to version it): a field
//! appended to `Machine` makes an older snapshot end too early. Each such field is appended
//! last with an empty default, so an older snapshot reads as the current one once the default
//! fields' own encoding is appended to it.

use allot_core::machine::Machine;
use allot_net::wire;

/// The machine in `b`, a snapshot of this release or of one from before the usage ledger.
pub fn decode_machine(b: &[u8]) -> Result<Machine, String> {
    let err = match wire::decode_snapshot::<Machine>(b) {
        Ok(m) => return Ok(m),
        Err(e) => e,
    };
    // Before the usage ledger (2d6bbda and earlier): the ledger starts empty.
    let tail =
        wire::encode_snapshot(&allot_core::usage::Ledger::default()).map_err(|e| e.to_string())?;
    let mut longer = Vec::with_capacity(b.len() + tail.len());
    longer.extend_from_slice(b);
    longer.extend_from_slice(&tail);
    let mut m = wire::decode_snapshot::<Machine>(&longer).map_err(|_| err.to_string())?;
    // It counts what runs from here on. Replicas that read their old snapshots at different
    // log positions may differ on the hours of the upgrade itself; reports come from the
    // leader, and a snapshot the leader sends brings a follower its figures.
    m.usage = allot_core::usage::Ledger::seeded(&m.state);
    Ok(m)
}
