//! Unit tests of the pool: its transitions one by one (`machine`), thousands of seeded random
//! schedules of the state machine with admission and memory (`schedule`), the async API with a
//! simulated world of processes (`acquire`), and seeded interleavings of that API's tasks
//! (`async_schedule`). `sim` holds the simulated processes and the seeded RNG they share.

mod acquire;
mod async_schedule;
mod machine;
mod schedule;
mod sim;
