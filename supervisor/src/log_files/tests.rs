//! The rotating writer keeps at most `keep` files and every line whole; the reader lists them in
//! order and follows `corral.log` through its rotations.

use std::io::Write;

use super::*;

fn config(max_bytes: u64, keep: usize) -> LogConfig {
    LogConfig {
        dir: None,
        max_bytes,
        keep,
    }
}

fn line(i: usize) -> String {
    format!("line {i:05} {}\n", "x".repeat(40))
}

fn write_lines(writer: &Mutex<LineWriter>, lines: std::ops::Range<usize>) {
    for i in lines {
        writer
            .lock()
            .unwrap()
            .write_all(line(i).as_bytes())
            .unwrap();
    }
}

fn read_all(dir: &Path) -> String {
    files(dir)
        .unwrap()
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect()
}

#[test]
fn rotation_keeps_at_most_keep_files_and_whole_lines_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open(dir.path(), &config(4096, 3)).unwrap();
    // About 50 bytes a line: a file holds 81 lines, so 200 lines fill three files.
    write_lines(&writer, 0..200);
    let names: Vec<_> = files(dir.path())
        .unwrap()
        .iter()
        .map(|path| path.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["corral.log.2", "corral.log.1", "corral.log"]);
    let text = read_all(dir.path());
    let expected: String = (0..200).map(line).collect();
    assert_eq!(text, expected, "every line, whole and in order");
    for path in files(dir.path()).unwrap() {
        assert!(std::fs::metadata(&path).unwrap().len() <= 4096, "{path:?}");
    }

    // Past the limit, the oldest lines go, a file at a time.
    write_lines(&writer, 200..400);
    assert_eq!(files(dir.path()).unwrap().len(), 3);
    let text = read_all(dir.path());
    assert!(text.ends_with(&line(399)));
    assert!(!text.contains(&line(0)));
}

#[test]
fn a_reopened_log_appends_and_rotates_where_it_left_off() {
    let dir = tempfile::tempdir().unwrap();
    write_lines(&open(dir.path(), &config(4096, 5)).unwrap(), 0..60);
    write_lines(&open(dir.path(), &config(4096, 5)).unwrap(), 60..120);
    assert_eq!(files(dir.path()).unwrap().len(), 2);
    assert_eq!(read_all(dir.path()), (0..120).map(line).collect::<String>());
}

#[test]
fn last_lines_reach_into_rotated_files_only_as_needed() {
    let dir = tempfile::tempdir().unwrap();
    write_lines(&open(dir.path(), &config(4096, 5)).unwrap(), 0..100);
    let trimmed = |i| line(i).trim_end().to_owned();
    assert_eq!(
        last_lines(dir.path(), 30).unwrap(),
        (70..100).map(trimmed).collect::<Vec<_>>()
    );
    assert_eq!(last_lines(dir.path(), 1000).unwrap().len(), 100);
    assert!(last_lines(dir.path(), 0).unwrap().is_empty());
}

#[test]
fn files_ignore_other_names_and_put_pending_ones_after_the_rotated() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "corral.log",
        "corral.log.1",
        "corral.log.10",
        "corral.log.2",
        "corral.log.pending.3",
        "corral.out.log",
        "corral.log.gz",
        "other.log",
    ] {
        std::fs::write(dir.path().join(name), "").unwrap();
    }
    let names: Vec<_> = files(dir.path())
        .unwrap()
        .iter()
        .map(|path| path.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "corral.log.10",
            "corral.log.2",
            "corral.log.1",
            "corral.log.pending.3",
            "corral.log"
        ]
    );
}

#[test]
fn the_follower_sees_every_line_once_across_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open(dir.path(), &config(4096, 2)).unwrap();
    write_lines(&writer, 0..10);
    let mut out = Vec::new();
    let mut follower = Follower::start(dir.path(), 3, &mut out).unwrap();
    // Polled every 7 lines, 80 lines a file: some polls see a rotation, and the follower must
    // finish the renamed file before it starts the new one.
    for chunk in (10..500).step_by(7) {
        write_lines(&writer, chunk..(chunk + 7).min(500));
        follower.poll(&mut out).unwrap();
    }
    let expected: String = (7..500).map(line).collect();
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn the_follower_waits_for_a_log_that_does_not_exist_yet() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let mut follower = Follower::start(dir.path(), 10, &mut out).unwrap();
    follower.poll(&mut out).unwrap();
    assert!(out.is_empty());
    write_lines(&open(dir.path(), &config(4096, 2)).unwrap(), 0..3);
    follower.poll(&mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        (0..3).map(line).collect::<String>()
    );
}
