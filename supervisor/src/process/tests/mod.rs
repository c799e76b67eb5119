//! Unit tests of the process side, against real child processes (`sh`, `sleep`) and socket
//! pairs standing in for workers.

mod client;
mod run_dir;
mod spawn;
mod stop;
