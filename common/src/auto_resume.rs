//! Auto-resume: a workload that fails is queued again, up to a number of retries, as
//! HyperPod's jobs ask with two annotations. allot keeps them as the workload's labels, where
//! Kubernetes manifests put them, and the job file's `auto_resume` and `max_retry` and the
//! CLI's `--auto-resume` and `--max-retry` write them.

use std::collections::BTreeMap;

/// `"true"` turns auto-resume on.
pub const ENABLE_LABEL: &str = "sagemaker.amazonaws.com/enable-job-auto-resume";
/// How many times a failed workload is queued again (a whole number).
pub const MAX_RETRY_LABEL: &str = "sagemaker.amazonaws.com/job-max-retry-count";
/// The retries when auto-resume is on and no count is given.
pub const DEFAULT_RETRIES: u32 = 3;
/// The most retries a workload may ask for.
pub const MAX_RETRIES: u32 = 100;

/// The retries `labels` ask for (`None`: auto-resume is off), or why they are not valid.
pub fn retries(labels: &BTreeMap<String, String>) -> Result<Option<u32>, String> {
    let count = match labels.get(MAX_RETRY_LABEL) {
        None => None,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n <= MAX_RETRIES => Some(n),
            _ => {
                return Err(format!(
                    "{MAX_RETRY_LABEL}={v:?}: expected a whole number from 0 to {MAX_RETRIES}"
                ))
            }
        },
    };
    match labels.get(ENABLE_LABEL).map(|v| v.trim().to_ascii_lowercase()) {
        None if count.is_some() => Err(format!(
            "{MAX_RETRY_LABEL} is given without {ENABLE_LABEL}=true (--auto-resume): set both, or neither"
        )),
        None => Ok(None),
        Some(v) if v == "true" => Ok(Some(count.unwrap_or(DEFAULT_RETRIES))),
        Some(v) if v == "false" => Ok(None),
        Some(v) => Err(format!("{ENABLE_LABEL}={v:?}: expected true or false")),
    }
}

/// `retries` as the replicated state reads it: labels that are not valid (refused at submit
/// by this release, but a workload may carry them from one before) turn auto-resume off.
pub fn retries_or_off(labels: &BTreeMap<String, String>) -> Option<u32> {
    retries(labels).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn on_with_a_count_a_default_or_off() {
        assert_eq!(retries(&labels(&[])), Ok(None));
        assert_eq!(retries(&labels(&[(ENABLE_LABEL, "true")])), Ok(Some(3)));
        assert_eq!(
            retries(&labels(&[(ENABLE_LABEL, "True"), (MAX_RETRY_LABEL, "5")])),
            Ok(Some(5))
        );
        assert_eq!(
            retries(&labels(&[(ENABLE_LABEL, "false"), (MAX_RETRY_LABEL, "5")])),
            Ok(None)
        );
    }

    #[test]
    fn bad_values_are_named_with_what_is_accepted() {
        let e = retries(&labels(&[(ENABLE_LABEL, "true"), (MAX_RETRY_LABEL, "x")])).unwrap_err();
        assert!(e.contains("\"x\"") && e.contains("0 to 100"), "{e}");
        let e = retries(&labels(&[(ENABLE_LABEL, "true"), (MAX_RETRY_LABEL, "101")])).unwrap_err();
        assert!(e.contains("0 to 100"), "{e}");
        let e = retries(&labels(&[(ENABLE_LABEL, "yes")])).unwrap_err();
        assert!(e.contains("true or false"), "{e}");
        let e = retries(&labels(&[(MAX_RETRY_LABEL, "2")])).unwrap_err();
        assert!(e.contains("without"), "{e}");
        assert_eq!(
            retries_or_off(&labels(&[(ENABLE_LABEL, "true"), (MAX_RETRY_LABEL, "x")])),
            None
        );
    }
}
