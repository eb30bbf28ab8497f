//! A device node as the container's `/dev` holds it, read from the host's: what the runtime
//! spec (`spec`) and the CDI edits (`cdi`) both speak of.

use std::path::Path;

/// A device node to create in the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNode {
    /// Path inside the container.
    pub path: String,
    /// `c` or `b`.
    pub kind: char,
    pub major: i64,
    pub minor: i64,
}

/// The device node at `host` (a character or block device), to appear at `container`.
pub fn device_node(host: &Path, container: &str) -> Result<DeviceNode, String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(host).map_err(|e| format!("device {}: {e}", host.display()))?;
    let kind = if m.file_type().is_char_device() {
        'c'
    } else if m.file_type().is_block_device() {
        'b'
    } else {
        return Err(format!("{} is not a device node", host.display()));
    };
    let rdev = m.rdev();
    Ok(DeviceNode {
        path: container.to_string(),
        kind,
        major: libc::major(rdev) as i64,
        minor: libc::minor(rdev) as i64,
    })
}
