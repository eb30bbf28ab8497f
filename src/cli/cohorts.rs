//! `allot create-cohort`, `delete-cohort` and `set-team-cohort`: an admin's tree of cohorts on
//! a live cluster (docs/scheduling.md, Hierarchical cohorts). `allot get cohorts` shows it.

use std::collections::BTreeMap;

use allot_common::api::{Body, CohortView, Reply};
use allot_common::{CohortSpec, FlavorQuota, ResourceName, ResourceQuota};
use anyhow::{anyhow, bail};

use crate::cli::render::Format;
use crate::client::{api, older_release, Client};

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
    /// Its fair-share weight against its sibling cohorts: 0 to 100, at most 3 decimal places
    /// (default 1). Kept when the cohort is set again without it.
    #[arg(long, value_name = "WEIGHT")]
    pub fair_share_weight: Option<String>,
}

/// A `--fair-share-weight`: a whole number or a decimal of at most 3 places, 0 to 100, as
/// numerator and denominator in lowest terms.
pub fn weight(text: &str) -> anyhow::Result<(u32, u32)> {
    let bad = || {
        anyhow!("--fair-share-weight {text:?}: expected a weight from 0 to 100 with at most 3 decimal places (1, 0.5, 2.25)")
    };
    let (whole, frac) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || frac.len() > 3 || !(frac.is_empty() || digits(frac)) {
        return Err(bad());
    }
    let whole: u32 = whole.parse().map_err(|_| bad())?;
    let frac: u32 = format!("{frac:0<3}").parse().map_err(|_| bad())?;
    let milli = whole.checked_mul(1000).and_then(|w| w.checked_add(frac));
    let milli = milli.filter(|m| *m <= 100_000).ok_or_else(bad)?;
    Ok(allot_common::quota::lowest_terms((milli, 1000)))
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
        fair_share_weight: None,
        name: flags.name.clone(),
        parent: flags.parent.clone(),
        quotas: (by_flavor.into_iter())
            .map(|(flavor, resources)| FlavorQuota { flavor, resources })
            .collect(),
    })
}

pub async fn create(c: &mut Client, flags: &CohortFlags) -> anyhow::Result<()> {
    let spec = spec(flags)?;
    let weight = flags.fair_share_weight.as_deref().map(weight).transpose()?;
    api(c.call(Body::SetCohort(spec)).await)?;
    if let Some(weight) = weight {
        let cohort = flags.name.clone();
        api(c.call(Body::SetCohortWeight { cohort, weight }).await)?;
    }
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

/// Every cohort and, by cohort, its fair-share weight: empty from a coordinator of a release
/// before weights were shown (protocol 10), which cannot read the question.
async fn listed(c: &mut Client) -> anyhow::Result<(Vec<CohortView>, BTreeMap<String, String>)> {
    let Reply::Cohorts(all) = api(c.call(Body::ListCohorts).await)? else {
        bail!("unexpected answer to get cohorts");
    };
    let weights = match c.call(Body::ListCohortWeights).await {
        Ok(Ok(Reply::CohortWeights(ws))) => (ws.into_iter())
            .map(|w| (w.cohort, w.fair_share_weight))
            .collect(),
        Ok(Err(e)) if older_release(&e) => BTreeMap::new(),
        other => {
            api(other)?;
            bail!("unexpected answer to get cohort weights");
        }
    };
    Ok((all, weights))
}

/// A cohort as JSON: its view with its weight (`null` where the coordinator does not say).
fn cohort_json(c: &CohortView, weights: &BTreeMap<String, String>) -> serde_json::Value {
    let mut v = serde_json::to_value(c).unwrap_or(serde_json::Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "fair_share_weight".into(),
            weights.get(&c.name).cloned().into(),
        );
    }
    v
}

/// `allot get cohorts`: every cohort, its place, teams, weight and pool.
pub async fn get(c: &mut Client, format: Format) -> anyhow::Result<()> {
    let (all, weights) = listed(c).await?;
    match format {
        Format::Json => {
            let list: Vec<serde_json::Value> =
                all.iter().map(|x| cohort_json(x, &weights)).collect();
            let v = serde_json::json!({ "Cohorts": list });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).unwrap_or_else(|e| e.to_string())
            );
        }
        Format::Table => print!("{}", crate::cli::render::render_cohorts(&all, &weights)),
    }
    Ok(())
}

/// `allot describe cohort NAME`: one cohort in its tree (the path to its root, the cohorts and
/// teams below it), its fair-share weight and, per (flavor, resource), its own quota, limits,
/// pool and use.
pub async fn describe(c: &mut Client, name: &str, format: Format) -> anyhow::Result<()> {
    let (all, weights) = listed(c).await?;
    let Some(cohort) = all.iter().find(|x| x.name == name) else {
        let known: Vec<&str> = all.iter().map(|x| x.name.as_str()).collect();
        bail!(
            "unknown cohort {name:?}; cohorts: {}",
            if known.is_empty() {
                "none (allot create-cohort makes one)".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    match format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&cohort_json(cohort, &weights))
                .unwrap_or_else(|e| e.to_string())
        ),
        Format::Table => print!(
            "{}",
            render_cohort(cohort, &all, weights.get(name).map(String::as_str))
        ),
    }
    Ok(())
}

