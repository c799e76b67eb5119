//! A plan as `--dry-run` prints it and as it runs: a binary swapped atomically, the directories
//! it creates, and the only commands that may fail.

use super::*;

#[test]
fn words_with_spaces_or_quotes_are_single_quoted() {
    assert_eq!(
        quote("gui/501/com.corral.server"),
        "gui/501/com.corral.server"
    );
    assert_eq!(quote("/Users/a b/corral"), "'/Users/a b/corral'");
    assert_eq!(quote("it's"), r"'it'\''s'");
    assert_eq!(quote(""), "''");
}

#[test]
fn a_plan_prints_as_shell_commands() {
    let plan = Plan {
        steps: vec![
            Step::CreateDir("/h/dir".into()),
            Step::WriteFile {
                path: "/h/dir/unit".into(),
                contents: "a = 1\n".into(),
            },
            Step::run_may_fail(&["svc", "unload"]),
            Step::run(&["svc", "load", "/h/dir/unit"]),
            Step::RemoveFile("/h/old".into()),
        ],
    };
    assert_eq!(
        plan.to_string(),
        "mkdir -p /h/dir\ncat > /h/dir/unit <<'EOF'\na = 1\nEOF\nsvc unload || true\n\
         svc load /h/dir/unit\nrm -f /h/old\n"
    );
    assert_eq!(plan.commands(), ["svc unload", "svc load /h/dir/unit"]);
}

#[test]
fn installing_a_binary_replaces_it_atomically_under_a_running_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (built, installed) = (dir.path().join("built"), dir.path().join("bin/corral"));
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::write(&built, "new version").unwrap();
    std::fs::write(&installed, "old version").unwrap();
    // What a running service has open: the old file, which the swap must leave whole.
    let mut running = std::fs::File::open(&installed).unwrap();
    let step = Step::InstallBinary {
        from: built.clone(),
        to: installed.clone(),
    };
    Plan {
        steps: vec![step.clone()],
    }
    .execute()
    .unwrap();

    let mut old = String::new();
    std::io::Read::read_to_string(&mut running, &mut old).unwrap();
    assert_eq!(old, "old version");
    assert_eq!(std::fs::read_to_string(&installed).unwrap(), "new version");
    let mode = std::fs::metadata(&installed).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    let left: Vec<_> = std::fs::read_dir(installed.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["corral"], "no staging file is left behind");
    assert_eq!(
        Plan { steps: vec![step] }.to_string(),
        format!(
            "install -m 0755 {0}/built {0}/bin/.corral.new\nmv -f {0}/bin/.corral.new {0}/bin/corral\n",
            dir.path().display()
        )
    );
}

#[test]
fn an_owned_directory_gives_only_the_components_it_creates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b");
    let me = nix::unistd::getuid().as_raw();
    let group = nix::unistd::getgid().as_raw();
    let step = Step::CreateOwnedDir {
        path: path.clone(),
        owner: "ada".into(),
        group: "staff".into(),
        uid: me,
        gid: group,
    };
    let plan = Plan { steps: vec![step] };
    plan.execute().unwrap();
    assert!(path.is_dir());
    plan.execute().unwrap();
    assert_eq!(
        plan.to_string(),
        format!("install -d -o ada -g staff {}\n", path.display())
    );
}

#[test]
fn executing_writes_files_and_tolerates_only_may_fail_commands() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sub/unit");
    let plan = Plan {
        steps: vec![
            Step::CreateDir(dir.path().join("sub")),
            Step::WriteFile {
                path: file.clone(),
                contents: "x\n".into(),
            },
            Step::run_may_fail(&["false"]),
        ],
    };
    plan.execute().unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\n");

    Plan {
        steps: vec![
            Step::RemoveFile(file.clone()),
            Step::RemoveFile(file.clone()),
        ],
    }
    .execute()
    .unwrap();
    assert!(!file.exists());

    let error = Plan {
        steps: vec![Step::run(&["false"])],
    }
    .execute()
    .unwrap_err();
    assert!(error.to_string().contains("`false` failed"), "{error:#}");
}
