//! The counted room (`Taking`) against taking candidates' pods off their nodes one by one, the
//! way searches did before it: every order of every subset of four admissions, on a full
//! cluster of two nodes, finds the same victims (or none), and leaves the working copy as it
//! found it. A dry walk over the same order ends fitting exactly when the search finds victims.

use super::*;
use crate::state::State;
use crate::test_cluster::{cluster, submit, FLAVOR};
use allot_common::ResourceName;

/// Teams a and b with 8 GPUs of nominal quota each, two nodes of 8 GPUs filled by four
/// 4-GPU workloads (a0, b0, a1, b1), and b's 8-GPU `big` waiting.
fn full_cluster() -> State {
    let mut st = cluster(&["a", "b"], 2);
    for name in ["a0", "b0", "a1", "b1"] {
        submit(&mut st, name, &name[..1], 4, 0);
    }
    let plan = crate::scheduler::schedule(&st, 0);
    st.apply_plan(&plan, 0);
    submit(&mut st, "big", "b", 8, 0);
    st
}

/// What a search leaves behind: the nodes, each team's usage, the removed set.
fn working_copy(ctx: &Ctx, fr: FrId) -> String {
    let usage: Vec<i64> = (0..2).map(|t| ctx.acct.usage(TeamId(t), fr)).collect();
    format!("{:?} {usage:?} {:?}", ctx.acct.nodes, ctx.removed)
}

type Want<'a> = (
    &'a Workload,
    &'a [(FrId, i64)],
    &'a [(usize, FlavorId, u32)],
);

/// Takes `order` off one by one with their pods given back at once (`Ctx::remove`) until the
/// preemptor fits.
fn by_removal(ctx: &mut Ctx, (wl, usage, place): Want, order: &[Cand]) -> Option<Vec<Victim>> {
    let mut removed = Vec::new();
    for c in order {
        ctx.remove(c.id);
        removed.push((c.clone(), c.reason()));
        if ctx.fits(wl, usage, place, true) {
            return Some(fill_back(ctx, wl, usage, place, true, removed));
        }
    }
    for (c, _) in removed.iter().rev() {
        ctx.restore(c.id);
    }
    None
}

/// The same with the room counted (`Taking`).
fn by_count(ctx: &mut Ctx, (wl, usage, place): Want, order: &[Cand]) -> Option<Vec<Victim>> {
    let mut taking = Taking::default();
    for c in order {
        taking.take(ctx, (wl, place), c.clone(), c.reason());
        if taking.fits(ctx, wl, usage, place) {
            return Some(taking.victims(ctx, wl, usage, place));
        }
    }
    taking.put_back(ctx);
    None
}

/// A dry walk's taking over `order`: whether the preemptor fits with all of them gone, asked
/// once at the end (`Taking::fits_all`); it never fits on the way.
fn by_dry_walk(ctx: &mut Ctx, (wl, usage, place): Want, order: &[Cand]) -> bool {
    let mut taking = Taking {
        dry: true,
        ..Taking::default()
    };
    for c in order {
        taking.take(ctx, (wl, place), c.clone(), c.reason());
        assert!(!taking.fits(ctx, wl, usage, place), "a dry walk never fits");
    }
    let fits = taking.fits_all(ctx, wl, usage, place);
    taking.put_back(ctx);
    fits
}

/// Every order of every subset of `items`.
fn orders(items: &[Cand]) -> Vec<Vec<Cand>> {
    let mut out: Vec<Vec<Cand>> = vec![Vec::new()];
    let mut i = 0;
    while i < out.len() {
        let seq = out[i].clone();
        for c in items {
            if !seq.iter().any(|s| s.id == c.id) {
                let mut next = seq.clone();
                next.push(c.clone());
                out.push(next);
            }
        }
        i += 1;
    }
    out
}

#[test]
fn counted_room_finds_the_victims_that_taking_pods_off_finds_and_leaves_nothing_changed() {
    let st = full_cluster();
    let big = st.find_workload("big").expect("big");
    let wl = st.workload(big);
    assert!(wl.admission.is_none(), "big waits: the cluster is full");
    let flavor = st.names().find_flavor(FLAVOR).expect("flavor");
    let gpu = st.names().find_resource(&ResourceName::gpu()).expect("gpu");
    let fr = st.names().find_fr(flavor, gpu).expect("pair");
    let (usage, place) = (vec![(fr, 8)], vec![(0, flavor, 1)]);
    let cands: Vec<Cand> = ["a0", "b0", "a1", "b1"]
        .iter()
        .map(|n| {
            let id = st.find_workload(n).expect("admitted");
            assert!(st.workload(id).admission.is_some(), "{n} runs");
            Cand {
                id,
                team: st.workload(id).team,
                kind: Kind::Own,
            }
        })
        .collect();
    let mut ctx = Ctx::new(&st, 0);
    let before = working_copy(&ctx, fr);
    let (mut found, mut none) = (0, 0);
    for order in orders(&cands) {
        let want = (wl, &usage[..], &place[..]);
        let removal = by_removal(&mut ctx, want, &order);
        assert_eq!(working_copy(&ctx, fr), before, "after removal of {order:?}");
        let count = by_count(&mut ctx, want, &order);
        assert_eq!(working_copy(&ctx, fr), before, "after counting {order:?}");
        assert_eq!(count, removal, "the victims of {order:?}");
        let dry = by_dry_walk(&mut ctx, want, &order);
        assert_eq!(
            working_copy(&ctx, fr),
            before,
            "after a dry walk of {order:?}"
        );
        assert_eq!(dry, count.is_some(), "the dry walk of {order:?}");
        match count {
            Some(_) => found += 1,
            None => none += 1,
        }
    }
    // Both outcomes are covered: b's own two free its quota, and the room of one node needs
    // both workloads of that node gone.
    assert!(
        found > 0 && none > 0,
        "{found} orders found victims, {none} none"
    );
}
