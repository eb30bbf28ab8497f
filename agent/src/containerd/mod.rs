//! The `containerd` driver: pods as containers from OCI images, run by the node's containerd.
//!
//! Every call goes over containerd's gRPC socket in allot's own containerd namespace (`allot`
//! unless configured), so nothing here sees or touches the kubelet's containers (namespace
//! `k8s.io`). The pieces:
//! - `api`: the messages of containerd's API that the driver sends;
//! - `registry`: the registry protocol (pull only), for references read by `allot_common::image`;
//! - `pull`: fetches an image into containerd's content store and unpacks it into snapshots;
//! - `spec`: the OCI runtime spec of a pod (its devices, limits, mounts, environment);
//! - `run`: one pod's container from creation to its recorded exit, run by the pod's shim.

pub mod api;
pub mod cdi;
pub mod devices;
pub mod fence;
mod output;
pub mod pull;
pub use allot_common::image as reference;
pub mod registry;
pub mod run;
pub mod spec;
mod task_process;
pub mod users;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

/// The node's usual containerd socket.
pub const DEFAULT_SOCKET: &str = "/run/containerd/containerd.sock";
/// allot's containerd namespace.
pub const DEFAULT_NAMESPACE: &str = "allot";
/// The snapshotter used for image layers and pods' root filesystems.
pub const DEFAULT_SNAPSHOTTER: &str = "overlayfs";
/// The runtime containerd starts pods with.
pub const RUNTIME: &str = "io.containerd.runc.v2";
/// Label on every container allot creates, naming its pod directory.
pub const POD_LABEL: &str = "io.allot.pod";

/// Where a node's containerd is and how allot uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerdConfig {
    pub socket: PathBuf,
    pub namespace: String,
    pub snapshotter: String,
    /// Registries (`host[:port]`) reached over plain HTTP; loopback ones always are.
    pub plain_http: Vec<String>,
    /// Directory with the GPU device nodes (`nvidiaN`, `nvidiactl`, ...): `/dev`, or a fake
    /// directory for tests.
    pub dev_dir: PathBuf,
    /// Directories with CDI specs, in increasing priority (see `cdi`).
    pub cdi_dirs: Vec<PathBuf>,
    /// Root of the sysfs where EFA interfaces show their verbs devices.
    pub sysfs_root: PathBuf,
    /// The driver's table of MIG capability minors (`None`: `/proc/driver/nvidia-caps/mig-minors`;
    /// a fake one with fake GPUs).
    pub mig_minors: Option<PathBuf>,
}

impl Default for ContainerdConfig {
    fn default() -> Self {
        ContainerdConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            namespace: DEFAULT_NAMESPACE.into(),
            snapshotter: DEFAULT_SNAPSHOTTER.into(),
            plain_http: Vec::new(),
            dev_dir: PathBuf::from("/dev"),
            cdi_dirs: cdi::DEFAULT_DIRS.iter().map(PathBuf::from).collect(),
            sysfs_root: PathBuf::from("/"),
            mig_minors: None,
        }
    }
}

/// A connection to containerd, scoped to one namespace.
#[derive(Clone)]
pub struct Containerd {
    channel: Channel,
    namespace: String,
    socket: PathBuf,
}

/// An error from containerd, with the call it answered.
#[derive(Debug, Clone)]
pub struct CallError {
    pub method: &'static str,
    pub status: tonic::Status,
}

impl CallError {
    pub fn code(&self) -> tonic::Code {
        self.status.code()
    }
    pub fn not_found(&self) -> bool {
        self.code() == tonic::Code::NotFound
    }
    pub fn already_exists(&self) -> bool {
        self.code() == tonic::Code::AlreadyExists
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = self.method.rsplit('.').next().unwrap_or(self.method);
        write!(f, "containerd {short}: {}", self.status.message())
    }
}

impl std::error::Error for CallError {}

