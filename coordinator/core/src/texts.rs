//! The pending reasons and messages a state's workloads show, by content, so that equal texts
//! are one allocation: a cycle that says what a workload already shows then gives it the very
//! text it holds, and checking which messages changed (every cycle, for every waiting workload)
//! compares addresses instead of bytes. A replica's plans arrive decoded from the log, each
//! text a new allocation: applying them puts their texts here, and the next cycle's come from
//! here (`Texts::shared`).
//!
//! Only addresses depend on it, never a result: it is not replicated or saved, and forgetting
//! it costs comparisons only. Two generations of at most `GENERATION` texts each: a text
//! leaves once two generations have passed without it being applied again.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::sync::Arc;

type Set = HashSet<Arc<str>, BuildHasherDefault<DefaultHasher>>;

/// Texts per generation. A copy of the state shares the table; the first text applied after a
/// copy copies the current generation (at most this many reference counts).
const GENERATION: usize = 4096;

#[derive(Clone, Default)]
pub struct Texts {
    current: Arc<Set>,
    previous: Arc<Set>,
}

impl std::fmt::Debug for Texts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Texts({} + {})", self.current.len(), self.previous.len())
    }
}

impl Texts {
    /// The shared text equal to `text`, if there is one.
    pub fn get(&self, text: &str) -> Option<&Arc<str>> {
        self.current.get(text).or_else(|| self.previous.get(text))
    }

    /// The shared text equal to `text`, else `text` (a cycle's texts: the state is not
    /// changed).
    pub fn shared(&self, text: Arc<str>) -> Arc<str> {
        self.get(&text).cloned().unwrap_or(text)
    }

    /// The shared text equal to `text`, `text` itself when there was none (kept from now on).
    pub fn share(&mut self, text: &Arc<str>) -> Arc<str> {
        if let Some(t) = self.current.get(&**text) {
            return t.clone();
        }
        let kept = self
            .previous
            .get(&**text)
            .cloned()
            .unwrap_or_else(|| text.clone());
        if self.current.len() >= GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        Arc::make_mut(&mut self.current).insert(kept.clone());
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_are_one_allocation_until_two_generations_pass() {
        let mut t = Texts::default();
        let first: Arc<str> = Arc::from("waiting");
        assert!(Arc::ptr_eq(&t.share(&first), &first));
        let again = t.share(&Arc::from("waiting"));
        assert!(Arc::ptr_eq(&again, &first));
        assert!(t.get("waiting").is_some_and(|x| Arc::ptr_eq(x, &first)));
        assert!(Arc::ptr_eq(&t.shared(Arc::from("waiting")), &first));
        let unknown: Arc<str> = Arc::from("unknown");
        assert!(Arc::ptr_eq(&t.shared(unknown.clone()), &unknown));
        // A copy shares the table; applying to it leaves the original as it was.
        let mut copy = t.clone();
        let _ = copy.share(&Arc::from("other"));
        assert!(t.get("other").is_none() && copy.get("other").is_some());
        // Two full generations without it: forgotten.
        for i in 0..2 * GENERATION + 1 {
            let _ = t.share(&Arc::from(format!("text {i}").as_str()));
        }
        assert!(t.get("waiting").is_none());
    }
}
