//! Pulling an image into containerd: resolve the manifest (picking this node's platform from an
//! index), write the manifest, config and layers into containerd's content store, unpack the
//! layers into snapshots, and record the image under its name.
//!
//! Everything written is held by a containerd lease named after the image
//! (`allot-image-<hash of the name>`), so containerd's garbage collector keeps it until the
//! image cache drops the image (`gc_images`). A blob another pod's shim is writing at the same
//! moment (containerd locks it by ref) is waited for, not written twice.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::api;
use super::reference::Reference;
use super::registry::{Credentials, Registry};
use super::{CallError, Containerd};

/// Bytes per content write message (containerd accepts messages up to 16 MiB).
const CHUNK: usize = 1 << 20;
/// Label on allot's images: the chain id of the top layer (the snapshot pods start from).
pub const CHAIN_LABEL: &str = "io.allot.chain-id";
/// Label on allot's images: the digest of the image config.
pub const CONFIG_LABEL: &str = "io.allot.config";
/// Label on allot's images: when a pod last used it (ms since the epoch), for the cache rule.
pub const USED_LABEL: &str = "io.allot.last-used";

/// What a pod needs from its image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ImageConfig {
    #[serde(rename = "Env", default)]
    pub env: Option<Vec<String>>,
    #[serde(rename = "Entrypoint", default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    pub cmd: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    pub working_dir: Option<String>,
    #[serde(rename = "User", default)]
    pub user: Option<String>,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    config: Option<ImageConfig>,
    rootfs: RootFs,
}

#[derive(Deserialize)]
struct RootFs {
    diff_ids: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
struct Desc {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Clone, Debug, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    #[serde(default)]
    config: Option<Desc>,
    #[serde(default)]
    layers: Vec<Desc>,
    #[serde(default)]
    manifests: Vec<Desc>,
}

/// An image ready to run.
#[derive(Clone, Debug)]
pub struct Pulled {
    pub name: String,
    pub chain_id: String,
    pub config: ImageConfig,
    /// The digest of the manifest its layers are listed in.
    pub manifest_digest: String,
    /// It was already in the cache.
    pub cached: bool,
}

pub fn sha256_digest(bytes: &[u8]) -> String {
    let h = Sha256::digest(bytes);
    format!("sha256:{}", hex(&h))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The chain ids of a layer stack (the names of its snapshots), from the layers' diff ids.
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(prev) => sha256_digest(format!("{prev} {d}").as_bytes()),
        };
        out.push(next);
    }
    out
}

/// The lease that holds an image's content and snapshots.
pub fn lease_of(name: &str) -> String {
    let h = Sha256::digest(name.as_bytes());
    format!("allot-image-{}", &hex(&h)[..16])
}

/// The OCI architecture name of this machine.
pub fn this_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn call_err(image: &str) -> impl Fn(CallError) -> String + '_ {
    move |e| format!("pulling {image}: {e}")
}

