//! The wire protocol between the supervisor and its workers (filled in by the supervisor issue).
