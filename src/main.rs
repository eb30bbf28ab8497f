//! `allot`: one binary, one subcommand per role.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

mod agent_cmd;
mod bench;
mod bench_args;
mod certs;
mod cli;
mod client;
mod config;
mod coordinator_cmd;
mod dev;
mod failover;
mod lease_watch;
mod memory;
mod scenario;
mod signals;
mod simulate;
mod what_if;

#[derive(Parser)]
#[command(
    name = "allot",
    version,
    about = "Governs a shared GPU cluster: quotas, fair sharing, priorities, preemption and placement"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    client: client::ClientOpts,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Table,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Bring up a whole cluster on this machine: coordinator(s) and agents with fake GPUs that
    /// run real processes. The CLI finds it without flags; Ctrl-C stops everything.
    Dev(dev::DevArgs),
    /// Run a coordinator replica (Raft, QUIC API with mutual TLS, scheduler).
    Coordinator(coordinator_cmd::CoordinatorArgs),
    /// Run a node agent: discover the node's devices, run its pods, report to the cluster.
    Agent(agent_cmd::AgentArgs),
    /// Run one pod under the agent (started by the agent, not by hand).
    #[command(hide = true)]
    AgentShim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Stop this node's containers when its agent's lease runs out and no pod shim is left to
    /// (beside the agent on Kubernetes, where shims die with the agent's container).
    AgentFence(agent_cmd::FenceArgs),
    /// Create the cluster CA and issue certificates.
    Certs {
        #[command(subcommand)]
        cmd: certs::CertsCmd,
    },
    /// Measure a local 3-replica cluster: submit-to-admit latency and durable admissions/s.
    Bench(bench::BenchArgs),
    #[command(flatten)]
    Cluster(cli::ClusterCmd),
    /// Print a completion script for a shell (bash, zsh, fish, elvish or powershell), made from
    /// this command line's own definition; see the README for where each shell reads it.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Run the scheduler on a scenario file with a simulated clock and print what happened.
    Simulate {
        /// Scenario file (YAML or JSON), see shared/spec/scenario-format.md.
        file: std::path::PathBuf,
        /// Output format (default: table on a terminal, json otherwise).
        #[arg(long, value_enum)]
        output: Option<Output>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("ALLOT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
    // Servers get a thread per core; a client's requests and their QUIC connection run on one
    // thread, so a reply reaches the caller without a thread handoff.
    let async_cmd =
        |f: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>>>>,
         multi_thread: bool| {
            let rt = if multi_thread {
                tokio::runtime::Runtime::new()
            } else {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            };
            let rt = match rt {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            match rt.block_on(f) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(1)
                }
            }
        };
    // The long-running roles; a one-shot command exits instead.
    if matches!(
        cli.command,
        Command::Coordinator(_) | Command::Dev(_) | Command::Agent(_)
    ) {
        memory::give_back_freed_memory();
    }
    match cli.command {
        Command::Coordinator(coordinator_cmd::CoordinatorArgs {
            cmd: Some(coordinator_cmd::CoordinatorCmd::Members { cmd }),
            ..
        }) => {
            let opts = cli.client.clone();
            let run = async move { coordinator_cmd::members(cmd, &opts).await };
            async_cmd(Box::pin(run), false)
        }
        Command::Coordinator(a) => async_cmd(Box::pin(coordinator_cmd::run(a)), true),
        Command::Dev(a) => async_cmd(Box::pin(dev::run(a)), true),
        Command::Agent(a) => match agent_cmd::run(a, &cli.client) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::AgentShim { args } => match allot_agent::shim::ShimArgs::parse(&args) {
            Ok(a) => ExitCode::from(allot_agent::shim::run(&a) as u8),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::AgentFence(a) => match agent_cmd::run_fence(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Certs { cmd } => match certs::run(cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Bench(a) => async_cmd(Box::pin(bench::run(a)), false),
        Command::Completions { shell } => {
            // Into memory first: the generator panics on a failed write (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "allot", &mut script);
            use std::io::Write;
            match std::io::stdout().write_all(&script) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write the completion script: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Cluster(c) => {
            // `Key@=file://PATH` in shorthand arguments reads PATH, as the AWS CLI does.
            allot_common::hyperpod::read_param_files_with(|s| {
                cli::read_arg(s).map_err(|e| format!("{e:#}"))
            });
            let opts = cli.client.clone();
            async_cmd(Box::pin(async move { cli::run(c, &opts).await }), false)
        }
        Command::Simulate { file, output } => simulate_cmd(&file, output),
    }
}

/// `allot simulate FILE`: the scenario run, its events and final state printed.
fn simulate_cmd(file: &std::path::Path, output: Option<Output>) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    // Progress on a terminal only: a pipe or a log file gets the result alone.
    let tty = std::io::stderr().is_terminal();
    let parse_started = std::time::Instant::now();
    let parsed = scenario::parse(&text);
    drop(text);
    if tty {
        eprint!("\rparsed in {:.1}s", parse_started.elapsed().as_secs_f64());
    }
    let mut show = |p: &simulate::Progress| {
        if tty {
            eprint!(
                "\rsimulated {:.0}s of {:.0}s: {} cycles, {} pending, {:.1}s wall   ",
                p.now as f64 / 1000.0,
                p.end as f64 / 1000.0,
                p.cycles,
                p.pending,
                p.elapsed.as_secs_f64()
            );
        }
    };
    let outcome = parsed.and_then(|sc| simulate::run_with_progress(&sc, &mut show));
    if tty {
        eprintln!();
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let format = output.unwrap_or(if std::io::stdout().is_terminal() {
        Output::Table
    } else {
        Output::Json
    });
    match format {
        Output::Json => {
            let v = serde_json::json!({"events": outcome.events, "final": outcome.final_state,
                                       "stats": outcome.stats, "warnings": outcome.warnings});
            println!("{v}");
        }
        Output::Table => print!("{}", simulate::table(&outcome)),
    }
    ExitCode::SUCCESS
}