/// Pulls `image` unless it is cached (a `latest` tag is always checked again). `progress` is
/// told (bytes done, bytes in all) as layers arrive.
pub async fn pull(
    ctd: &Containerd,
    image: &str,
    snapshotter: &str,
    plain_http: &[String],
    credentials: Option<Credentials>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<Pulled, String> {
    let r = Reference::parse(image)?;
    let name = r.name();
    if !r.always_pull() {
        if let Some(p) = cached(ctd, &name, snapshotter).await? {
            return Ok(p);
        }
    }
    let lease = lease_of(&name);
    let create = api::CreateLeaseRequest {
        id: lease.clone(),
        labels: HashMap::new(),
    };
    match ctd
        .call::<_, api::Empty>("/containerd.services.leases.v1.Leases/Create", create, None)
        .await
    {
        Ok(_) => {}
        Err(e) if e.already_exists() => {}
        Err(e) => return Err(call_err(image)(e)),
    }
    let registry = Arc::new(Mutex::new(Registry::new(
        &r,
        r.plain_http(plain_http),
        credentials,
    )));
    // Manifests and the config: small, fetched whole.
    let reg = registry.clone();
    let want = r.manifest_ref().to_string();
    let by_digest = r.digest.clone();
    let (top, manifest, config) =
        tokio::task::spawn_blocking(move || resolve(&reg, &want, by_digest.as_deref()))
            .await
            .map_err(|e| format!("pulling {image}: {e}"))??;
    let mut written = std::collections::BTreeSet::new();
    for (desc, bytes) in [&top, &manifest, &config] {
        if written.insert(desc.digest.clone()) {
            write_bytes(ctd, &lease, desc, bytes).await?;
        }
    }
    let m: Manifest = serde_json::from_slice(&manifest.1)
        .map_err(|e| format!("pulling {image}: its manifest is not readable: {e}"))?;
    let cfg: ConfigFile = serde_json::from_slice(&config.1)
        .map_err(|e| format!("pulling {image}: its config is not readable: {e}"))?;
    if cfg.rootfs.diff_ids.len() != m.layers.len() {
        return Err(format!(
            "pulling {image}: the manifest lists {} layers and the config {} diff ids",
            m.layers.len(),
            cfg.rootfs.diff_ids.len()
        ));
    }
    let total: u64 = m.layers.iter().map(|l| l.size.max(0) as u64).sum();
    let mut done = 0u64;
    progress(done, total);
    for layer in &m.layers {
        if !has_content(ctd, &layer.digest).await? {
            let reg = registry.clone();
            fetch_blob(ctd, &lease, reg, layer, &mut |n| {
                progress(done + n, total);
            })
            .await
            .map_err(|e| format!("pulling {image}: {e}"))?;
        }
        done += layer.size.max(0) as u64;
        progress(done, total);
    }
    let chains = chain_ids(&cfg.rootfs.diff_ids);
    unpack(ctd, &lease, snapshotter, &m.layers, &chains)
        .await
        .map_err(|e| format!("unpacking {image}: {e}"))?;
    let chain_id = chains.last().cloned().unwrap_or_default();
    let img = api::Image {
        name: name.clone(),
        labels: HashMap::from([
            (CHAIN_LABEL.to_string(), chain_id.clone()),
            (CONFIG_LABEL.to_string(), config.0.digest.clone()),
            (
                USED_LABEL.to_string(),
                allot_common::timefmt::now_ms().to_string(),
            ),
        ]),
        target: Some(manifest.0.clone()),
        created_at: None,
        updated_at: None,
    };
    let created = ctd
        .call::<_, api::GetImageResponse>(
            "/containerd.services.images.v1.Images/Create",
            api::CreateImageRequest {
                image: Some(img.clone()),
            },
            Some(&lease),
        )
        .await;
    match created {
        Ok(_) => {}
        Err(e) if e.already_exists() => {
            ctd.call::<_, api::GetImageResponse>(
                "/containerd.services.images.v1.Images/Update",
                api::UpdateImageRequest {
                    image: Some(img),
                    update_mask: None,
                },
                Some(&lease),
            )
            .await
            .map_err(call_err(image))?;
        }
        Err(e) => return Err(call_err(image)(e)),
    }
    Ok(Pulled {
        name,
        chain_id,
        config: cfg.config.unwrap_or_default(),
        manifest_digest: manifest.0.digest.clone(),
        cached: false,
    })
}

type Blob = (api::Descriptor, Vec<u8>);

/// Fetches the manifest (through an index when the tag names several platforms) and config.
fn resolve(
    reg: &Mutex<Registry>,
    want: &str,
    by_digest: Option<&str>,
) -> Result<(Blob, Blob, Blob), String> {
    let mut reg = reg
        .lock()
        .map_err(|_| "the registry client failed".to_string())?;
    let first = reg.manifest(want)?;
    let first_digest = sha256_digest(&first.bytes);
    if let Some(d) = by_digest {
        if d != first_digest {
            return Err(format!(
                "the registry served a manifest of digest {first_digest} for {d}"
            ));
        }
    }
    let parsed: Manifest = serde_json::from_slice(&first.bytes)
        .map_err(|e| format!("the manifest of {want} is not JSON: {e}"))?;
    let media = if first.media_type.is_empty() {
        parsed.media_type.clone()
    } else {
        first.media_type.clone()
    };
    let top = (
        api::Descriptor {
            media_type: media.clone(),
            digest: first_digest,
            size: first.bytes.len() as i64,
            annotations: HashMap::new(),
        },
        first.bytes,
    );
    let manifest = if media.contains("index") || media.contains("manifest.list") {
        let arch = this_arch();
        let pick = parsed
            .manifests
            .iter()
            .find(|d| {
                d.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == arch)
            })
            .ok_or_else(|| {
                let have: Vec<String> = parsed
                    .manifests
                    .iter()
                    .filter_map(|d| d.platform.as_ref())
                    .map(|p| format!("{}/{}", p.os, p.architecture))
                    .collect();
                format!(
                    "{want} has no image for linux/{arch}; it has {}",
                    have.join(", ")
                )
            })?
            .clone();
        let m = reg.manifest(&pick.digest)?;
        let got = sha256_digest(&m.bytes);
        if got != pick.digest {
            return Err(format!(
                "the registry served a manifest of digest {got} for {}",
                pick.digest
            ));
        }
        (
            api::Descriptor {
                media_type: pick.media_type.clone(),
                digest: got,
                size: m.bytes.len() as i64,
                annotations: HashMap::new(),
            },
            m.bytes,
        )
    } else {
        top.clone()
    };
    let m: Manifest = serde_json::from_slice(&manifest.1)
        .map_err(|e| format!("the manifest of {want} is not JSON: {e}"))?;
    let c = m
        .config
        .ok_or_else(|| format!("the manifest of {want} names no config"))?;
    let (mut rd, _) = reg.blob(&c.digest)?;
    let mut bytes = Vec::new();
    rd.by_ref()
        .take(16 << 20)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the config of {want}: {e}"))?;
    let got = sha256_digest(&bytes);
    if got != c.digest {
        return Err(format!(
            "the registry served a config of digest {got} for {}",
            c.digest
        ));
    }
    let config = (
        api::Descriptor {
            media_type: c.media_type,
            digest: got,
            size: bytes.len() as i64,
            annotations: HashMap::new(),
        },
        bytes,
    );
    Ok((top, manifest, config))
}

