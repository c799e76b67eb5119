//! The budget's watermarks and its two plans: which idle workers stop under pressure, and
//! which a load evicts (or why it is refused).

use super::*;

fn idle(workers: &[(&str, u64)]) -> Vec<(String, u64)> {
    workers
        .iter()
        .map(|(model, bytes)| (model.to_string(), *bytes))
        .collect()
}

fn names(models: &[&str]) -> Vec<String> {
    models.iter().map(|model| model.to_string()).collect()
}

/// Ceiling 1000: soft 850, hard 950.
fn budget() -> Budget {
    Budget::new(1000, DEFAULT_SOFT_FRACTION, DEFAULT_HARD_FRACTION)
}

#[test]
fn default_ceiling_keeps_a_reserve_but_at_least_half_of_ram() {
    assert_eq!(default_ceiling(64 * GIB), 64 * GIB - 64 * GIB / 10);
    assert_eq!(default_ceiling(16 * GIB), 14 * GIB);
    assert_eq!(default_ceiling(3 * GIB), 3 * GIB / 2);
    assert_eq!(default_ceiling(0), 0);
    let budget = Budget::for_total(16 * GIB);
    assert_eq!(budget.soft, (14 * GIB) * 85 / 100);
    assert_eq!(budget.hard, (14 * GIB) * 95 / 100);
}

#[test]
fn watermarks_stay_ordered_under_the_ceiling() {
    let inverted = Budget::new(1000, 0.99, 0.5);
    assert_eq!((inverted.soft, inverted.hard), (500, 500));
    let out_of_range = Budget::new(1000, -1.0, 2.0);
    assert_eq!((out_of_range.soft, out_of_range.hard), (0, 1000));
    assert_eq!((budget().soft, budget().hard), (850, 950));
}

#[test]
fn below_the_soft_watermark_nothing_is_stopped() {
    let plan = budget().plan_pressure(850, &idle(&[("a", 100)]));
    assert_eq!(plan, PressurePlan::default());
}

#[test]
fn over_the_soft_watermark_idle_workers_stop_oldest_first_until_under_it() {
    let lru = idle(&[("old", 30), ("mid", 50), ("new", 200)]);
    let plan = budget().plan_pressure(900, &lru);
    assert_eq!(plan.stop, names(&["old", "mid"]));
    assert!(!plan.refuse_loads);
    // Not enough to get under: stop them all, still without refusing loads.
    let plan = budget().plan_pressure(940, &idle(&[("a", 10), ("b", 20)]));
    assert_eq!(plan.stop, names(&["a", "b"]));
    assert!(!plan.refuse_loads);
}

#[test]
fn over_the_hard_watermark_loads_are_refused_and_every_idle_worker_stops() {
    let lru = idle(&[("old", 500), ("new", 100)]);
    let plan = budget().plan_pressure(951, &lru);
    assert_eq!(plan.stop, names(&["old", "new"]));
    assert!(plan.refuse_loads);
    let plan = budget().plan_pressure(951, &[]);
    assert!(plan.stop.is_empty() && plan.refuse_loads);
}

#[test]
fn a_model_that_fits_is_admitted_without_eviction() {
    let admission = budget().plan_admission(400, 600, &idle(&[("a", 100)]), 1, None);
    assert_eq!(admission, Admission::Admit { evict: vec![] });
}

#[test]
fn admission_evicts_the_fewest_least_recently_used_workers_that_make_room() {
    let lru = idle(&[("old", 100), ("mid", 150), ("new", 300)]);
    // 700 + 500 = 1200: 200 over the ceiling, freed by old + mid (250).
    let admission = budget().plan_admission(500, 700, &lru, 3, None);
    assert_eq!(
        admission,
        Admission::Admit {
            evict: names(&["old", "mid"])
        }
    );
}

#[test]
fn admission_evicts_to_stay_within_max_loaded_models() {
    let lru = idle(&[("old", 10), ("new", 10)]);
    let admission = budget().plan_admission(10, 20, &lru, 2, Some(2));
    assert_eq!(
        admission,
        Admission::Admit {
            evict: names(&["old"])
        }
    );
    let admission = budget().plan_admission(10, 20, &lru, 3, Some(2));
    assert_eq!(
        admission,
        Admission::Admit {
            evict: names(&["old", "new"])
        }
    );
}

#[test]
fn admission_is_refused_when_even_evicting_every_idle_worker_does_not_fit() {
    let lru = idle(&[("a", 100), ("b", 100)]);
    let admission = budget().plan_admission(700, 600, &lru, 3, None);
    assert_eq!(
        admission,
        Admission::Refuse {
            needed: 700,
            used: 600,
            ceiling: 1000
        }
    );
    let admission = budget().plan_admission(1001, 0, &[], 0, None);
    assert!(matches!(admission, Admission::Refuse { .. }));
}

#[test]
fn admission_reports_the_model_limit_when_too_few_loaded_models_are_idle() {
    let admission = budget().plan_admission(10, 20, &idle(&[("a", 10)]), 3, Some(2));
    assert_eq!(admission, Admission::TooManyLoaded { loaded: 3, max: 2 });
}
