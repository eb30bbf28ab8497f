//! Fuzzing, as a bounded test: what a client or a peer sends (request frames, replies) and what
//! an admin types (AWS shorthand) goes through the real decoders and parsers, as random bytes,
//! random strings, and mutations of valid inputs. Nothing may panic, a decoder's error must be
//! an error (not a hang or an allocation past the frame limit), and a shorthand error must
//! point inside its input.
//!
//! `ALLOT_FUZZ_SECS` (default 2) bounds the run; `ALLOT_FUZZ_SEED` picks the sequence (printed,
//! so a failure can be replayed). `scripts/test` runs it for 60 seconds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use allot_common::api::{
    ApiError, Body, ComputeQuotaInput, ErrorKind, NodeReport, PodExit, Reply, Request, Response,
    RunSpec, SubmitInput, WorkloadFilter,
};
use allot_common::hyperpod::{parse_scheduler_config, parse_shorthand_tree, ComputeQuotaConfig};
use allot_common::{ResourceName, Resources, WorkloadSpec};
use allot_net::wire;

/// xorshift64*: small, seeded, the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

fn budget() -> (Duration, u64) {
    let secs = std::env::var("ALLOT_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(2.0);
    let seed = std::env::var("ALLOT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0x5eed_a110);
    (Duration::from_secs_f64(secs), seed.max(1))
}

/// Valid requests of many kinds, encoded: the seeds mutations start from.
fn request_seeds() -> Vec<Vec<u8>> {
    let mut req = Resources::new();
    req.set(ResourceName::gpu(), 8);
    req.set(ResourceName::cpu(), 96_000);
    let mut spec = WorkloadSpec::single("train-llm", "team-a", 4, req.clone());
    spec.pod_sets[0].min_count = Some(2);
    let submit = SubmitInput {
        spec,
        run: Some(RunSpec {
            command: vec![
                "torchrun".into(),
                "--nproc-per-node=8".into(),
                "train.py".into(),
            ],
            env: BTreeMap::from([("EPOCHS".into(), "3".into())]),
            workdir: Some("/data".into()),
            grace_seconds: Some(60),
            ..Default::default()
        }),
        client_token: Some("train-llm-1a2b".into()),
    };
    let quota = ComputeQuotaInput {
        name: "team-a-quota".into(),
        description: Some("GPU quota".into()),
        team: "team-a".into(),
        fair_share_weight: 10,
        config: ComputeQuotaConfig::parse_shorthand(
            "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=2}],\
             ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50},\
             PreemptTeamTasks=LowerPriority",
        )
        .expect("a valid config"),
        activation: Default::default(),
    };
    let bodies = vec![
        Body::Hello,
        Body::GetNodes,
        Body::GetWorkloads(WorkloadFilter {
            team: Some("team-a".into()),
            all: true,
        }),
        Body::Submit(submit.clone()),
        Body::SubmitBatch(vec![submit.clone(), submit]),
        Body::CreateComputeQuota(quota.clone()),
        Body::CreateComputeQuota(ComputeQuotaInput {
            config: ComputeQuotaConfig::parse_shorthand(
                "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,\
                 AcceleratorPartition={Type=mig-1g.10gb,Count=3}}]",
            )
            .expect("a valid config"),
            ..quota
        }),
        Body::PodsExited {
            node: "gpu-1".into(),
            workload: "train-llm".into(),
            workload_id: 7,
            attempt: 2,
            exits: vec![PodExit {
                rank: 1,
                succeeded: false,
                lost: true,
                detail: "killed by signal 9".into(),
                exit_code: None,
            }],
        },
        Body::ReportNode(NodeReport {
            name: "gpu-1".into(),
            instance_type: "ml.p5.48xlarge".into(),
            capacity: req,
            devices: Vec::new(),
            address: "10.0.0.1".into(),
            http: String::new(),
            lease_ms: 10_000,
            agent_version: "test".into(),
            sources: Default::default(),
            topology: Default::default(),
        }),
        Body::Cancel {
            name: "train-llm".into(),
            team: Some("team-a".into()),
        },
    ];
    bodies
        .into_iter()
        .map(|body| {
            wire::encode(&Request {
                version: wire::PROTOCOL_VERSION,
                body,
            })
            .expect("encodes")
        })
        .collect()
}

fn response_seeds() -> Vec<Vec<u8>> {
    let replies: Vec<Response> = vec![
        Ok(Reply::Done),
        Ok(Reply::Submitted {
            name: "w".into(),
            id: 7,
            existing: false,
            state: "Pending".into(),
        }),
        Err(ApiError::new(
            ErrorKind::LimitExceeded,
            "team \"a\" has 3 pending",
        )),
    ];
    replies
        .iter()
        .map(|r| wire::encode(r).expect("encodes"))
        .collect()
}

/// One mutation of `seed`: flipped, inserted, deleted or repeated bytes, a cut, or a splice.
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.byte();
            }
            1 => {
                let i = rng.below(b.len() + 1);
                b.insert(i, rng.byte());
            }
            2 if !b.is_empty() => {
                let i = rng.below(b.len());
                b.remove(i);
            }
            3 => {
                let cut = rng.below(b.len() + 1);
                b.truncate(cut);
            }
            4 if !b.is_empty() => {
                // A varint-looking run of 0xff: huge lengths in the middle of a message.
                let i = rng.below(b.len());
                for k in i..(i + 1 + rng.below(9)).min(b.len()) {
                    b[k] = 0xff;
                }
            }
            _ => {
                let i = rng.below(b.len() + 1);
                let j = rng.below(other.len() + 1);
                b.truncate(i);
                b.extend_from_slice(&other[j..]);
            }
        }
    }
    b
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

