//! `poolcap bench`, `sim`, `bench-peer` and `predict --validate` run `poolcap-bench` from
//! beside the poolcap executable with the words typed after them, and say in one line what
//! to do when it is not there. A poolcap copied into a directory of its own stands in for an
//! installed one; a shell script there stands in for poolcap-bench and records its argv.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory holding a copy of poolcap (a hard link where possible), and its path.
fn lone_poolcap(name: &str) -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rig-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("poolcap");
    let built = env!("CARGO_BIN_EXE_poolcap");
    if std::fs::hard_link(built, &exe).is_err() {
        std::fs::copy(built, &exe).unwrap();
    }
    (dir, exe)
}

fn run(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe).args(args).output().expect("run poolcap")
}

#[test]
fn each_rig_command_runs_poolcap_bench_with_its_words() {
    let (dir, exe) = lone_poolcap("forward");
    let argv = dir.join("argv");
    let fake = dir.join("poolcap-bench");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s|' \"$a\"; done >> {}\necho >> {}\nexit 7\n",
            argv.display(),
            argv.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&fake, perms).unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["bench", "gen", "--quick", "--help"],
            "gen|--quick|--help|",
        ),
        (&["bench"], ""),
        (&["sim", "--queues", "4"], "sim|--queues|4|"),
        (
            &["bench-peer", "xdp-redirect", "-i", "a"],
            "peer|xdp-redirect|-i|a|",
        ),
        (
            &["predict", "--validate", "/r/x", "--profile", "/p.json"],
            "validate|/r/x|--profile|/p.json|",
        ),
    ];
    for (args, _) in &cases {
        let out = run(&exe, args);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{args:?}: poolcap-bench's exit code"
        );
    }
    let got = std::fs::read_to_string(&argv).unwrap();
    let want: Vec<&str> = cases.iter().map(|(_, w)| *w).collect();
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_poolcap_bench_beside_it_a_rig_command_says_so_in_one_line() {
    let (dir, exe) = lone_poolcap("missing");
    for args in [&["bench", "gen", "--quick"][..], &["sim"], &["bench-peer"]] {
        let out = run(&exe, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("poolcap: ")
                && err.contains(&format!("{}", dir.join("poolcap-bench").display()))
                && err.contains("is not installed beside")
                && err.contains("cargo build --release -p poolcap-bench"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
