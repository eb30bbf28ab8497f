//! `allot`: one binary, one subcommand per role.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod scenario;
mod simulate;

#[derive(Parser)]
#[command(
    name = "allot",
    version,
    about = "Governs a shared GPU cluster: quotas, fair sharing, priorities, preemption and placement"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Table,
}

#[derive(Subcommand)]
enum Command {
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
    match cli.command {
        Command::Simulate { file, output } => {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: cannot read {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            let outcome = scenario::parse(&text).and_then(|sc| simulate::run(&sc));
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
    }
}