/// A cohort in words: where it sits, what is below it, its weight (`None`: not known), and
/// each pair's quota and use.
fn render_cohort(c: &CohortView, all: &[CohortView], weight: Option<&str>) -> String {
    let by_name: BTreeMap<&str, &CohortView> = all.iter().map(|x| (x.name.as_str(), x)).collect();
    // The path to its root (a parent named but not listed ends it).
    let mut path = vec![c.name.as_str()];
    let mut at = c.parent.as_deref();
    while let Some(p) = at.filter(|p| !path.contains(p) && path.len() <= 16) {
        path.push(p);
        at = by_name.get(p).and_then(|x| x.parent.as_deref());
    }
    // Every team below it, through its child cohorts.
    let mut teams: Vec<&str> = Vec::new();
    let mut todo = vec![c];
    let mut seen = vec![c.name.as_str()];
    while let Some(x) = todo.pop() {
        teams.extend(x.teams.iter().map(String::as_str));
        for child in &x.children {
            if let Some(cx) = by_name
                .get(child.as_str())
                .filter(|_| !seen.contains(&child.as_str()))
            {
                seen.push(child);
                todo.push(cx);
            }
        }
    }
    teams.sort_unstable();
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut out = format!("cohort {}\n", c.name);
    out += &format!(
        "place: {} ({} level{} from its root)\n",
        path.join(" < "),
        path.len(),
        if path.len() == 1 { "" } else { "s" }
    );
    out += &format!(
        "fair-share weight: {}\n",
        match weight {
            Some(w) if c.parent.is_some() => format!("{w} (against its sibling cohorts)"),
            Some(w) => format!("{w} (a root: it weighs against no sibling)"),
            None => "not shown by this coordinator (a release before protocol 10)".into(),
        }
    );
    out += &format!("child cohorts: {}\n", list(&c.children));
    out += &format!("its own teams: {}\n", list(&c.teams));
    out += &format!(
        "every team below it: {}\n",
        if teams.is_empty() {
            "-".to_string()
        } else {
            teams.join(", ")
        }
    );
    if c.pairs.is_empty() {
        out += "quota: none of its own, and nothing lent to it yet\n";
        return out;
    }
    out += "quota (own: what it owns; pool: its subtree's quota; in use: what its subtree uses of the pool):\n";
    for p in &c.pairs {
        out += &format!(
            "  {} {}: own {}, borrowing limit {}, lending limit {}, pool {}, in use {}\n",
            p.flavor,
            p.resource,
            p.nominal,
            p.borrowing_limit.as_deref().unwrap_or("-"),
            p.lending_limit.as_deref().unwrap_or("-"),
            p.pool,
            p.in_use
        );
    }
    out
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
            fair_share_weight: None,
        }
    }

    #[test]
    fn a_weight_is_a_number_from_0_to_100_with_at_most_3_places() {
        for (text, want) in [
            ("1", (1, 1)),
            ("2", (2, 1)),
            ("0", (0, 1)),
            ("0.5", (1, 2)),
            ("2.25", (9, 4)),
            ("100", (100, 1)),
        ] {
            assert_eq!(weight(text).expect(text), want, "{text}");
        }
        for text in ["-1", "100.5", "0.0001", "1e2", "", ".5", "two"] {
            let e = weight(text).expect_err(text).to_string();
            assert!(e.contains("from 0 to 100"), "{text}: {e}");
        }
    }

    #[test]
    fn a_cohort_is_described_in_its_tree() {
        let view =
            |name: &str, parent: Option<&str>, children: &[&str], teams: &[&str]| CohortView {
                name: name.into(),
                parent: parent.map(str::to_string),
                children: children.iter().map(|s| s.to_string()).collect(),
                teams: teams.iter().map(|s| s.to_string()).collect(),
                pairs: Vec::new(),
            };
        let mut dept = view("dept-a", Some("org"), &["lab"], &["a1"]);
        dept.pairs.push(allot_common::api::CohortPairView {
            flavor: "ml.p5.48xlarge".into(),
            resource: "gpu".into(),
            nominal: "8".into(),
            borrowing_limit: Some("4".into()),
            lending_limit: None,
            pool: "24".into(),
            in_use: "10".into(),
        });
        let all = vec![
            view("org", None, &["dept-a"], &[]),
            dept.clone(),
            view("lab", Some("dept-a"), &[], &["l1", "l2"]),
        ];
        let text = render_cohort(&dept, &all, Some("0.5"));
        for part in [
            "place: dept-a < org (2 levels from its root)",
            "fair-share weight: 0.5 (against its sibling cohorts)",
            "child cohorts: lab",
            "its own teams: a1",
            "every team below it: a1, l1, l2",
            "ml.p5.48xlarge gpu: own 8, borrowing limit 4, lending limit -, pool 24, in use 10",
        ] {
            assert!(text.contains(part), "{part:?} missing from\n{text}");
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
