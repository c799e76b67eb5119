//! The memory budget and the two decisions made against it: what to stop when memory runs high
//! (`plan_pressure`), and whether a model may load, and what to stop first (`plan_admission`).
//!
//! Both are pure: they take the numbers the pool measured and its idle workers in least recently
//! used order, and return a plan. The pool acts on it under its lock and never stops a worker
//! with leases, so only idle, non-pinned workers are ever offered here.

const GIB: u64 = 1 << 30;

/// Share of the ceiling above which idle workers are stopped.
pub const DEFAULT_SOFT_FRACTION: f64 = 0.85;
/// Share of the ceiling above which loads are refused and every idle worker is stopped.
pub const DEFAULT_HARD_FRACTION: f64 = 0.95;

/// The bytes workers may hold together, and the two watermarks under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// No load is admitted that would take the workers' total above this.
    pub ceiling: u64,
    /// Above this, idle workers are stopped, least recently used first, until back under it.
    pub soft: u64,
    /// Above this, new loads are refused and every idle worker is stopped.
    pub hard: u64,
}

/// What to do about memory in use now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PressurePlan {
    /// Idle workers to stop, by model, in the order given (least recently used first).
    pub stop: Vec<String>,
    /// Over the hard watermark: refuse loads until a later plan says otherwise.
    pub refuse_loads: bool,
}

/// Whether a model may load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Load after stopping these idle workers (least recently used first; often none).
    Admit { evict: Vec<String> },
    /// The estimate does not fit under the ceiling even with every idle worker stopped.
    Refuse {
        needed: u64,
        used: u64,
        ceiling: u64,
    },
    /// The memory would fit, but `max_loaded_models` are loaded and too few of them are idle.
    TooManyLoaded { loaded: usize, max: usize },
}

impl Budget {
    /// A budget with watermarks at these shares of the ceiling. Fractions are clamped to
    /// `0..=1` and the soft one to at most the hard one, so `soft <= hard <= ceiling` always.
    pub fn new(ceiling: u64, soft_fraction: f64, hard_fraction: f64) -> Budget {
        let hard_fraction = hard_fraction.clamp(0.0, 1.0);
        let soft_fraction = soft_fraction.clamp(0.0, hard_fraction);
        Budget {
            ceiling,
            soft: share(ceiling, soft_fraction),
            hard: share(ceiling, hard_fraction),
        }
    }

    /// The default budget on a machine with `total` bytes of RAM.
    pub fn for_total(total: u64) -> Budget {
        Budget::new(
            default_ceiling(total),
            DEFAULT_SOFT_FRACTION,
            DEFAULT_HARD_FRACTION,
        )
    }

    /// Idle workers to stop given `used` bytes, from `idle_lru`: (model, footprint) of the idle,
    /// non-pinned workers, least recently used first.
    pub fn plan_pressure(&self, used: u64, idle_lru: &[(String, u64)]) -> PressurePlan {
        if used > self.hard {
            return PressurePlan {
                stop: idle_lru.iter().map(|(model, _)| model.clone()).collect(),
                refuse_loads: true,
            };
        }
        let excess = used.saturating_sub(self.soft);
        PressurePlan {
            stop: least_recent_covering(idle_lru, excess, 0).unwrap_or_else(|stop| stop),
            refuse_loads: false,
        }
    }

    /// Whether a model estimated at `estimate` bytes may load while workers hold `used`, and
    /// which of `idle_lru` (as in `plan_pressure`) to stop first: the fewest, least recently
    /// used first, so that `used - freed + estimate <= ceiling` and, with `max_loaded_models`,
    /// the new model fits beside the `loaded_models` that stay.
    pub fn plan_admission(
        &self,
        estimate: u64,
        used: u64,
        idle_lru: &[(String, u64)],
        loaded_models: usize,
        max_loaded_models: Option<usize>,
    ) -> Admission {
        let excess = used.saturating_add(estimate).saturating_sub(self.ceiling);
        let surplus_models =
            max_loaded_models.map_or(0, |max| (loaded_models + 1).saturating_sub(max));
        let freeable: u64 = idle_lru.iter().map(|(_, bytes)| bytes).sum();
        if excess > freeable {
            return Admission::Refuse {
                needed: estimate,
                used,
                ceiling: self.ceiling,
            };
        }
        match least_recent_covering(idle_lru, excess, surplus_models) {
            Ok(evict) => Admission::Admit { evict },
            Err(_) => Admission::TooManyLoaded {
                loaded: loaded_models,
                max: max_loaded_models.unwrap_or(usize::MAX),
            },
        }
    }
}

/// The default ceiling: total RAM minus a reserve for the OS, the supervisor and whatever else
/// runs, of max(2 GiB, 10% of RAM); but never below half of RAM, so small machines can still
/// load something.
pub fn default_ceiling(total: u64) -> u64 {
    let reserve = (2 * GIB).max(total / 10);
    total.saturating_sub(reserve).max(total / 2)
}

fn share(bytes: u64, fraction: f64) -> u64 {
    (bytes as f64 * fraction) as u64
}

/// The shortest least-recently-used prefix of `idle_lru` that frees at least `bytes` and stops at
/// least `workers` workers; `Err` with all of them if none does.
fn least_recent_covering(
    idle_lru: &[(String, u64)],
    bytes: u64,
    workers: usize,
) -> Result<Vec<String>, Vec<String>> {
    let mut stop = Vec::new();
    let mut freed = 0u64;
    for (model, footprint) in idle_lru {
        if freed >= bytes && stop.len() >= workers {
            break;
        }
        stop.push(model.clone());
        freed = freed.saturating_add(*footprint);
    }
    if freed >= bytes && stop.len() >= workers {
        Ok(stop)
    } else {
        Err(stop)
    }
}

#[cfg(test)]
mod tests {
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
}
