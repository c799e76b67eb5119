//! corral's supervisor as a library. The `corral` binary is a thin command-line layer over these
//! modules, so integration tests and other tools call exactly the code the binary runs.

pub mod activity;
pub mod admin;
pub mod api;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod dashboard;
pub mod default_model;
pub mod dispatch;
pub mod eviction;
pub mod log_files;
pub mod log_tail;
pub mod memory;
pub mod metrics;
pub mod ops;
pub mod pool;
pub mod process;
pub mod pull;
pub mod registry;
pub mod sampling_defaults;
pub mod serve;
pub mod service;
pub mod state_dir;