#[test]
fn wire_decoders_survive_arbitrary_and_mutated_frames() {
    let (time, seed) = budget();
    eprintln!("fuzzing the wire decoders for {time:?} from seed {seed} (ALLOT_FUZZ_SEED)");
    let mut rng = Rng(seed);
    let requests = request_seeds();
    let responses = response_seeds();
    // Every seed decodes as itself first.
    for r in &requests {
        wire::decode_request(r).expect("a valid request decodes");
    }
    let rt = runtime();
    let start = Instant::now();
    let mut cases = 0u64;
    while start.elapsed() < time {
        for _ in 0..64 {
            cases += 1;
            let input = match rng.below(4) {
                0 => (0..rng.below(512)).map(|_| rng.byte()).collect(),
                1 | 2 => {
                    let s = &requests[rng.below(requests.len())];
                    let o = &requests[rng.below(requests.len())];
                    mutate(&mut rng, s, o)
                }
                _ => {
                    let s = &responses[rng.below(responses.len())];
                    mutate(&mut rng, s, &requests[0])
                }
            };
            let _ = wire::decode_request(&input);
            let _ = wire::decode::<Response>(&input);
            // As a stream: a length prefix (sometimes the right one) and the bytes.
            let mut framed = if rng.below(2) == 0 {
                (input.len() as u32).to_be_bytes().to_vec()
            } else {
                (rng.next() as u32).to_be_bytes().to_vec()
            };
            framed.extend_from_slice(&input);
            let mut r = framed.as_slice();
            let _ = rt.block_on(wire::read_frame::<_, Request>(&mut r));
        }
    }
    eprintln!("{cases} frames, no panic");
}

#[test]
fn shorthand_parsers_survive_arbitrary_and_mutated_text() {
    let (time, seed) = budget();
    eprintln!("fuzzing the shorthand parsers for {time:?} from seed {seed} (ALLOT_FUZZ_SEED)");
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    let seeds: Vec<&str> = vec![
        "ComputeQuotaResources=[{InstanceType=ml.p5.48xlarge,Count=2},{InstanceType=ml.g5.8xlarge,Accelerators=4,VCpu=16,MemoryInGiB=64}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50,AbsoluteBorrowLimits=[{InstanceType=ml.p5.48xlarge,Count=1}]},PreemptTeamTasks=LowerPriority",
        "PriorityClasses=[{Name=inference,Weight=90},{Name=training,Weight=70}],FairShare=Enabled,IdleResourceSharing=Disabled",
        "ResourceSharingConfig={Strategy=DontLend},PreemptTeamTasks=Never",
        "Key=\"quoted, value\",Other='single',List=[a,b,\"c\"]",
    ];
    let alphabet: Vec<char> = "ABCIKNPRSTVWabcegilmnoprstuxy0123456789=,{}[] .\"'\\-_:+é\n\t\u{0}"
        .chars()
        .collect();
    let start = Instant::now();
    let mut cases = 0u64;
    while start.elapsed() < time {
        for _ in 0..64 {
            cases += 1;
            let text: String = if rng.below(3) == 0 {
                (0..rng.below(120))
                    .map(|_| alphabet[rng.below(alphabet.len())])
                    .collect()
            } else {
                let s = seeds[rng.below(seeds.len())].as_bytes();
                let o = seeds[rng.below(seeds.len())].as_bytes();
                String::from_utf8_lossy(&mutate(&mut rng, s, o)).into_owned()
            };
            for r in [
                ComputeQuotaConfig::parse_shorthand(&text).map(|_| ()),
                parse_scheduler_config(&text).map(|_| ()),
                parse_shorthand_tree(&text).map(|_| ()),
            ] {
                if let Err(e) = r {
                    assert!(e.pos <= text.len(), "{text:?}: {e:?}");
                    assert!(text.is_char_boundary(e.pos), "{text:?}: {e:?}");
                    let _ = e.line_and_column();
                    let _ = e.to_string();
                }
            }
        }
    }
    eprintln!("{cases} texts, no panic");
}
