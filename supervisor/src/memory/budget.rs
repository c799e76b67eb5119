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
mod tests;
