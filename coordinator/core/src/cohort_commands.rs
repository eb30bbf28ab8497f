//! The cohort commands an admin gives a live cluster (`Command::SetCohort`, `DeleteCohort`,
//! `SetTeamCohort`: format 7, `FORMAT_COHORTS`; `SetCohortWeight`: format 8,
//! `FORMAT_COHORT_WEIGHTS`) and the cohorts' view (`allot get cohorts`). A cohort's weight is
//! kept beside its spec (`Machine::cohort_weights`), which does not store it.
//! A team's cohort is kept beside its compute quota (`Machine::team_cohorts`): the AWS
//! compute quota has no cohort, and a team without one shares the default cohort, as
//! HyperPod's teams do.

use allot_common::api::{ApiError, CohortPairView, CohortView, CohortWeightView, ErrorKind, Reply};
use allot_common::quota::{weight_text, DEFAULT_COHORT};
use allot_common::CohortSpec;

use crate::ids::FrId;
use crate::machine::{Command, Machine};

impl Machine {
    /// Applies a cohort command.
    pub(crate) fn apply_cohorts(&mut self, cmd: &Command) -> Result<Reply, ApiError> {
        match cmd {
            Command::SetCohort(spec) => {
                self.check_cohort_name(&spec.name)?;
                let catalog = self.catalog();
                if let Some(f) = spec.quotas.iter().find(|f| catalog.get(&f.flavor).is_err()) {
                    return Err(ApiError::new(
                        ErrorKind::Invalid,
                        format!(
                            "cohort {}: {:?} is not an instance type of the catalog (allot get nodes shows the cluster's)",
                            spec.name, f.flavor
                        ),
                    ));
                }
                let mut spec = spec.clone();
                spec.fair_share_weight = self.cohort_weights.get(&spec.name).copied();
                self.state.set_cohort(spec)?;
                Ok(Reply::Done)
            }
            Command::DeleteCohort { name } => {
                self.state.delete_cohort(name)?;
                self.cohort_weights.remove(name);
                Ok(Reply::Done)
            }
            Command::SetCohortWeight { cohort, weight } => {
                let (num, den) = *weight;
                if den == 0 || den > 1000 || u64::from(num) > 100 * u64::from(den) {
                    return Err(ApiError::new(
                        ErrorKind::Invalid,
                        format!(
                            "cohort {cohort}: fair-share weight {num}/{den} is not a weight from 0 to 100 with at most 3 decimal places"
                        ),
                    ));
                }
                // In lowest terms, so that equal weights are equal.
                let w = allot_common::quota::lowest_terms((num, den));
                let weight = (w != (1, 1)).then_some(w);
                self.state.set_cohort_weight(cohort, weight)?;
                match weight {
                    Some(w) => self.cohort_weights.insert(cohort.clone(), w),
                    None => self.cohort_weights.remove(cohort),
                };
                Ok(Reply::Done)
            }
            Command::SetTeamCohort { team, cohort } => {
                self.set_team_cohort(team, cohort.as_deref())
            }
            other => Err(ApiError::new(
                ErrorKind::Invalid,
                format!("{} is not a cohort command", other.kind()),
            )),
        }
    }

    /// Puts the admins' cohort weights back into the cohort specs, which do not store them
    /// (after a snapshot is read).
    pub fn restore_cohort_weights(&mut self) {
        for (name, w) in &self.cohort_weights {
            // A weight is kept only for a cohort that exists (deleting it drops the weight).
            let _ = self.state.set_cohort_weight(name, Some(*w));
        }
    }

    /// A cohort name as Kubernetes names objects (a private cohort, `(team NAME)`, is none).
    fn check_cohort_name(&self, name: &str) -> Result<(), ApiError> {
        allot_common::quota::validate_cohort_name(name)
            .map_err(|e| ApiError::new(ErrorKind::Invalid, e.to_string()))
    }

