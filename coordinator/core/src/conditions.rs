//! The condition types a workload carries, as Kueue names them. The code names them by this
//! enum; the condition a workload records (and the API shows) holds Kueue's string
//! (`ConditionType::as_str`), so snapshots and the wire keep their form.

/// A workload condition's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// True once quota is reserved for it; false with the reason it waits.
    QuotaReserved,
    /// True while admitted.
    Admitted,
    /// True once it was evicted (preempted, node lost, pods not ready, resumed elsewhere).
    Evicted,
    /// True once a preemption picked it, with the preemption's reason.
    Preempted,
    /// False while it waits out a backoff out of its queue; true once queued again.
    Requeued,
    /// True once it succeeded, failed or was cancelled.
    Finished,
}

impl ConditionType {
    /// Kueue's string for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::QuotaReserved => "QuotaReserved",
            ConditionType::Admitted => "Admitted",
            ConditionType::Evicted => "Evicted",
            ConditionType::Preempted => "Preempted",
            ConditionType::Requeued => "Requeued",
            ConditionType::Finished => "Finished",
        }
    }
}
