//! The part of containerd's gRPC API (v1, as containerd 1.6 and later serve it) that the driver
//! uses, written as prost messages by hand from containerd's `.proto` files.
//!
//! Hand-written rather than generated: the `containerd-client` crate generates its bindings in a
//! build script that needs `protoc` installed, which would make every build of allot depend on
//! a system package. The messages below are the few the driver sends, with containerd's field
//! numbers; fields the driver never reads are left out (protobuf skips unknown fields).

use std::collections::HashMap;

use prost_types::{Any, Timestamp};

/// `containerd.types.Descriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Descriptor {
    #[prost(string, tag = "1")]
    pub media_type: String,
    #[prost(string, tag = "2")]
    pub digest: String,
    #[prost(int64, tag = "3")]
    pub size: i64,
    #[prost(map = "string, string", tag = "5")]
    pub annotations: HashMap<String, String>,
}

/// `containerd.types.Mount`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub source: String,
    #[prost(string, tag = "3")]
    pub target: String,
    #[prost(string, repeated, tag = "4")]
    pub options: Vec<String>,
}

// ---- content ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct InfoRequest {
    #[prost(string, tag = "1")]
    pub digest: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContentInfo {
    #[prost(string, tag = "1")]
    pub digest: String,
    #[prost(int64, tag = "2")]
    pub size: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InfoResponse {
    #[prost(message, optional, tag = "1")]
    pub info: Option<ContentInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadContentRequest {
    #[prost(string, tag = "1")]
    pub digest: String,
    #[prost(int64, tag = "2")]
    pub offset: i64,
    #[prost(int64, tag = "3")]
    pub size: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadContentResponse {
    #[prost(int64, tag = "1")]
    pub offset: i64,
    #[prost(bytes = "vec", tag = "2")]
    pub data: Vec<u8>,
}

/// `WriteAction`: STAT = 0, WRITE = 1, COMMIT = 2.
pub const WRITE_ACTION_STAT: i32 = 0;
pub const WRITE_ACTION_WRITE: i32 = 1;
pub const WRITE_ACTION_COMMIT: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteContentRequest {
    #[prost(int32, tag = "1")]
    pub action: i32,
    #[prost(string, tag = "2")]
    pub r#ref: String,
    #[prost(int64, tag = "3")]
    pub total: i64,
    #[prost(string, tag = "4")]
    pub expected: String,
    #[prost(int64, tag = "5")]
    pub offset: i64,
    #[prost(bytes = "vec", tag = "6")]
    pub data: Vec<u8>,
    #[prost(map = "string, string", tag = "7")]
    pub labels: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteContentResponse {
    #[prost(int32, tag = "1")]
    pub action: i32,
    #[prost(int64, tag = "4")]
    pub offset: i64,
    #[prost(int64, tag = "5")]
    pub total: i64,
    #[prost(string, tag = "6")]
    pub digest: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AbortRequest {
    #[prost(string, tag = "1")]
    pub r#ref: String,
}

// ---- images ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, string", tag = "2")]
    pub labels: HashMap<String, String>,
    #[prost(message, optional, tag = "3")]
    pub target: Option<Descriptor>,
    #[prost(message, optional, tag = "7")]
    pub created_at: Option<Timestamp>,
    #[prost(message, optional, tag = "8")]
    pub updated_at: Option<Timestamp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetImageRequest {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetImageResponse {
    #[prost(message, optional, tag = "1")]
    pub image: Option<Image>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateImageRequest {
    #[prost(message, optional, tag = "1")]
    pub image: Option<Image>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateImageRequest {
    #[prost(message, optional, tag = "1")]
    pub image: Option<Image>,
    #[prost(message, optional, tag = "2")]
    pub update_mask: Option<prost_types::FieldMask>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListImagesRequest {
    #[prost(string, repeated, tag = "1")]
    pub filters: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListImagesResponse {
    #[prost(message, repeated, tag = "1")]
    pub images: Vec<Image>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteImageRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(bool, tag = "2")]
    pub sync: bool,
}

// ---- snapshots ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct PrepareSnapshotRequest {
    #[prost(string, tag = "1")]
    pub snapshotter: String,
    #[prost(string, tag = "2")]
    pub key: String,
    #[prost(string, tag = "3")]
    pub parent: String,
    #[prost(map = "string, string", tag = "4")]
    pub labels: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MountsResponse {
    #[prost(message, repeated, tag = "1")]
    pub mounts: Vec<Mount>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MountsRequest {
    #[prost(string, tag = "1")]
    pub snapshotter: String,
    #[prost(string, tag = "2")]
    pub key: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitSnapshotRequest {
    #[prost(string, tag = "1")]
    pub snapshotter: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub key: String,
    #[prost(map = "string, string", tag = "4")]
    pub labels: HashMap<String, String>,
}

/// Stat and Remove take the same two fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotKeyRequest {
    #[prost(string, tag = "1")]
    pub snapshotter: String,
    #[prost(string, tag = "2")]
    pub key: String,
}

// ---- diff ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct ApplyRequest {
    #[prost(message, optional, tag = "1")]
    pub diff: Option<Descriptor>,
    #[prost(message, repeated, tag = "2")]
    pub mounts: Vec<Mount>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ApplyResponse {
    #[prost(message, optional, tag = "1")]
    pub applied: Option<Descriptor>,
}

// ---- leases ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateLeaseRequest {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(map = "string, string", tag = "3")]
    pub labels: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteLeaseRequest {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(bool, tag = "2")]
    pub sync: bool,
}

// ---- containers ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct Runtime {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub options: Option<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(map = "string, string", tag = "2")]
    pub labels: HashMap<String, String>,
    #[prost(string, tag = "3")]
    pub image: String,
    #[prost(message, optional, tag = "4")]
    pub runtime: Option<Runtime>,
    #[prost(message, optional, tag = "5")]
    pub spec: Option<Any>,
    #[prost(string, tag = "6")]
    pub snapshotter: String,
    #[prost(string, tag = "7")]
    pub snapshot_key: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersRequest {
    #[prost(string, repeated, tag = "1")]
    pub filters: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteContainerRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

// ---- tasks ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTaskRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(message, repeated, tag = "3")]
    pub rootfs: Vec<Mount>,
    #[prost(string, tag = "4")]
    pub stdin: String,
    #[prost(string, tag = "5")]
    pub stdout: String,
    #[prost(string, tag = "6")]
    pub stderr: String,
    #[prost(bool, tag = "7")]
    pub terminal: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTaskResponse {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(uint32, tag = "2")]
    pub pid: u32,
}

/// Start, Get, Wait and Delete name a container (and, for an exec, a process).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(string, tag = "2")]
    pub exec_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StartResponse {
    #[prost(uint32, tag = "1")]
    pub pid: u32,
}

/// `containerd.v1.types.Status`.
pub const STATUS_RUNNING: i32 = 2;
pub const STATUS_STOPPED: i32 = 3;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Process {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(uint32, tag = "3")]
    pub pid: u32,
    #[prost(int32, tag = "4")]
    pub status: i32,
    #[prost(uint32, tag = "9")]
    pub exit_status: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTaskResponse {
    #[prost(message, optional, tag = "1")]
    pub process: Option<Process>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WaitResponse {
    #[prost(uint32, tag = "1")]
    pub exit_status: u32,
    #[prost(message, optional, tag = "2")]
    pub exited_at: Option<Timestamp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteTaskResponse {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(uint32, tag = "2")]
    pub pid: u32,
    #[prost(uint32, tag = "3")]
    pub exit_status: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KillRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(string, tag = "2")]
    pub exec_id: String,
    #[prost(uint32, tag = "3")]
    pub signal: u32,
    #[prost(bool, tag = "4")]
    pub all: bool,
}

// ---- events ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct SubscribeRequest {
    #[prost(string, repeated, tag = "1")]
    pub filters: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Envelope {
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(string, tag = "3")]
    pub topic: String,
    #[prost(message, optional, tag = "4")]
    pub event: Option<Any>,
}

/// `containerd.events.TaskOOM`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskOom {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// The empty reply (`google.protobuf.Empty`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}
