//! `allot create-cohort`, `delete-cohort` and `set-team-cohort`: an admin's tree of cohorts on
//! a live cluster (docs/scheduling.md, Hierarchical cohorts). `allot get cohorts` shows it.

use std::collections::BTreeMap;

use allot_common::api::Body;
use allot_common::{CohortSpec, FlavorQuota, ResourceName, ResourceQuota};
use anyhow::{anyhow, bail};

use crate::client::{api, Client};

/// What `create-cohort` takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CohortFlags {
    /// The cohort's name (a DNS label).
    pub name: String,
    /// The cohort it sits in; none for a root.
    #[arg(long)]
    pub parent: Option<String>,
    /// Quota the cohort owns, lent to its subtree: FLAVOR:RESOURCE=QUANTITY (repeatable),
    /// for example ml.p5.48xlarge:gpu=8.
    #[arg(long, value_name = "FLAVOR:RESOURCE=QUANTITY")]
    pub nominal: Vec<String>,
    /// The most the cohort's subtree may draw beyond its own pool from its parent, per pair
    /// (a cohort with a parent only).
    #[arg(long, value_name = "FLAVOR:RESOURCE=QUANTITY")]
    pub borrowing_limit: Vec<String>,
    /// The most of its pool the cohort lends up to its parent, per pair; the rest is kept for
    /// its own subtree (a cohort with a parent only).
    #[arg(long, value_name = "FLAVOR:RESOURCE=QUANTITY")]
    pub lending_limit: Vec<String>,
}

/// One `FLAVOR:RESOURCE=QUANTITY`.
fn pair(flag: &str, text: &str) -> anyhow::Result<(String, ResourceName, i64)> {
    let bad = |why: String| {
        anyhow!("--{flag} {text:?}: {why}; expected FLAVOR:RESOURCE=QUANTITY, for example ml.p5.48xlarge:gpu=8")
    };
    let (fr, qty) = text.split_once('=').ok_or_else(|| bad("no '='".into()))?;
    let (flavor, res) = fr
        .rsplit_once(':')
        .ok_or_else(|| bad("no ':' between the flavor and the resource".into()))?;
    if flavor.is_empty() {
        return Err(bad("no flavor".into()));
    }
    let res = ResourceName::parse(res).map_err(|e| bad(e.to_string()))?;
    let q = res.parse_quantity(qty).map_err(|e| bad(e.to_string()))?;
    Ok((flavor.to_string(), res, q))
}

/// The cohort `flags` describe.
pub fn spec(flags: &CohortFlags) -> anyhow::Result<CohortSpec> {
    let mut quotas: BTreeMap<(String, ResourceName), ResourceQuota> = BTreeMap::new();
    for (flag, list) in [
        ("nominal", &flags.nominal),
        ("borrowing-limit", &flags.borrowing_limit),
        ("lending-limit", &flags.lending_limit),
    ] {
        for text in list {
            let (flavor, res, q) = pair(flag, text)?;
            let entry = quotas.entry((flavor, res)).or_default();
            let slot = match flag {
                "nominal" => {
                    entry.nominal = q;
                    continue;
                }
                "borrowing-limit" => &mut entry.borrowing_limit,
                _ => &mut entry.lending_limit,
            };
            if slot.replace(q).is_some() {
                bail!("--{flag} {text:?}: that pair is given twice");
            }
        }
    }
    let mut by_flavor: BTreeMap<String, Vec<(ResourceName, ResourceQuota)>> = BTreeMap::new();
    for ((flavor, res), q) in quotas {
        by_flavor.entry(flavor).or_default().push((res, q));
    }
    Ok(CohortSpec {
        name: flags.name.clone(),
        parent: flags.parent.clone(),
        quotas: (by_flavor.into_iter())
            .map(|(flavor, resources)| FlavorQuota { flavor, resources })
            .collect(),
    })
}

pub async fn create(c: &mut Client, flags: &CohortFlags) -> anyhow::Result<()> {
    let spec = spec(flags)?;
    api(c.call(Body::SetCohort(spec)).await)?;
    println!(
        "cohort {} set{} (allot get cohorts shows its pool)",
        flags.name,
        flags
            .parent
            .as_ref()
            .map(|p| format!(" under {p}"))
            .unwrap_or_default()
    );
    Ok(())
}

pub async fn delete(c: &mut Client, name: &str) -> anyhow::Result<()> {
    let body = Body::DeleteCohort {
        name: name.to_string(),
    };
    api(c.call(body).await)?;
    println!("cohort {name} deleted");
    Ok(())
}

pub async fn set_team(c: &mut Client, team: &str, cohort: Option<&str>) -> anyhow::Result<()> {
    let body = Body::SetTeamCohort {
        team: team.to_string(),
        cohort: cohort.map(str::to_string),
    };
    api(c.call(body).await)?;
    let cohort = cohort.unwrap_or(allot_common::quota::DEFAULT_COHORT);
    println!("team {team} now shares quota in cohort {cohort}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(nominal: &[&str], bl: &[&str], ll: &[&str]) -> CohortFlags {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        CohortFlags {
            name: "dept-a".into(),
            parent: Some("org".into()),
            nominal: v(nominal),
            borrowing_limit: v(bl),
            lending_limit: v(ll),
        }
    }

    #[test]
    fn pairs_become_quotas_by_flavor() {
        let s = spec(&flags(
            &["ml.p5.48xlarge:gpu=8", "ml.p5.48xlarge:memory=64Gi"],
            &["ml.p5.48xlarge:gpu=2"],
            &["ml.g5.8xlarge:gpu=0"],
        ))
        .expect("valid");
        assert_eq!(s.quotas.len(), 2);
        let p5 = &s.quotas[1];
        assert_eq!(p5.flavor, "ml.p5.48xlarge");
        let gpu = p5.resources.iter().find(|(r, _)| *r == ResourceName::gpu());
        assert_eq!(
            gpu.map(|(_, q)| (q.nominal, q.borrowing_limit)),
            Some((8, Some(2)))
        );
        assert_eq!(s.quotas[0].resources[0].1.lending_limit, Some(0));
    }

    #[test]
    fn a_bad_pair_names_itself_and_the_form() {
        for bad in [
            "gpu=8",
            "ml.p5:gpu",
            ":gpu=1",
            "ml.p5:nonsense thing=1",
            "ml.p5:gpu=x",
        ] {
            let e = spec(&flags(&[bad], &[], &[])).expect_err(bad).to_string();
            assert!(
                e.contains(bad) && e.contains("FLAVOR:RESOURCE=QUANTITY"),
                "{e}"
            );
        }
        let e = spec(&flags(&[], &["f:gpu=1", "f:gpu=2"], &[]))
            .expect_err("twice")
            .to_string();
        assert!(e.contains("twice"), "{e}");
    }
}
