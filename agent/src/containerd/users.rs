//! User and group names (a workload's `user`, or the image's `USER ray`) resolved from the
//! image's own `/etc/passwd` and `/etc/group`, as Docker and containerd resolve them.
//!
//! The files are read from the image's layers in containerd's content store (through its
//! socket: the agent needs no access to the snapshots' directories, and no mount), top layer
//! first, each streamed through gzip and a tar reader that keeps only those two files; a
//! whiteout (`etc/.wh.passwd`) or an opaque `etc` in a higher layer hides the lower ones. What
//! was found is cached per image manifest in the agent's data directory, so an image is read
//! once per node. Numbers need none of this.

use std::io::Write;
use std::path::Path;

use allot_common::image::{parse_user_spec, Id};

use super::api;
use super::{CallError, Containerd};

/// The two files, as found (None: the image has none).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Accounts {
    pub passwd: Option<String>,
    pub group: Option<String>,
}

/// Largest `/etc/passwd` or `/etc/group` kept.
const MAX_FILE: u64 = 1 << 20;

/// `user[:group]` as (uid, gid), looking names up in `accounts` (read only when needed).
pub fn resolve(user: &str, accounts: &Accounts) -> Result<(u32, u32), String> {
    let (u, g) = parse_user_spec(user)?;
    let passwd = || {
        accounts.passwd.as_deref().ok_or_else(|| {
            format!("user {user:?}: the image has no /etc/passwd to look names up in")
        })
    };
    let (uid, primary) = match &u {
        Id::Number(n) => (*n, *n),
        Id::Name(name) => passwd()?
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 4 && f[0] == name).then(|| (f[2].parse().ok(), f[3].parse().ok()))
            })
            .find_map(|(u, g)| Some((u?, g?)))
            .ok_or_else(|| format!("user {user:?}: no user {name:?} in the image's /etc/passwd"))?,
    };
    let gid = match g {
        None => primary,
        Some(Id::Number(n)) => n,
        Some(Id::Name(name)) => accounts
            .group
            .as_deref()
            .ok_or_else(|| format!("user {user:?}: the image has no /etc/group"))?
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 3 && f[0] == name).then(|| f[2].parse().ok())
            })
            .find_map(|g| g)
            .ok_or_else(|| format!("user {user:?}: no group {name:?} in the image's /etc/group"))?,
    };
    Ok((uid, gid))
}

/// Whether `user` needs the image's files.
pub fn needs_lookup(user: &str) -> bool {
    !matches!(
        parse_user_spec(user),
        Ok((Id::Number(_), None | Some(Id::Number(_)))) | Err(_)
    )
}

/// What a layer says about one of the two files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Seen {
    #[default]
    Nothing,
    File(Vec<u8>),
    /// Whited out: lower layers' copy is hidden.
    Gone,
}

/// A tar reader fed by `write`, keeping `etc/passwd` and `etc/group`.
#[derive(Default)]
struct TarScan {
    header: Vec<u8>,
    /// Bytes of the current entry's data left, then its padding.
    left: u64,
    pad: u64,
    /// Which file the current entry's data goes to (0 passwd, 1 group), or a long name or pax
    /// record being read.
    into: Option<Sink>,
    long_name: Option<String>,
    /// A PAX `size` for the next entry (files of 8 GiB and more have 0 in the header).
    pax_size: Option<u64>,
    files: [Seen; 2],
    opaque_etc: bool,
    ended: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sink {
    File(usize),
    LongName,
    Pax,
}

fn clean(name: &str) -> &str {
    name.trim_start_matches("./").trim_start_matches('/')
}

fn octal(field: &[u8]) -> u64 {
    // GNU base-256 for huge sizes: first byte 0x80.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        return field[1..].iter().fold(0u64, |a, b| {
            a.saturating_mul(256).saturating_add(u64::from(*b))
        });
    }
    let s: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    u64::from_str_radix(s.trim(), 8).unwrap_or(0)
}

