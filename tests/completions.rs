//! `allot completions SHELL`, run for real: each script names the subcommands and their flags,
//! and the bash and zsh scripts parse in their shells (`bash -n`, `zsh -n` where installed).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_allot");

fn completions(shell: &str) -> String {
    let out = Command::new(BIN)
        .args(["completions", shell])
        .output()
        .expect("allot runs");
    assert!(
        out.status.success(),
        "allot completions {shell}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the script is text")
}

/// Whether `shell -n` accepts `script` (None: the shell is not installed).
fn parses(shell: &str, script: &str) -> Option<bool> {
    let dir = std::env::temp_dir().join(format!("allot-completions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(shell);
    std::fs::write(&file, script).expect("write the script");
    let status = Command::new(shell).arg("-n").arg(&file).status().ok()?;
    let _ = std::fs::remove_dir_all(&dir);
    Some(status.success())
}

/// What bash offers for the last of `words`, with the script loaded.
fn complete_in_bash(script: &str, words: &[&str]) -> String {
    let dir =
        std::env::temp_dir().join(format!("allot-bash-{}-{}", std::process::id(), words.len()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("allot.bash");
    std::fs::write(&file, script).expect("write the script");
    let cur = words[words.len() - 1];
    let prev = words[words.len() - 2];
    let program = format!(
        "source {}; COMP_WORDS=({}); COMP_CWORD={}; _allot allot {cur} {prev}; echo \"${{COMPREPLY[*]}}\"",
        file.display(),
        words.join(" "),
        words.len() - 1
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .expect("bash runs");
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn every_shell_gets_a_script_with_the_subcommands_and_their_flags() {
    let bash = completions("bash");
    for word in [
        "submit",
        "wait",
        "cancel",
        "simulate",
        "completions",
        "--for",
        "--priority",
    ] {
        assert!(bash.contains(word), "the bash script lacks {word}");
    }
    assert_eq!(
        parses("bash", &bash),
        Some(true),
        "bash -n refuses the script"
    );
    // Completing in bash, as the shell calls the function: `allot su<TAB>`, `allot wait x --f<TAB>`.
    assert_eq!(complete_in_bash(&bash, &["allot", "su"]), "submit");
    assert_eq!(
        complete_in_bash(&bash, &["allot", "wait", "x", "--f"]),
        "--for"
    );

    let zsh = completions("zsh");
    assert!(
        zsh.starts_with("#compdef allot"),
        "{}",
        &zsh[..zsh.len().min(200)]
    );
    assert!(zsh.contains("submit") && zsh.contains("--timeout"));
    if let Some(ok) = parses("zsh", &zsh) {
        assert!(ok, "zsh -n refuses the script");
    }

    let fish = completions("fish");
    assert!(fish.contains("complete -c allot"));
    assert!(
        fish.contains("-l gpus"),
        "the fish script lacks submit's --gpus"
    );
}

#[test]
fn an_unknown_shell_is_refused_with_the_accepted_ones() {
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .expect("allot runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tcsh") && err.contains("bash") && err.contains("fish"),
        "{err}"
    );
}
