//! Helpers for the end-to-end tests in `tests/`: finding the built binaries, making fixtures.
