//! The last lines corral logged, kept in memory for the dashboard's log view whatever the log
//! goes to (stderr, or the files of a service): [`Tee`] wraps the log's writer and keeps a copy
//! of each line it writes.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Mutex, PoisonError};

use tracing_subscriber::fmt::MakeWriter;

/// Lines kept.
const KEPT: usize = 2000;

static TAIL: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// The last `count` lines logged, oldest first.
pub fn recent(count: usize) -> Vec<String> {
    let tail = TAIL.lock().unwrap_or_else(PoisonError::into_inner);
    tail.iter()
        .skip(tail.len().saturating_sub(count))
        .cloned()
        .collect()
}

/// A log writer that also keeps what it writes in the tail.
pub struct Tee<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Tee<M> {
    type Writer = TeeWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        TeeWriter {
            inner: self.0.make_writer(),
            written: Vec::new(),
        }
    }
}

/// One log event's writer: the event's lines join the tail when it is dropped.
pub struct TeeWriter<W: Write> {
    inner: W,
    written: Vec<u8>,
}

impl<W: Write> Write for TeeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.written.extend_from_slice(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for TeeWriter<W> {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.written);
        let mut tail = TAIL.lock().unwrap_or_else(PoisonError::into_inner);
        for line in text.lines().filter(|line| !line.is_empty()) {
            if tail.len() == KEPT {
                tail.pop_front();
            }
            tail.push_back(without_colours(line));
        }
    }
}

/// `line` without the ANSI colour codes of a terminal's log.
fn without_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(char) = chars.next() {
        if char == '\u{1b}' {
            // CSI: ESC [ parameters, then one final letter.
            for char in chars.by_ref() {
                if char.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(char);
        }
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_written_joins_the_tail_without_its_colours() {
        let tee = Tee(Vec::<u8>::new);
        {
            let mut writer = tee.make_writer();
            writer
                .write_all(b"\x1b[32m INFO\x1b[0m first line of the tail test\nsecond\n")
                .unwrap();
        }
        let recent = recent(KEPT);
        let at = recent
            .iter()
            .position(|line| line == " INFO first line of the tail test")
            .unwrap();
        assert_eq!(recent[at + 1], "second");
    }
}