impl TarScan {
    fn entry(&mut self, h: &[u8]) {
        if h.iter().all(|b| *b == 0) {
            self.ended = true;
            return;
        }
        let field = |a: usize, b: usize| {
            let f = &h[a..b];
            let end = f.iter().position(|c| *c == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..end]).into_owned()
        };
        let kind = h[156];
        let size = match self.pax_size.take() {
            Some(s) if !matches!(kind, b'L' | b'x' | b'g') => s,
            _ => octal(&h[124..136]),
        };
        let mut name = field(0, 100);
        // POSIX ustar has a name prefix; GNU's "ustar  " keeps times there instead.
        if &h[257..263] == b"ustar\0" {
            let prefix = field(345, 500);
            if !prefix.is_empty() {
                name = format!("{prefix}/{name}");
            }
        }
        if let Some(long) = self.long_name.take() {
            name = long;
        }
        self.left = size;
        self.pad = (512 - size % 512) % 512;
        self.into = match kind {
            b'L' => Some(Sink::LongName),
            b'x' => Some(Sink::Pax),
            _ => {
                let n = clean(&name);
                let target = match n {
                    "etc/passwd" => Some(0),
                    "etc/group" => Some(1),
                    _ => None,
                };
                match (n, target) {
                    ("etc/.wh.passwd", _) => self.mark(0, Seen::Gone),
                    ("etc/.wh.group", _) => self.mark(1, Seen::Gone),
                    ("etc/.wh..wh..opq", _) => self.opaque_etc = true,
                    _ => {}
                }
                match target {
                    // A regular file (or an old-style one with kind 0 or NUL).
                    Some(i) if matches!(kind, b'0' | 0 | b'7') && size <= MAX_FILE => {
                        self.mark(i, Seen::File(Vec::new()));
                        Some(Sink::File(i))
                    }
                    _ => None,
                }
            }
        };
        if matches!(self.into, Some(Sink::LongName | Sink::Pax)) {
            self.header.clear();
        }
    }

    fn mark(&mut self, i: usize, s: Seen) {
        self.files[i] = s;
    }

    fn data(&mut self, chunk: &[u8]) {
        match self.into {
            Some(Sink::File(i)) => {
                if let Seen::File(v) = &mut self.files[i] {
                    v.extend_from_slice(chunk);
                }
            }
            Some(Sink::LongName | Sink::Pax) if self.header.len() + chunk.len() <= 1 << 16 => {
                self.header.extend_from_slice(chunk);
            }
            _ => {}
        }
    }

    fn entry_done(&mut self) {
        match self.into.take() {
            Some(Sink::LongName) => {
                let end = self
                    .header
                    .iter()
                    .position(|c| *c == 0)
                    .unwrap_or(self.header.len());
                self.long_name = Some(String::from_utf8_lossy(&self.header[..end]).into_owned());
            }
            Some(Sink::Pax) => {
                // Records "LEN key=value\n"; only the path matters here.
                let text = String::from_utf8_lossy(&self.header).into_owned();
                for rec in text.split('\n') {
                    if let Some((_, kv)) = rec.split_once(' ') {
                        if let Some(p) = kv.strip_prefix("path=") {
                            self.long_name = Some(p.to_string());
                        } else if let Some(n) = kv.strip_prefix("size=") {
                            self.pax_size = n.trim().parse().ok();
                        }
                    }
                }
            }
            _ => {}
        }
        self.header.clear();
    }
}