    /// Puts `team` in `cohort` (`None`: the default cohort).
    fn set_team_cohort(&mut self, team: &str, cohort: Option<&str>) -> Result<Reply, ApiError> {
        let t = self.state.team_id(team)?;
        if let Some(c) = cohort {
            self.check_cohort_name(c)?;
        }
        let mut spec = self.state.teams()[t.idx()].spec.clone();
        spec.cohort = Some(cohort.unwrap_or(DEFAULT_COHORT).to_string());
        self.state.set_team(spec)?;
        match cohort {
            Some(c) => self.team_cohorts.insert(team.to_string(), c.to_string()),
            None => self.team_cohorts.remove(team),
        };
        Ok(Reply::Done)
    }

    /// The cohort `team`'s compute quota puts it in: the one `set-team-cohort` gave it, else
    /// the default.
    pub(crate) fn cohort_of_team(&self, team: &str) -> String {
        (self.team_cohorts.get(team).map(String::as_str))
            .unwrap_or(DEFAULT_COHORT)
            .to_string()
    }

    /// Every named cohort's fair-share weight (1 where none was set), by name.
    pub fn cohort_weight_views(&self) -> Vec<CohortWeightView> {
        let mut views: Vec<CohortWeightView> = (self.state.cohorts().iter())
            .filter(|c| !c.private)
            .map(|c| CohortWeightView {
                cohort: c.name.clone(),
                fair_share_weight: weight_text(
                    self.cohort_weights.get(&c.name).copied().unwrap_or((1, 1)),
                ),
            })
            .collect();
        views.sort_by(|a, b| a.cohort.cmp(&b.cohort));
        views
    }

    /// Every named cohort (not the private one of a team without a cohort), by name.
    pub fn cohort_views(&self) -> Vec<CohortView> {
        let st = &self.state;
        let names = st.names();
        let cohorts = st.cohorts();
        let mut views: Vec<CohortView> = cohorts
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.private)
            .map(|(i, c)| {
                let spec = c.spec.clone().unwrap_or_else(|| CohortSpec {
                    fair_share_weight: None,
                    name: c.name.clone(),
                    parent: None,
                    quotas: Vec::new(),
                });
                let own = |fr: FrId| {
                    let (f, r) = names.fr_parts(fr);
                    let fq = spec
                        .quotas
                        .iter()
                        .find(|q| q.flavor == names.flavor_name(f))?;
                    let rn = names.resource_name(r);
                    fq.resources.iter().find(|(n, _)| n == rn).map(|(_, q)| *q)
                };
                let used = &st.acct().pool_used[i];
                let pairs = (0..names.fr_count())
                    .map(|k| FrId(k as u32))
                    .filter(|&fr| c.pool.get(fr) != 0 || used.get(fr) != 0 || own(fr).is_some())
                    .map(|fr| {
                        let (f, r) = names.fr_parts(fr);
                        let qty = |v: i64| names.format_qty(r, v);
                        let q = own(fr).unwrap_or_default();
                        CohortPairView {
                            flavor: names.flavor_name(f).to_string(),
                            resource: names.resource_name(r).to_string(),
                            nominal: qty(q.nominal),
                            borrowing_limit: q.borrowing_limit.map(qty),
                            lending_limit: q.lending_limit.map(qty),
                            pool: qty(c.pool.get(fr)),
                            in_use: qty(used.get(fr)),
                        }
                    })
                    .collect();
                let mut teams: Vec<String> = (c.members.iter())
                    .map(|t| st.teams()[t.idx()].spec.name.clone())
                    .collect();
                teams.sort();
                CohortView {
                    name: c.name.clone(),
                    parent: spec.parent.clone(),
                    children: Vec::new(),
                    teams,
                    pairs,
                }
            })
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        let parents: Vec<(String, String)> = (views.iter())
            .filter_map(|v| Some((v.parent.clone()?, v.name.clone())))
            .collect();
        for (parent, child) in parents {
            if let Some(v) = views.iter_mut().find(|v| v.name == parent) {
                v.children.push(child);
            }
        }
        views
    }
}
