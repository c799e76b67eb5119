//! A worker killed with SIGKILL mid-write, many times over: the test binary runs itself as the
//! child that saves blocks as fast as it can, and is killed at varying moments. Afterwards no
//! file may fail its checks and the directory may exceed its limit by at most one block.

use std::env;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use super::*;

const CHILD_DIR: &str = "CORRAL_DISK_TIER_CHILD_DIR";
const CHILD_ROUND: &str = "CORRAL_DISK_TIER_CHILD_ROUND";
const BIG_PAYLOAD: usize = 256 << 10;
const BIG_BLOCK: u64 = (HEADER_LEN + BIG_PAYLOAD) as u64;
const LIMIT: u64 = 8 * BIG_BLOCK + BIG_BLOCK / 3;
const ROUNDS: u32 = 10;
/// The child has one block on disk and goes on saving.
const READY: &str = "child: saving";

#[test]
#[ignore = "the child of killed_writer_never_leaves_a_bad_block_or_an_oversized_directory"]
fn child_saves_until_killed() {
    let (Some(dir), Some(round)) = (env::var_os(CHILD_DIR), env::var_os(CHILD_ROUND)) else {
        return;
    };
    let round: u32 = round.to_str().unwrap().parse().unwrap();
    let tier = open(Path::new(&dir), LIMIT);
    let save = |n: u32| {
        let n = (round << 20) | n;
        let payload = (0..BIG_PAYLOAD).map(|i| (i as u32 ^ n) as u8).collect();
        tier.save(key(n), Arc::new(payload));
    };
    // A block on disk before the parent starts its clock, so every round writes something
    // however slow the disk is.
    save(0);
    assert!(tier.flush(SETTLE));
    println!("{READY}");
    for n in 1.. {
        save(n);
    }
}

#[test]
fn killed_writer_never_leaves_a_bad_block_or_an_oversized_directory() {
    let dir = tempfile::tempdir().unwrap();
    let module = module_path!().split_once("::").unwrap().1;
    let child_test = format!("{module}::child_saves_until_killed");
    for round in 0..ROUNDS {
        let mut child = Command::new(env::current_exe().unwrap())
            .args([&child_test, "--exact", "--ignored", "--nocapture"])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_ROUND, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed only once it has saved, however slowly the test binary starts.
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let ready = stdout
            .lines()
            .map_while(Result::ok)
            .any(|line| line == READY);
        assert!(ready, "round {round}: the child never started saving");
        thread::sleep(Duration::from_millis(50 + 37 * u64::from(round % 7)));
        child.kill().unwrap();
        child.wait().unwrap();

        let bytes = dir_bytes(dir.path());
        assert!(
            bytes <= LIMIT + BIG_BLOCK,
            "round {round}: {bytes} bytes on disk"
        );
        let tier = DiskTier::open(dir.path(), FINGERPRINT, shape(), LIMIT).unwrap();
        for (path, _) in dir_files(dir.path()) {
            inspect(&path).unwrap_or_else(|error| panic!("round {round}: {error}"));
        }
        drop(tier);
    }
    assert!(
        !dir_files(dir.path()).is_empty(),
        "the children wrote nothing"
    );
}