impl Write for TarScan {
    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len();
        while !buf.is_empty() && !self.ended {
            if self.left > 0 {
                let take = buf.len().min(self.left as usize);
                self.data(&buf[..take]);
                self.left -= take as u64;
                buf = &buf[take..];
                if self.left == 0 && self.pad == 0 {
                    self.entry_done();
                }
            } else if self.pad > 0 {
                let take = buf.len().min(self.pad as usize);
                self.pad -= take as u64;
                buf = &buf[take..];
                if self.pad == 0 {
                    self.entry_done();
                }
            } else {
                let take = buf.len().min(512 - self.header.len());
                self.header.extend_from_slice(&buf[..take]);
                buf = &buf[take..];
                if self.header.len() == 512 {
                    let h = std::mem::take(&mut self.header);
                    self.entry(&h);
                    if self.left == 0 && self.pad == 0 {
                        self.entry_done();
                    }
                }
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How a layer is compressed, from its media type.
fn compression(media_type: &str) -> Result<bool, String> {
    if media_type.ends_with("gzip") {
        Ok(true)
    } else if media_type.ends_with(".tar") || media_type.ends_with("tar") {
        Ok(false)
    } else {
        Err(format!(
            "a layer of media type {media_type} cannot be read for /etc/passwd (gzip and plain \
             tar can); give user as numbers (uid:gid)"
        ))
    }
}

/// Reads `/etc/passwd` and `/etc/group` from the layers of the image whose manifest is
/// `manifest_digest` (top layer first).
async fn read_accounts(ctd: &Containerd, manifest_digest: &str) -> Result<Accounts, String> {
    let manifest = super::pull::read_content(ctd, manifest_digest)
        .await
        .map_err(|e| e.to_string())?;
    let layers = super::pull::manifest_layers(&manifest)?;
    let mut found: [Seen; 2] = Default::default();
    for (digest, media_type) in layers.iter().rev() {
        let gzip = compression(media_type)?;
        let mut scan = TarScan::default();
        let mut stream = ctd
            .call_streaming::<_, api::ReadContentResponse>(
                "/containerd.services.content.v1.Content/Read",
                api::ReadContentRequest {
                    digest: digest.clone(),
                    offset: 0,
                    size: 0,
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        // Several gzip members are one layer (eStargz writes one per file).
        let mut gz = gzip.then(|| flate2::write::MultiGzDecoder::new(TarScan::default()));
        // The tar stream's end seen: the rest (padding) is not read.
        let mut ended = false;
        loop {
            let chunk = match stream.message().await {
                Ok(Some(m)) => m.data,
                Ok(None) => break,
                Err(status) => {
                    return Err(CallError {
                        method: "/containerd.services.content.v1.Content/Read",
                        status,
                    }
                    .to_string())
                }
            };
            ended = match &mut gz {
                Some(d) => {
                    d.write_all(&chunk)
                        .map_err(|e| format!("layer {digest}: {e}"))?;
                    d.get_ref().ended
                }
                None => {
                    let _ = scan.write_all(&chunk);
                    scan.ended
                }
            };
            if ended {
                break;
            }
        }
        if let Some(mut d) = gz {
            if !ended {
                d.try_finish().map_err(|e| format!("layer {digest}: {e}"))?;
            }
            scan = std::mem::take(d.get_mut());
        }
        for (i, seen) in scan.files.into_iter().enumerate() {
            if found[i] == Seen::Nothing {
                found[i] = match seen {
                    Seen::Nothing if scan.opaque_etc => Seen::Gone,
                    s => s,
                };
            }
        }
        if found.iter().all(|f| *f != Seen::Nothing) {
            break;
        }
    }
    let text = |s: &Seen| match s {
        Seen::File(v) => Some(String::from_utf8_lossy(v).into_owned()),
        _ => None,
    };
    Ok(Accounts {
        passwd: text(&found[0]),
        group: text(&found[1]),
    })
}

/// `user` as (uid, gid) for a container of the image whose manifest is `digest`: numbers as
/// they are, names from the image's files (cached under `cache_dir`).
pub async fn uid_gid(
    ctd: &Containerd,
    digest: &str,
    user: &str,
    cache_dir: &Path,
) -> Result<(u32, u32), String> {
    if !needs_lookup(user) {
        return resolve(user, &Accounts::default());
    }
    let cache = cache_dir
        .join("image-accounts")
        .join(format!("{}.json", digest.replace(':', "-")));
    if let Some(a) = std::fs::read(&cache)
        .ok()
        .and_then(|b| serde_json::from_slice::<Accounts>(&b).ok())
    {
        return resolve(user, &a);
    }
    let accounts = read_accounts(ctd, digest).await?;
    if let Some(dir) = cache.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(b) = serde_json::to_vec(&accounts) {
        let tmp = cache.with_extension("tmp");
        if std::fs::write(&tmp, b).is_ok() {
            let _ = std::fs::rename(&tmp, &cache);
        }
    }
    resolve(user, &accounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_entry(out: &mut Vec<u8>, name: &str, kind: u8, data: &[u8]) {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let size = format!("{:011o}\0", data.len());
        h[124..136].copy_from_slice(size.as_bytes());
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }

    fn scan(bytes: &[u8], chunk: usize) -> TarScan {
        let mut s = TarScan::default();
        for c in bytes.chunks(chunk) {
            s.write_all(c).unwrap();
        }
        s
    }

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nray:x:1000:100::/home/ray:/bin/bash\n";
    const GROUP: &str = "root:x:0:\nusers:x:100:ray\nvideo:x:44:ray\n";

    #[test]
    fn the_files_are_found_in_a_tar_stream_in_any_chunking() {
        let mut t = Vec::new();
        tar_entry(&mut t, "./usr/bin/big", b'0', &vec![7u8; 3000]);
        tar_entry(&mut t, "./etc/", b'5', b"");
        tar_entry(&mut t, "./etc/passwd", b'0', PASSWD.as_bytes());
        // A long name (GNU 'L') that is not one of them, then etc/group.
        let long = format!("etc/{}", "x".repeat(150));
        tar_entry(
            &mut t,
            "././@LongLink",
            b'L',
            format!("{long}\0").as_bytes(),
        );
        tar_entry(&mut t, "ignored", b'0', b"not the group file");
        tar_entry(&mut t, "etc/group", b'0', GROUP.as_bytes());
        t.extend_from_slice(&[0u8; 1024]);
        for chunk in [1, 7, 511, 512, 513, 100_000] {
            let s = scan(&t, chunk);
            assert_eq!(
                s.files[0],
                Seen::File(PASSWD.as_bytes().to_vec()),
                "{chunk}"
            );
            assert_eq!(s.files[1], Seen::File(GROUP.as_bytes().to_vec()), "{chunk}");
            assert!(s.ended);
        }
    }

    #[test]
    fn a_pax_size_is_the_entrys_size() {
        // A big file as Go's archive/tar writes it: size in a PAX record, 0 in the header.
        let big = vec![b'x'; 1500];
        let mut t = Vec::new();
        tar_entry(&mut t, "PaxHeaders/data", b'x', b"13 size=1500\n");
        tar_entry(&mut t, "data/model.bin", b'0', b"");
        // tar_entry padded the empty body to nothing: append the real bytes and padding.
        t.extend_from_slice(&big);
        t.resize(t.len().div_ceil(512) * 512, 0);
        tar_entry(&mut t, "etc/passwd", b'0', PASSWD.as_bytes());
        t.extend_from_slice(&[0u8; 1024]);
        let s = scan(&t, 100);
        assert_eq!(s.files[0], Seen::File(PASSWD.as_bytes().to_vec()));
    }

    #[test]
    fn several_gzip_members_are_one_layer() {
        use flate2::write::GzEncoder;
        let mut t = Vec::new();
        tar_entry(&mut t, "bin/x", b'0', b"x");
        let first = t.clone();
        let mut second = Vec::new();
        tar_entry(&mut second, "etc/passwd", b'0', PASSWD.as_bytes());
        second.extend_from_slice(&[0u8; 1024]);
        let gz = |b: &[u8]| {
            let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(b).unwrap();
            e.finish().unwrap()
        };
        let mut layer = gz(&first);
        layer.extend(gz(&second));
        let mut d = flate2::write::MultiGzDecoder::new(TarScan::default());
        for c in layer.chunks(37) {
            d.write_all(c).unwrap();
        }
        d.try_finish().unwrap();
        assert_eq!(d.get_ref().files[0], Seen::File(PASSWD.as_bytes().to_vec()));
    }

    #[test]
    fn whiteouts_hide_the_lower_layers() {
        let mut t = Vec::new();
        tar_entry(&mut t, "etc/.wh.passwd", b'0', b"");
        tar_entry(&mut t, "etc/.wh..wh..opq", b'0', b"");
        let s = scan(&t, 512);
        assert_eq!(s.files[0], Seen::Gone);
        assert!(s.opaque_etc);
    }

    #[test]
    fn names_resolve_from_the_files() {
        let a = Accounts {
            passwd: Some(PASSWD.into()),
            group: Some(GROUP.into()),
        };
        assert_eq!(resolve("ray", &a), Ok((1000, 100)));
        assert_eq!(resolve("ray:video", &a), Ok((1000, 44)));
        assert_eq!(resolve("1000:video", &a), Ok((1000, 44)));
        assert_eq!(resolve("ray:7", &a), Ok((1000, 7)));
        assert_eq!(resolve("1000", &Accounts::default()), Ok((1000, 1000)));
        let e = resolve("bob", &a).unwrap_err();
        assert!(e.contains("no user \"bob\""), "{e}");
        let e = resolve("ray:wheel", &a).unwrap_err();
        assert!(e.contains("no group \"wheel\""), "{e}");
        let e = resolve("ray", &Accounts::default()).unwrap_err();
        assert!(e.contains("no /etc/passwd"), "{e}");
        assert!(needs_lookup("ray") && needs_lookup("0:users"));
        assert!(!needs_lookup("1000:100") && !needs_lookup(""));
    }
}
