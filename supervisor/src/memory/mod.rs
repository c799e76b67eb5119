//! The pure building blocks of memory-aware eviction: how much a worker process holds
//! (`footprint`), how much the machine has (`system`), what a model will need before it is loaded
//! (`estimate`), how users write amounts (`size`), and the decisions made from those numbers
//! (`budget`). Nothing here holds state or touches the pool; the pool calls these under its lock
//! and acts on the plans they return.

pub mod budget;
pub mod estimate;
pub mod footprint;
pub mod size;
pub mod system;

pub use budget::{Admission, Budget, PressurePlan};
pub use estimate::{ModelEstimate, estimate_model_bytes};
pub use footprint::process_footprint;
pub use size::{MemoryAmount, ParseMemoryAmountError, format_bytes};
pub use system::{SystemMemory, system_memory};
