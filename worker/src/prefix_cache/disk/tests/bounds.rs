//! The bounds a naive design breaks: a full queue drops instead of blocking (or growing), one
//! save evicts a capped number of files without needing a queue slot, and `forget` wins over a
//! write in progress. Plus the size limit and LRU order that eviction keeps.

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::*;

#[test]
fn full_queue_drops_saves_instead_of_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let options = DiskOptions {
        queue_capacity: 4,
        save_wait: Duration::from_millis(5),
        ..options()
    };
    let tier = DiskTier::open_with(dir.path(), FINGERPRINT, shape(), 1 << 20, options).unwrap();
    let tier = Arc::new(tier);
    tier.hold_writer();
    tier.save(key(0), payload(0));
    assert_eq!(tier.wait_parked(), key(0));

    // The writer stays held, so a blocking send would hang here: the saves run on a thread the
    // test only waits on.
    let (done, saved) = mpsc::channel();
    let saver = Arc::clone(&tier);
    thread::spawn(move || {
        for n in 1..=10 {
            saver.save(key(n), payload(n));
        }
        done.send(()).unwrap();
    });
    saved.recv_timeout(SETTLE).expect("save blocked");

    // Four fill the queue, six are dropped; an unbounded queue would drop none.
    let counters = tier.counters();
    assert_eq!((counters.saves_enqueued, counters.save_drops), (5, 6));
    assert_eq!(counters.backlog, 5);
    tier.release_writer();
    assert!(tier.flush(SETTLE));
    let counters = tier.counters();
    assert_eq!(
        (counters.saves_persisted, counters.files, counters.backlog),
        (5, 5, 0)
    );
}

#[test]
fn one_save_evicts_at_most_the_capped_number_of_files() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    for n in 0..20 {
        save_and_flush(&tier, n);
    }
    drop(tier);

    // Reopened far over its new limit, with no queue room to spare for eviction work.
    let options = DiskOptions {
        queue_capacity: 1,
        max_evictions_per_save: 4,
        ..options()
    };
    let limit = 2 * BLOCK_LEN;
    let tier = DiskTier::open_with(dir.path(), FINGERPRINT, shape(), limit, options).unwrap();
    assert_eq!(tier.counters().files, 20);
    let mut expected: u64 = 20;
    for n in 100..107 {
        save_and_flush(&tier, n);
        expected = (expected + 1).saturating_sub(4).max(2);
        assert_eq!(tier.counters().files, expected, "after saving {n}");
        assert_eq!(dir_files(dir.path()).len() as u64, expected);
        assert!(tier.contains(&key(n)), "the block just saved is kept");
    }
    let counters = tier.counters();
    assert_eq!((counters.evictions, counters.save_drops), (25, 0));
    assert_eq!(counters.bytes_on_disk, limit);
}

#[test]
fn forget_of_a_block_being_written_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    tier.hold_writer();
    tier.save(key(1), payload(1));
    // The writer has its temp file and is about to rename it.
    assert_eq!(tier.wait_parked(), key(1));
    tier.forget(&[key(1)]);
    tier.release_writer();
    assert!(tier.flush(SETTLE));
    assert!(!tier.contains(&key(1)));
    assert!(
        dir_files(dir.path()).is_empty(),
        "no block and no temp file"
    );
    assert_eq!(tier.counters().saves_persisted, 0);

    // The cancellation ends with that write: the key can be saved again.
    save_and_flush(&tier, 1);
    assert!(tier.load(&key(1)).is_some());
}

#[test]
fn forget_of_a_queued_block_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    tier.hold_writer();
    tier.save(key(1), payload(1));
    assert_eq!(tier.wait_parked(), key(1));
    tier.save(key(2), payload(2));
    tier.forget(&[key(2)]);
    assert_eq!(tier.counters().backlog, 1);
    tier.release_writer();
    assert!(tier.flush(SETTLE));
    assert!(!block_file(dir.path(), 2).exists());
    assert!(!tier.contains(&key(2)));
    assert!(tier.contains(&key(1)));
}

#[test]
fn forget_deletes_a_persisted_block() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    save_and_flush(&tier, 1);
    tier.forget(&[key(1), key(9)]);
    assert!(!tier.contains(&key(1)));
    assert!(dir_files(dir.path()).is_empty());
    assert_eq!(tier.counters().bytes_on_disk, 0);
}

#[test]
fn directory_stays_within_its_limit_after_every_save() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 5 * BLOCK_LEN + BLOCK_LEN / 2;
    let tier = open(dir.path(), limit);
    for n in 0..30 {
        save_and_flush(&tier, n);
        let bytes = dir_bytes(dir.path());
        assert!(bytes <= limit, "{bytes} bytes after save {n}");
        assert_eq!(tier.counters().bytes_on_disk, bytes);
    }
    assert_eq!(tier.counters().evictions, 25);
}

#[test]
fn eviction_removes_the_least_recently_used_block() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 3 * BLOCK_LEN);
    for n in 0..3 {
        save_and_flush(&tier, n);
    }
    assert!(tier.load(&key(0)).is_some());
    save_and_flush(&tier, 3);
    assert!(tier.contains(&key(0)));
    assert!(!tier.contains(&key(1)));
    assert!(!block_file(dir.path(), 1).exists());
}

#[test]
fn a_replacement_takes_the_place_of_a_block_being_written_queued_or_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    tier.hold_writer();
    tier.save(key(1), payload(1));
    assert_eq!(tier.wait_parked(), key(1));
    // Being written: the old write is cancelled and the new payload queued behind it.
    tier.replace(key(1), payload(11));
    tier.save(key(2), payload(2));
    // Queued: the job takes the new payload.
    tier.replace(key(2), payload(12));
    tier.release_writer();
    assert!(tier.flush(SETTLE));
    // On disk: the file is rewritten.
    save_and_flush(&tier, 3);
    tier.replace(key(3), payload(13));
    assert!(tier.flush(SETTLE));
    drop(tier);

    let tier = open(dir.path(), 1 << 20);
    for n in 1..=3 {
        assert_eq!(
            tier.load(&key(n)).as_deref(),
            Some(payload(10 + n).as_slice()),
            "block {n}"
        );
    }
    assert_eq!(dir_files(dir.path()).len(), 3, "no temp file left");
}