async fn has_content(ctd: &Containerd, digest: &str) -> Result<bool, String> {
    match ctd
        .call::<_, api::InfoResponse>(
            "/containerd.services.content.v1.Content/Info",
            api::InfoRequest {
                digest: digest.into(),
            },
            None,
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.not_found() => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes a small blob whole.
async fn write_bytes(
    ctd: &Containerd,
    lease: &str,
    desc: &api::Descriptor,
    bytes: &[u8],
) -> Result<(), String> {
    if has_content(ctd, &desc.digest).await? {
        return Ok(());
    }
    let (tx, rx) = mpsc::channel::<Result<Vec<u8>, String>>(1);
    let data = bytes.to_vec();
    tokio::spawn(async move {
        let _ = tx.send(Ok(data)).await;
    });
    let r = write_stream(ctd, lease, desc, rx, &mut |_| {}).await;
    written_anyway(ctd, &desc.digest, r).await
}

/// Streams a layer from the registry into the content store.
async fn fetch_blob(
    ctd: &Containerd,
    lease: &str,
    reg: Arc<Mutex<Registry>>,
    layer: &Desc,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<(), String> {
    let desc = api::Descriptor {
        media_type: layer.media_type.clone(),
        digest: layer.digest.clone(),
        size: layer.size,
        annotations: HashMap::new(),
    };
    let (tx, rx) = mpsc::channel::<Result<Vec<u8>, String>>(4);
    let digest = layer.digest.clone();
    let reader = tokio::task::spawn_blocking(move || {
        let opened = reg
            .lock()
            .map_err(|_| "the registry client failed".to_string())
            .and_then(|mut r| r.blob(&digest));
        let mut rd = match opened {
            Ok((rd, _)) => rd,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        loop {
            let mut buf = vec![0u8; CHUNK];
            let mut filled = 0;
            while filled < CHUNK {
                match rd.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(format!("reading blob {digest}: {e}")));
                        return;
                    }
                }
            }
            if filled == 0 {
                return;
            }
            buf.truncate(filled);
            if tx.blocking_send(Ok(buf)).is_err() {
                return;
            }
        }
    });
    let r = write_stream(ctd, lease, &desc, rx, progress).await;
    let _ = reader.await;
    written_anyway(ctd, &desc.digest, r).await
}

/// A write that failed while another writer committed the same blob is a success.
async fn written_anyway(
    ctd: &Containerd,
    digest: &str,
    r: Result<(), String>,
) -> Result<(), String> {
    match r {
        Err(e) => match has_content(ctd, digest).await {
            Ok(true) => Ok(()),
            _ => Err(e),
        },
        ok => ok,
    }
}

/// One content write: STAT, WRITE each chunk, COMMIT with the expected digest (containerd
/// checks it). A ref locked by another writer is waited for until the blob exists.
async fn write_stream(
    ctd: &Containerd,
    lease: &str,
    desc: &api::Descriptor,
    mut chunks: mpsc::Receiver<Result<Vec<u8>, String>>,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<(), String> {
    let reference = format!("allot-{}", desc.digest);
    let method = "/containerd.services.content.v1.Content/Write";
    let mut waited = Duration::ZERO;
    let (tx, mut resp) = loop {
        let (tx, rx) = mpsc::channel::<api::WriteContentRequest>(2);
        let stat = api::WriteContentRequest {
            action: api::WRITE_ACTION_STAT,
            r#ref: reference.clone(),
            ..Default::default()
        };
        tx.send(stat).await.map_err(|e| e.to_string())?;
        let opened = ctd
            .call_bidi::<_, _, api::WriteContentResponse>(
                method,
                ReceiverStream::new(rx),
                Some(lease),
            )
            .await;
        let mut resp = match opened {
            Ok(r) => r,
            Err(e)
                if e.code() == tonic::Code::Unavailable && waited < Duration::from_secs(3600) =>
            {
                // Another writer holds the ref; wait for its blob.
                tokio::time::sleep(Duration::from_millis(500)).await;
                waited += Duration::from_millis(500);
                if has_content(ctd, &desc.digest).await? {
                    return Ok(());
                }
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        match resp.message().await {
            Ok(Some(_)) => break (tx, resp),
            Ok(None) => return Err("containerd closed a content write".into()),
            Err(s)
                if s.code() == tonic::Code::Unavailable && waited < Duration::from_secs(3600) =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
                waited += Duration::from_millis(500);
                if has_content(ctd, &desc.digest).await? {
                    return Ok(());
                }
            }
            Err(s) if s.code() == tonic::Code::AlreadyExists => return Ok(()),
            Err(s) => return Err(format!("containerd Write: {}", s.message())),
        }
    };
    // Start over from 0 even if an earlier attempt left bytes: simpler than a ranged GET, and
    // containerd truncates on a write at offset 0.
    let mut offset = 0i64;
    let mut ack = async |tx: &mpsc::Sender<api::WriteContentRequest>,
                         req: api::WriteContentRequest|
           -> Result<(), String> {
        tx.send(req)
            .await
            .map_err(|_| "containerd closed a content write".to_string())?;
        match resp.message().await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("containerd closed a content write".into()),
            Err(s) if s.code() == tonic::Code::AlreadyExists => Ok(()),
            Err(s) => Err(format!("containerd Write: {}", s.message())),
        }
    };
    while let Some(chunk) = chunks.recv().await {
        let data = chunk?;
        let n = data.len() as i64;
        ack(
            &tx,
            api::WriteContentRequest {
                action: api::WRITE_ACTION_WRITE,
                r#ref: reference.clone(),
                total: desc.size,
                expected: desc.digest.clone(),
                offset,
                data,
                labels: HashMap::new(),
            },
        )
        .await?;
        offset += n;
        progress(offset as u64);
    }
    if offset != desc.size {
        return Err(format!(
            "blob {} ended after {offset} bytes; its manifest says {}",
            desc.digest, desc.size
        ));
    }
    ack(
        &tx,
        api::WriteContentRequest {
            action: api::WRITE_ACTION_COMMIT,
            r#ref: reference.clone(),
            total: desc.size,
            expected: desc.digest.clone(),
            offset,
            data: Vec::new(),
            labels: HashMap::new(),
        },
    )
    .await
}

/// Unpacks the layers into committed snapshots named by their chain ids.
async fn unpack(
    ctd: &Containerd,
    lease: &str,
    snapshotter: &str,
    layers: &[Desc],
    chains: &[String],
) -> Result<(), String> {
    for (i, (layer, chain)) in layers.iter().zip(chains).enumerate() {
        let stat = api::SnapshotKeyRequest {
            snapshotter: snapshotter.into(),
            key: chain.clone(),
        };
        match ctd
            .call::<_, api::Empty>(
                "/containerd.services.snapshots.v1.Snapshots/Stat",
                stat,
                Some(lease),
            )
            .await
        {
            Ok(_) => continue,
            Err(e) if e.not_found() => {}
            Err(e) => return Err(e.to_string()),
        }
        let key = format!(
            "allot-extract-{}-{}-{}",
            std::process::id(),
            i,
            chain.trim_start_matches("sha256:")
        );
        let parent = if i == 0 {
            String::new()
        } else {
            chains[i - 1].clone()
        };
        let mounts: api::MountsResponse = ctd
            .call(
                "/containerd.services.snapshots.v1.Snapshots/Prepare",
                api::PrepareSnapshotRequest {
                    snapshotter: snapshotter.into(),
                    key: key.clone(),
                    parent,
                    labels: HashMap::new(),
                },
                Some(lease),
            )
            .await
            .map_err(|e| e.to_string())?;
        let applied = ctd
            .call::<_, api::ApplyResponse>(
                "/containerd.services.diff.v1.Diff/Apply",
                api::ApplyRequest {
                    diff: Some(api::Descriptor {
                        media_type: layer.media_type.clone(),
                        digest: layer.digest.clone(),
                        size: layer.size,
                        annotations: HashMap::new(),
                    }),
                    mounts: mounts.mounts,
                },
                Some(lease),
            )
            .await;
        let committed = match applied {
            Ok(_) => {
                ctd.call::<_, api::Empty>(
                    "/containerd.services.snapshots.v1.Snapshots/Commit",
                    api::CommitSnapshotRequest {
                        snapshotter: snapshotter.into(),
                        name: chain.clone(),
                        key: key.clone(),
                        labels: HashMap::new(),
                    },
                    Some(lease),
                )
                .await
            }
            Err(e) => Err(e),
        };
        match committed {
            Ok(_) => {}
            Err(e) if e.already_exists() => {
                // Another pod unpacked the same layer meanwhile.
                let _ = remove_snapshot(ctd, snapshotter, &key).await;
            }
            Err(e) => {
                let _ = remove_snapshot(ctd, snapshotter, &key).await;
                return Err(e.to_string());
            }
        }
    }
    Ok(())
}

async fn remove_snapshot(ctd: &Containerd, snapshotter: &str, key: &str) -> Result<(), CallError> {
    ctd.call::<_, api::Empty>(
        "/containerd.services.snapshots.v1.Snapshots/Remove",
        api::SnapshotKeyRequest {
            snapshotter: snapshotter.into(),
            key: key.into(),
        },
        None,
    )
    .await
    .map(|_| ())
}

/// The layers (digest, media type) of an image manifest, bottom first.
pub(crate) fn manifest_layers(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    let m: Manifest =
        serde_json::from_slice(bytes).map_err(|e| format!("the image's manifest: {e}"))?;
    Ok(m.layers
        .into_iter()
        .map(|l| (l.digest, l.media_type))
        .collect())
}

/// Reads a blob from the content store (an image config or manifest: small).
pub(crate) async fn read_content(ctd: &Containerd, digest: &str) -> Result<Vec<u8>, CallError> {
    let mut s = ctd
        .call_streaming::<_, api::ReadContentResponse>(
            "/containerd.services.content.v1.Content/Read",
            api::ReadContentRequest {
                digest: digest.into(),
                offset: 0,
                size: 0,
            },
        )
        .await?;
    let mut out = Vec::new();
    loop {
        match s.message().await {
            Ok(Some(m)) => out.extend_from_slice(&m.data),
            Ok(None) => return Ok(out),
            Err(status) => {
                return Err(CallError {
                    method: "/containerd.services.content.v1.Content/Read",
                    status,
                })
            }
        }
    }
}

/// The image if it is in the cache and unpacked.
async fn cached(ctd: &Containerd, name: &str, snapshotter: &str) -> Result<Option<Pulled>, String> {
    let Some(img) = ctd.image(name).await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let (Some(chain), Some(config)) = (img.labels.get(CHAIN_LABEL), img.labels.get(CONFIG_LABEL))
    else {
        return Ok(None);
    };
    let stat = ctd
        .call::<_, api::Empty>(
            "/containerd.services.snapshots.v1.Snapshots/Stat",
            api::SnapshotKeyRequest {
                snapshotter: snapshotter.into(),
                key: chain.clone(),
            },
            None,
        )
        .await;
    if stat.is_err() {
        return Ok(None);
    }
    let Ok(bytes) = read_content(ctd, config).await else {
        return Ok(None);
    };
    let Ok(cfg) = serde_json::from_slice::<ConfigFile>(&bytes) else {
        return Ok(None);
    };
    let Some(manifest_digest) = img.target.as_ref().map(|t| t.digest.clone()) else {
        return Ok(None);
    };
    Ok(Some(Pulled {
        name: name.into(),
        chain_id: chain.clone(),
        config: cfg.config.unwrap_or_default(),
        manifest_digest,
        cached: true,
    }))
}

/// Marks an image used now (the cache rule drops images unused for longest).
pub async fn touch(ctd: &Containerd, name: &str) {
    if let Ok(Some(mut img)) = ctd.image(name).await {
        img.labels.insert(
            USED_LABEL.into(),
            allot_common::timefmt::now_ms().to_string(),
        );
        let _ = ctd
            .call::<_, api::GetImageResponse>(
                "/containerd.services.images.v1.Images/Update",
                api::UpdateImageRequest {
                    image: Some(img),
                    update_mask: None,
                },
                None,
            )
            .await;
    }
}

/// The image cache's rule: an image no container uses and no pod used for `max_age` is
/// removed, with its lease (containerd's collector then frees its content and snapshots).
/// Returns the names removed.
pub async fn gc_images(
    ctd: &Containerd,
    max_age: Duration,
    now_ms: i64,
) -> Result<Vec<String>, String> {
    let list: api::ListImagesResponse = ctd
        .call(
            "/containerd.services.images.v1.Images/List",
            api::ListImagesRequest::default(),
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
    let in_use: std::collections::BTreeSet<String> = ctd
        .call::<_, api::ListContainersResponse>(
            "/containerd.services.containers.v1.Containers/List",
            api::ListContainersRequest::default(),
            None,
        )
        .await
        .map_err(|e| e.to_string())?
        .containers
        .into_iter()
        .map(|c| c.image)
        .collect();
    let mut removed = Vec::new();
    for img in list.images {
        if in_use.contains(&img.name) {
            continue;
        }
        let used: i64 = img
            .labels
            .get(USED_LABEL)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if now_ms.saturating_sub(used) < max_age.as_millis() as i64 {
            continue;
        }
        let del = ctd
            .call::<_, api::Empty>(
                "/containerd.services.images.v1.Images/Delete",
                api::DeleteImageRequest {
                    name: img.name.clone(),
                    sync: false,
                },
                None,
            )
            .await;
        if let Err(e) = del {
            if !e.not_found() {
                return Err(e.to_string());
            }
        }
        let _ = ctd
            .call::<_, api::Empty>(
                "/containerd.services.leases.v1.Leases/Delete",
                api::DeleteLeaseRequest {
                    id: lease_of(&img.name),
                    sync: false,
                },
                None,
            )
            .await;
        removed.push(img.name);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_follow_the_oci_rule() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let ids = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(ids[0], a);
        assert_eq!(ids[1], sha256_digest(format!("{a} {b}").as_bytes()));
        assert!(chain_ids(&[]).is_empty());
    }

    #[test]
    fn image_configs_read_from_docker_and_oci_configs() {
        let c: ConfigFile = serde_json::from_str(
            r#"{"architecture":"amd64","config":{"Env":["PATH=/bin"],"Cmd":["sh"],"WorkingDir":"/w"},
                "rootfs":{"type":"layers","diff_ids":["sha256:1"]}}"#,
        )
        .unwrap();
        let cfg = c.config.unwrap();
        assert_eq!(cfg.cmd, Some(vec!["sh".to_string()]));
        assert_eq!(cfg.working_dir.as_deref(), Some("/w"));
        assert_eq!(c.rootfs.diff_ids.len(), 1);
    }
}