impl Containerd {
    /// Connects to containerd's socket; the error names the socket.
    pub async fn connect(socket: &Path, namespace: &str) -> Result<Containerd, String> {
        let uri = format!("unix://{}", socket.display());
        let channel = Endpoint::from_shared(uri)
            .map_err(|e| format!("containerd socket {}: {e}", socket.display()))?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| {
                format!(
                    "could not reach containerd at {}: {e} (is containerd running? the socket is \
                     set with --containerd-socket)",
                    socket.display()
                )
            })?;
        Ok(Containerd {
            channel,
            namespace: namespace.to_string(),
            socket: socket.to_path_buf(),
        })
    }

    /// A connection made at its first call, and again after a failure: for a shim that must go
    /// on while containerd is away and use it once it is back.
    pub fn connect_lazy(socket: &Path, namespace: &str) -> Result<Containerd, String> {
        let uri = format!("unix://{}", socket.display());
        let channel = Endpoint::from_shared(uri)
            .map_err(|e| format!("containerd socket {}: {e}", socket.display()))?
            .connect_timeout(Duration::from_secs(5))
            .connect_lazy();
        Ok(Containerd {
            channel,
            namespace: namespace.to_string(),
            socket: socket.to_path_buf(),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn request<M>(&self, msg: M, lease: Option<&str>) -> tonic::Request<M> {
        let mut req = tonic::Request::new(msg);
        if let Ok(v) = MetadataValue::try_from(self.namespace.as_str()) {
            req.metadata_mut().insert("containerd-namespace", v);
        }
        if let Some(l) = lease.and_then(|l| MetadataValue::try_from(l).ok()) {
            req.metadata_mut().insert("containerd-lease", l);
        }
        req
    }

    /// A gRPC client on the connection, once it can take a call.
    async fn ready(&self, method: &'static str) -> Result<tonic::client::Grpc<Channel>, CallError> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.map_err(|e| CallError {
            method,
            status: tonic::Status::unavailable(format!("containerd connection: {e}")),
        })?;
        Ok(grpc)
    }

    /// One unary call. `method` is the full gRPC path, e.g. `/containerd.services.tasks.v1.Tasks/Start`.
    pub async fn call<Req, Resp>(
        &self,
        method: &'static str,
        msg: Req,
        lease: Option<&str>,
    ) -> Result<Resp, CallError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.ready(method).await?;
        let codec: ProstCodec<Req, Resp> = ProstCodec::default();
        grpc.unary(
            self.request(msg, lease),
            PathAndQuery::from_static(method),
            codec,
        )
        .await
        .map(|r| r.into_inner())
        .map_err(|status| CallError { method, status })
    }

    /// A call whose reply is a stream of messages.
    pub async fn call_streaming<Req, Resp>(
        &self,
        method: &'static str,
        msg: Req,
    ) -> Result<tonic::Streaming<Resp>, CallError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.ready(method).await?;
        let codec: ProstCodec<Req, Resp> = ProstCodec::default();
        grpc.server_streaming(
            self.request(msg, None),
            PathAndQuery::from_static(method),
            codec,
        )
        .await
        .map(|r| r.into_inner())
        .map_err(|status| CallError { method, status })
    }

    /// A call that streams requests both ways (content writes).
    pub async fn call_bidi<S, Req, Resp>(
        &self,
        method: &'static str,
        stream: S,
        lease: Option<&str>,
    ) -> Result<tonic::Streaming<Resp>, CallError>
    where
        S: tokio_stream::Stream<Item = Req> + Send + 'static,
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.ready(method).await?;
        let codec: ProstCodec<Req, Resp> = ProstCodec::default();
        grpc.streaming(
            self.request(stream, lease),
            PathAndQuery::from_static(method),
            codec,
        )
        .await
        .map(|r| r.into_inner())
        .map_err(|status| CallError { method, status })
    }

    /// The containers allot created in its namespace: (id, pod directory label).
    pub async fn containers(&self) -> Result<Vec<(String, String)>, CallError> {
        let r: api::ListContainersResponse = self
            .call(
                "/containerd.services.containers.v1.Containers/List",
                api::ListContainersRequest::default(),
                None,
            )
            .await?;
        Ok(r.containers
            .into_iter()
            .map(|c| {
                let pod = c.labels.get(POD_LABEL).cloned().unwrap_or_default();
                (c.id, pod)
            })
            .collect())
    }

    /// Kills a container's processes and removes the container, its task and its snapshot.
    /// What is already gone is not an error.
    pub async fn remove_container(&self, id: &str, snapshotter: &str) -> Result<(), CallError> {
        let kill = api::KillRequest {
            container_id: id.into(),
            exec_id: String::new(),
            signal: libc::SIGKILL as u32,
            all: true,
        };
        let _ = self
            .call::<_, api::Empty>("/containerd.services.tasks.v1.Tasks/Kill", kill, None)
            .await;
        // Wait for the task to stop before deleting it (a running task cannot be deleted).
        for _ in 0..50 {
            match self.task(id).await {
                Ok(Some(p)) if p.status != api::STATUS_STOPPED => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                _ => break,
            }
        }
        let del = api::TaskRequest {
            container_id: id.into(),
            exec_id: String::new(),
        };
        ignore_not_found(
            self.call::<_, api::DeleteTaskResponse>(
                "/containerd.services.tasks.v1.Tasks/Delete",
                del,
                None,
            )
            .await
            .map(|_| ()),
        )?;
        ignore_not_found(
            self.call::<_, api::Empty>(
                "/containerd.services.containers.v1.Containers/Delete",
                api::DeleteContainerRequest { id: id.into() },
                None,
            )
            .await
            .map(|_| ()),
        )?;
        ignore_not_found(
            self.call::<_, api::Empty>(
                "/containerd.services.snapshots.v1.Snapshots/Remove",
                api::SnapshotKeyRequest {
                    snapshotter: snapshotter.into(),
                    key: id.into(),
                },
                None,
            )
            .await
            .map(|_| ()),
        )
    }

    /// The image record named `name`, if there is one.
    pub async fn image(&self, name: &str) -> Result<Option<api::Image>, CallError> {
        match self
            .call::<_, api::GetImageResponse>(
                "/containerd.services.images.v1.Images/Get",
                api::GetImageRequest { name: name.into() },
                None,
            )
            .await
        {
            Ok(r) => Ok(r.image),
            Err(e) if e.not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A container's task, if it has one.
    pub async fn task(&self, id: &str) -> Result<Option<api::Process>, CallError> {
        let req = api::TaskRequest {
            container_id: id.into(),
            exec_id: String::new(),
        };
        match self
            .call::<_, api::GetTaskResponse>("/containerd.services.tasks.v1.Tasks/Get", req, None)
            .await
        {
            Ok(r) => Ok(r.process),
            Err(e) if e.not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// `Ok` for a NotFound error: removing what is already gone succeeds.
pub fn ignore_not_found(r: Result<(), CallError>) -> Result<(), CallError> {
    match r {
        Err(e) if e.not_found() => Ok(()),
        other => other,
    }
}

/// The container id of a pod: its directory's name (`<workload id>-<attempt>-<rank>`),
/// prefixed so that allot's containers are recognisable in `ctr` listings.
pub fn container_id(pod_dir: &Path) -> String {
    let name = pod_dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    format!("allot-{name}")
}
